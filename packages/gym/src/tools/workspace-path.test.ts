import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, posix, relative } from 'node:path';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ToolFailure } from './failure.js';
import { resolveWorkspacePath } from './workspace-path.js';

const MOUNT = '/root/.openclaw/workspace';
let root: string;
let workspace: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'stepwise-paths-'));
  workspace = join(root, 'ws');
  mkdirSync(join(workspace, 'a', 'b'), { recursive: true });
  writeFileSync(join(workspace, 'a', 'file.txt'), 'x');
  writeFileSync(join(root, 'secret'), 'x');
  symlinkSync('../secret', join(workspace, 'up'));
  symlinkSync(join(root, 'secret'), join(workspace, 'abs-out'));
  symlinkSync('a/b', join(workspace, 'down'));
  symlinkSync(`${MOUNT}/a`, join(workspace, 'abs-in'));
  symlinkSync('..', join(workspace, 'a', 'parent'));
});

afterAll(() => rmSync(root, { recursive: true, force: true }));

const context = () => ({ workspace, mountDir: MOUNT });

describe('resolveWorkspacePath', () => {
  it('maps relative, absolute and ~ paths into the workspace', async () => {
    for (const input of [
      'a/file.txt',
      `${MOUNT}/a/file.txt`,
      '~/.openclaw/workspace/a/file.txt',
      './a//file.txt',
    ]) {
      expect(await resolveWorkspacePath(input, context())).toEqual({
        host: join(workspace, 'a', 'file.txt'),
        sandbox: `${MOUNT}/a/file.txt`,
        exists: true,
      });
    }
    expect(await resolveWorkspacePath('new/dir/f.txt', context())).toMatchObject({ exists: false });
    expect((await resolveWorkspacePath('abs-in/file.txt', context())).host).toBe(
      join(workspace, 'a', 'file.txt'),
    );
    expect((await resolveWorkspacePath('down/../file.txt', context())).host).toBe(
      join(workspace, 'a', 'file.txt'),
    );
    expect((await resolveWorkspacePath('a/parent/a', context())).host).toBe(join(workspace, 'a'));
  });

  it('refuses escapes', async () => {
    for (const input of [
      '..',
      '../ws/a',
      '/etc/passwd',
      '/root/.openclaw',
      'up',
      'abs-out',
      'a/parent/..',
      'up/x',
    ]) {
      await expect(resolveWorkspacePath(input, context()), input).rejects.toMatchObject({
        errorType: 'path_outside_workspace',
      });
    }
  });

  it('never yields a host path outside the workspace, whatever the path', async () => {
    const segment = fc.constantFrom(
      'a',
      'b',
      'file.txt',
      '..',
      '.',
      'up',
      'abs-out',
      'down',
      'abs-in',
      'parent',
      'new',
    );
    await fc.assert(
      fc.asyncProperty(
        fc.array(segment, { minLength: 1, maxLength: 8 }),
        fc.boolean(),
        async (parts, absolute) => {
          const input = absolute ? posix.join(MOUNT, ...parts) : parts.join('/');
          try {
            const resolved = await resolveWorkspacePath(input, context());
            const rel = relative(workspace, resolved.host);
            expect(rel.startsWith('..')).toBe(false);
            expect(resolved.sandbox === MOUNT || resolved.sandbox.startsWith(`${MOUNT}/`)).toBe(true);
          } catch (error) {
            expect(error).toBeInstanceOf(ToolFailure);
          }
        },
      ),
      { numRuns: 300 },
    );
  });
});
