import { readdirSync, readFileSync } from 'node:fs';
import { join, relative } from 'node:path';
import { describe, expect, it } from 'vitest';
import { StepwiseError } from '../src/domain/errors.js';
import { GatewayUnavailable } from '../src/gym/agent/installed.js';
import { IntegrityError, ToolInstallError } from '../src/gym/install-kit/index.js';
import { SandboxError } from '../src/gym/sandbox/index.js';
import { ToolFailure } from '../src/gym/tools/failure.js';
import { CsvError, parseCsvTable } from '../src/gym/verify/index.js';
import { CombinationEvalError } from '../src/rewards/combination.js';
import { JsonPathError, parseJsonPath } from '../src/rewards/json-path.js';
import { isRetryable } from '../src/rewards/plugin.js';
import { StepwiseHttpError } from '../src/sdk/client.js';

const SRC = join(import.meta.dirname, '..', 'src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(path);
    return /\.tsx?$/.test(e.name) && !/\.test\.tsx?$/.test(e.name) ? [path] : [];
  });
}

describe('the StepwiseError family (issue 26)', () => {
  it('no class in src/ extends a built-in error except StepwiseError itself', () => {
    const strays: string[] = [];
    for (const file of sourceFiles(SRC)) {
      const text = readFileSync(file, 'utf8');
      for (const m of text.matchAll(
        /class\s+(\w+)\s+extends\s+(Error|TypeError|RangeError|SyntaxError)\b/g,
      )) {
        if (m[1] !== 'StepwiseError') strays.push(`${relative(SRC, file)}: ${m[1]} extends ${m[2]}`);
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
