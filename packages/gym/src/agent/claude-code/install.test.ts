import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { IntegrityError } from '../../install-kit/index.js';
import {
  CLAUDE_CODE_INTEGRITY,
  CLAUDE_CODE_PACKAGE,
  CLAUDE_CODE_VERSION,
  findClaudeCode,
  unpackClaudeCode,
} from './install.js';

const scratch = mkdtempSync(join(tmpdir(), 'stepwise-claude-code-install-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** A tarball shaped like the platform package: package/claude beside other files. */
function fakeTarball(): { path: string; integrity: string } {
  const src = join(scratch, `src-${Math.random().toString(36).slice(2)}`);
  mkdirSync(join(src, 'package'), { recursive: true });
  writeFileSync(join(src, 'package', 'claude'), '#!/bin/sh\necho fake\n');
  writeFileSync(join(src, 'package', 'README.md'), 'readme\n');
  const path = join(scratch, `pkg-${Math.random().toString(36).slice(2)}.tgz`);
  execFileSync('tar', ['-czf', path, '-C', src, 'package']);
  const integrity = `sha512-${createHash('sha512').update(readFileSync(path)).digest('base64')}`;
  return { path, integrity };
}

describe('the Claude Code install', () => {
  it('pins the linux-x64 platform package by exact version and sha512', () => {
    expect(CLAUDE_CODE_PACKAGE).toBe(`@anthropic-ai/claude-code-linux-x64@${CLAUDE_CODE_VERSION}`);
    expect(CLAUDE_CODE_VERSION).toMatch(/^\d+\.\d+\.\d+$/);
    expect(CLAUDE_CODE_INTEGRITY).toMatch(/^sha512-[A-Za-z0-9+/]{86}==$/);
  });

  it('unpacks only the binary, executable, from a tarball that matches its hash', async () => {
    const { path, integrity } = fakeTarball();
    const dir = join(scratch, 'good');
    const binary = await unpackClaudeCode(path, dir, integrity);
    expect(binary).toBe(join(dir, 'bin', 'claude'));
    expect(execFileSync(binary, { encoding: 'utf8' })).toBe('fake\n');
    expect(readdirSync(dir)).toEqual(['bin']);
  });

  it('refuses a tarball whose hash is not the pinned one, writing nothing', async () => {
    const { path } = fakeTarball();
    const dir = join(scratch, 'bad');
    await expect(unpackClaudeCode(path, dir)).rejects.toBeInstanceOf(IntegrityError);
    expect(() => readdirSync(dir)).toThrow(/ENOENT/);
  });

  it('finds no install where the stamp is missing or names another version', () => {
    const tools = join(scratch, 'tools');
    const installDir = join(tools, `claude-code-${CLAUDE_CODE_VERSION}`);
    mkdirSync(join(installDir, 'bin'), { recursive: true });
    writeFileSync(join(installDir, 'bin', 'claude'), '');
    expect(findClaudeCode(tools)).toBeNull();
    const stamp = {
      claudeCode: CLAUDE_CODE_VERSION,
      package: CLAUDE_CODE_PACKAGE,
      integrity: CLAUDE_CODE_INTEGRITY,
      installedAt: new Date().toISOString(),
    };
    writeFileSync(join(installDir, 'stamp.json'), JSON.stringify({ ...stamp, claudeCode: '0.0.1' }));
    expect(findClaudeCode(tools)).toBeNull();
    writeFileSync(join(installDir, 'stamp.json'), JSON.stringify(stamp));
    expect(findClaudeCode(tools)).toMatchObject({
      dir: installDir,
      claude: join(installDir, 'bin', 'claude'),
    });
  });
});
