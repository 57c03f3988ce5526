import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdir, readFile, realpath, rename, rmdir } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { promisify } from 'node:util';
import { removeTree } from './workspace-tree.js';

/*
 * A sample's workspace as a filesystem of its own: a tmpfs mounted on the host (root only) with
 * `size=` and `nr_inodes=`, so the kernel itself refuses the byte and the file past the quota, whoever
 * writes (the sandbox, or the host for the built-in agent's tools), and removing it is an unmount
 * however many files or however deep. Where mounting is not permitted the workspace is a plain
 * directory and the sandbox measures it from the host instead (disk-usage.ts). docs/gym-sandbox.md
 *
 * A host mount outlives the process that made it: one SIGKILLed mid-sample leaves its tmpfs behind.
 * Each tmpfs names its owner (pid and start time) as its source, and the next sample under the same
 * work folder unmounts and removes those whose owner is gone (sweepDeadWorkspaces).
 */

const run = promisify(execFile);
const MOUNT = '/usr/bin/mount';
const UMOUNT = '/usr/bin/umount';

export interface VolumeQuota {
  bytes: number;
  /** Files, directories, symlinks... the workspace may hold (its root not counted). */
  inodes: number;
}

export interface WorkspaceVolume {
  path: string;
  /** The kernel holds the quota (a tmpfs of its own); false: a plain directory, measured by the host. */
  kernel: boolean;
  quota: VolumeQuota;
  /** Raises the kernel's caps by `extra` (room for the verifier's own files); a no-op without them. */
  grow(extra: VolumeQuota): Promise<void>;
  /** Unmounts and removes the workspace. Never throws: null when it is gone, else why not. */
  release(): Promise<string | null>;
  /**
   * Leaves the workspace at its path as a plain directory (--keep-workspaces): a volume is copied out
   * and unmounted, so that it holds no memory and `rm -r` removes it. Never throws: null when all was
   * copied, else what was not (GNU tar copies what it can reach: not paths past PATH_MAX).
   */
  keep(): Promise<string | null>;
}

function tmpfsOptions(quota: VolumeQuota): string {
  return `size=${Math.max(4096, Math.floor(quota.bytes))},nr_inodes=${Math.floor(quota.inodes) + 1}`;
}

/**
 * Makes `path` (which must not exist) the workspace, a tmpfs capped at `quota` when the host lets
 * this process mount one (`kernel: true`), else a plain directory.
 */
export async function createWorkspaceVolume(
  path: string,
  quota: VolumeQuota,
  options: { mount?: boolean } = {},
): Promise<WorkspaceVolume> {
  await mkdir(path);
  let kernel = false;
  if ((options.mount ?? true) && process.getuid?.() === 0) {
    kernel = await run(
      MOUNT,
      ['-t', 'tmpfs', '-o', `mode=0755,nosuid,nodev,${tmpfsOptions(quota)}`, ownerTag(process.pid), path],
      { timeout: 30_000 },
    ).then(
      () => true,
      () => false,
    );
  }
  const current = { ...quota };
  return {
    path,
    kernel,
    quota,
    async grow(extra) {
      if (!kernel) return;
      current.bytes += extra.bytes;
      current.inodes += extra.inodes;
      await run(MOUNT, ['-o', `remount,${tmpfsOptions(current)}`, path], { timeout: 30_000 });
    },
    async keep() {
      if (!kernel) return null;
      return await copyOut(path);
    },
    async release() {
      if (kernel) {
        const unmounted = await run(UMOUNT, ['--lazy', path], { timeout: 30_000 }).then(
          () => null,
          (error: Error) => `cannot unmount ${path}: ${error.message}`,
        );
        if (unmounted !== null) return unmounted;
      }
      return await removeTree(path);
    },
  };
}

/** Copies a volume to a sibling folder, unmounts it, and puts the copy in its place. */
async function copyOut(path: string): Promise<string | null> {
  const copy = `${path}.kept`;
  let problem: string | null = null;
  try {
    await mkdir(copy);
    // Both ends by GNU tar: permissions, symlinks (never followed), hard links and FIFOs as they are.
    await run('/bin/sh', ['-c', 'tar -C "$1" -cf - . | tar -C "$2" -xpf -', 'sh', path, copy], {
      timeout: 600_000,
      maxBuffer: 1 << 20,
    }).catch((error: Error & { stderr?: string }) => {
      problem = `not all of ${path} was kept: ${(error.stderr ?? error.message).trim().slice(-300)}`;
    });
    await run(UMOUNT, ['--lazy', path], { timeout: 30_000 });
    await rmdir(path);
    await rename(copy, path);
    return problem;
  } catch (error) {
    return `cannot keep ${path}: ${(error as Error).message}`;
  }
}

const SOURCE = 'stepwise-workspace';
const OWNED = /^stepwise-workspace-(\d+)-(\d+)$/;

/** A process's start time (clock ticks since boot, /proc/PID/stat field 22); null when it is gone. */
function startTimeOf(pid: number): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // Fields after the command name, which is in parentheses and may hold anything.
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

/** The mount source that names its owner: pid and start time (a reused pid is another process). */
function ownerTag(pid: number): string {
  const started = startTimeOf(pid);
  return started === null ? SOURCE : `${SOURCE}-${pid}-${started}`;
}

/** A path field of /proc/self/mounts: space, tab, newline and backslash come octal-escaped. */
const unescapeMountPath = (field: string) =>
  field.replace(/\\([0-7]{3})/g, (_m, octal: string) => String.fromCharCode(Number.parseInt(octal, 8)));

/**
 * Unmounts each workspace tmpfs under `root` whose owner process is gone (SIGKILLed mid-sample),
 * and removes its sample folder (`root/<sample>/workspace`) as that sample's own end would have.
 * A live owner's volume is never touched. Returns the workspaces swept; never throws.
 */
export async function sweepDeadWorkspaces(root: string): Promise<string[]> {
  if (process.getuid?.() !== 0) return []; // only root mounts them
  let mounts: string;
  let base: string;
  try {
    [mounts, base] = await Promise.all([readFile('/proc/self/mounts', 'utf8'), realpath(root)]);
  } catch {
    return [];
  }
  const swept: string[] = [];
  for (const line of mounts.split('\n')) {
    const [source = '', field = '', type] = line.split(' ');
    const owner = OWNED.exec(source);
    if (type !== 'tmpfs' || !owner) continue;
    const target = unescapeMountPath(field);
    if (!target.startsWith(`${base}/`) || startTimeOf(Number(owner[1])) === owner[2]) continue;
    const unmounted = await run(UMOUNT, ['--lazy', target], { timeout: 30_000 }).then(
      () => true,
      () => false,
    );
    if (!unmounted) continue;
    swept.push(target);
    const sample = dirname(target);
    if (basename(target) === 'workspace' && dirname(sample) === base) await removeTree(sample);
    else await rmdir(target).catch(() => undefined);
  }
  return swept;
}
