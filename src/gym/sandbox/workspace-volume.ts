import { execFile } from 'node:child_process';
import { mkdir, rename, rmdir } from 'node:fs/promises';
import { promisify } from 'node:util';
import { removeTree } from './workspace-tree.js';

/*
 * A sample's workspace as a filesystem of its own: a tmpfs mounted on the host (root only) with
 * `size=` and `nr_inodes=`, so the kernel itself refuses the byte and the file past the quota, whoever
 * writes (the sandbox, or the host for the built-in agent's tools), and removing it is an unmount
 * however many files or however deep. Where mounting is not permitted the workspace is a plain
 * directory and the sandbox measures it from the host instead (disk-usage.ts). docs/gym-sandbox.md
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
      ['-t', 'tmpfs', '-o', `mode=0755,nosuid,nodev,${tmpfsOptions(quota)}`, 'stepwise-workspace', path],
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
