import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { walkWorkspacePath } from './workspace-path.js';

const MOUNT = '/root/.openclaw/workspace';
let root: string;
let ws: string;

beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), 'stepwise-walk-'));
  ws = join(root, 'ws');
  mkdirSync(join(ws, 'a'), { recursive: true });
  writeFileSync(join(ws, 'a', 'f'), 'x');
  symlinkSync(join(ws, 'a', 'f'), join(ws, 'host-abs'));
  symlinkSync(`${MOUNT}/a/f`, join(ws, 'mount-abs'));
  symlinkSync('loop', join(ws, 'loop'));
  symlinkSync('nowhere/../a', join(ws, 'dangling-up'));
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('walkWorkspacePath: one walk, read in the sandbox or on the host', () => {
  it("an absolute symlink target is the view's own path", async () => {
    const sandbox = { kind: 'sandbox', mountDir: MOUNT } as const;
    expect(await walkWorkspacePath(ws, 'mount-abs', sandbox)).toMatchObject({
      kind: 'inside',
      parts: ['a', 'f'],
    });
    expect(await walkWorkspacePath(ws, 'host-abs', sandbox)).toEqual({ kind: 'outside' });
    expect(await walkWorkspacePath(ws, 'host-abs', { kind: 'host' })).toMatchObject({
      kind: 'inside',
      host: join(ws, 'a', 'f'),
      exists: true,
    });
    expect(await walkWorkspacePath(ws, 'mount-abs', { kind: 'host' })).toEqual({ kind: 'outside' });
  });

  it('loops, `..` past a missing component, and what does not exist', async () => {
    expect(await walkWorkspacePath(ws, 'loop', { kind: 'host' })).toEqual({ kind: 'loop' });
    expect(await walkWorkspacePath(ws, 'dangling-up', { kind: 'host' })).toEqual({ kind: 'missing_parent' });
    expect(await walkWorkspacePath(ws, 'a/new/file', { kind: 'host' })).toMatchObject({
      kind: 'inside',
      parts: ['a', 'new', 'file'],
      exists: false,
    });
    expect(await walkWorkspacePath(ws, 'a/f/x', { kind: 'host' })).toMatchObject({ exists: false });
  });
});
