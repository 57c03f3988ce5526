import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createWorkspaceVolume, sweepDeadWorkspaces } from './workspace-volume.js';

/*
 * A workspace tmpfs is a host mount: a process SIGKILLed mid-sample cannot unmount it. The next
 * sweep of the work folder (each sample starts with one) takes down those whose owner is gone, and
 * never one whose owner lives. Needs root with mount permitted (as the gym's kernel quotas do).
 */

const QUOTA = { bytes: 1 << 20, inodes: 64 };
const mountedAt = (path: string) =>
  readFileSync('/proc/self/mounts', 'utf8')
    .split('\n')
    .some((line) => line.split(' ')[1] === path);

let root: string;
let canMount = false;
beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'stepwise-volume-'));
  if (process.getuid?.() !== 0) return;
  const probe = await createWorkspaceVolume(join(root, 'probe'), QUOTA);
  canMount = probe.kernel;
  await probe.release();
});
afterAll(() => {
  rmSync(root, { recursive: true, force: true });
});

/** A child process that mounts a workspace at `path` (its sample folder made first), then waits. */
async function mountInChild(path: string): Promise<ReturnType<typeof spawn>> {
  const module = new URL('./workspace-volume.ts', import.meta.url).href;
  const script = `
    import { mkdirSync, writeFileSync } from 'node:fs';
    import { dirname } from 'node:path';
    const { createWorkspaceVolume } = await import(${JSON.stringify(module)});
    mkdirSync(dirname(${JSON.stringify(path)}), { recursive: true });
    const v = await createWorkspaceVolume(${JSON.stringify(path)}, ${JSON.stringify(QUOTA)});
    writeFileSync(${JSON.stringify(join(path, 'file.txt'))}, 'agent output');
    console.log(v.kernel ? 'mounted' : 'plain');
    setInterval(() => {}, 1000);
  `;
  const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const said = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('\n')) resolve(out.trim());
    });
    child.once('exit', (code) => reject(new Error(`the child exited (${code}) before mounting`)));
  });
  expect(said).toBe('mounted');
  return child;
}

const killed = (child: ReturnType<typeof spawn>) =>
  new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGKILL');
  });

describe('workspace volumes of a killed process', () => {
  it("are unmounted and removed by the next sweep of their work folder; a live owner's stay", async (ctx) => {
    if (!canMount) return ctx.skip();
    const dead = join(root, 'sum-1-0-dead', 'workspace');
    const child = await mountInChild(dead);
    await killed(child);
    // The kernel keeps the mount of a process that died without unmounting it.
    expect(mountedAt(dead)).toBe(true);

    mkdirSync(join(root, 'sum-1-1-live'));
    const live = await createWorkspaceVolume(join(root, 'sum-1-1-live', 'workspace'), QUOTA);
    expect(live.kernel).toBe(true);
    try {
      expect(await sweepDeadWorkspaces(root)).toEqual([dead]);
      expect(mountedAt(dead)).toBe(false);
      expect(existsSync(join(root, 'sum-1-0-dead'))).toBe(false);
      // This process still owns its volume: untouched.
      expect(mountedAt(live.path)).toBe(true);
      expect(await sweepDeadWorkspaces(root)).toEqual([]);
    } finally {
      expect(await live.release()).toBeNull();
    }
    expect(mountedAt(live.path)).toBe(false);
  }, 60_000);

  it('are left alone under another work folder', async (ctx) => {
    if (!canMount) return ctx.skip();
    const other = mkdtempSync(join(tmpdir(), 'stepwise-volume-other-'));
    const dead = join(other, 'sample', 'workspace');
    try {
      await killed(await mountInChild(dead));
      expect(await sweepDeadWorkspaces(root)).toEqual([]);
      expect(mountedAt(dead)).toBe(true);
      expect(await sweepDeadWorkspaces(other)).toEqual([dead]);
    } finally {
      rmSync(other, { recursive: true, force: true });
    }
  }, 60_000);
});
