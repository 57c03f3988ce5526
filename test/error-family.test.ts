import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StepwiseError } from '../packages/core/src/domain/errors.js';
import { CombinationEvalError } from '../packages/core/src/rewards/combination.js';
import { JsonPathError, parseJsonPath } from '../packages/core/src/rewards/json-path.js';
import { isRetryable } from '../packages/core/src/rewards/plugin.js';
import { StepwiseHttpError } from '../packages/core/src/sdk/client.js';
import { GatewayUnavailable } from '../packages/gym/src/agent/installed.js';
import { IntegrityError, ToolInstallError } from '../packages/gym/src/install-kit/index.js';
import { SandboxError } from '../packages/gym/src/sandbox/index.js';
import { ToolFailure } from '../packages/gym/src/tools/failure.js';
import { CsvError, parseCsvTable } from '../packages/gym/src/verify/index.js';

const ROOT = join(import.meta.dirname, '..');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.tsx?$/.test(e.name) && !/\.test\.tsx?$/.test(e.name) ? [path] : [];
  });
}

describe('the StepwiseError family (issue 26)', () => {
  it('no class in the sources extends a built-in error except StepwiseError itself', () => {
    const strays: string[] = [];
    for (const file of ['src', 'packages'].flatMap((d) => sourceFiles(join(ROOT, d)))) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(
        /class\s+(\w+)\s+extends\s+(Error|TypeError|RangeError|SyntaxError)\b/g,
      )) {
        if (m[1] !== 'StepwiseError') strays.push(`${relative(ROOT, file)}: ${m[1]} extends ${m[2]}`);
      }
    }
    expect(strays).toEqual([]);
  });

  it('errors thrown by parsers and tools carry a status and a code', () => {
    const csv = (() => {
      try {
        parseCsvTable('a,b\n"open\n');
      } catch (error) {
        return error;
      }
    })();
    expect(csv).toBeInstanceOf(CsvError);
    expect(csv).toMatchObject({ status: 422, code: 'invalid_csv', line: 2 });
    expect(() => parseJsonPath('$.[')).toThrow(JsonPathError);
    expect(() => parseJsonPath('$.[')).toThrow(StepwiseError);
    expect(new ToolFailure('no_match', 'Error: no match')).toMatchObject({ status: 422, code: 'no_match' });
    expect(new IntegrityError('/x/node.tar.xz', 'sha512-a', 'sha512-b')).toMatchObject({
      name: 'IntegrityError',
      code: 'integrity_mismatch',
    });
    expect(new IntegrityError('/x', 'a', 'b')).toBeInstanceOf(ToolInstallError);
  });

  it('a reward worker retries infrastructure failures, not a combination that cannot be computed', () => {
    expect(isRetryable(new SandboxError('bwrap could not be started'))).toBe(true);
    expect(isRetryable(new GatewayUnavailable('the gateway answered 502'))).toBe(true);
    expect(isRetryable(new CombinationEvalError('division by zero'))).toBe(false);
  });

  it('an SDK error keeps its status, code, field and retry rule, in the server error shape', () => {
    const busy = new StepwiseHttpError(503, 'unavailable', 'draining');
    const bad = new StepwiseHttpError(400, 'invalid_request', 'batch_size: too big', 'batch_size');
    expect(busy).toBeInstanceOf(StepwiseError);
    expect([busy.isRetryable, bad.isRetryable, new StepwiseHttpError(429, 'x', 'y').isRetryable]).toEqual([
      true,
      false,
      true,
    ]);
    expect(JSON.parse(JSON.stringify(bad))).toEqual({
      error: { code: 'invalid_request', message: 'batch_size: too big', field: 'batch_size' },
    });
  });
});
