import type { Stats } from 'node:fs';
import { lstat, readdir, readlink, stat, statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import { walkTree } from './workspace-tree.js';

/*
 * What a sandbox holds on disk, measured from the host for the disk quota: the workspace tree, files
 * its processes deleted but keep open there, and its private /tmp and /dev/shm (tmpfs, whose own
 * counters include everything). The host reads the workspace by its host path: as root, whatever the
 * command does to permissions; as another user, a directory the command made unreadable is given its
 * owner's rwx back (the command runs as that same user) so that it is measured all the same.
 */

/** Files and directories count their allocated or apparent size, whichever is larger. */
function bytesOf(st: Stats): number {
  return Math.max(st.size, st.blocks * 512);
}

const TMPFS_MAGIC = 0x0102_1994;

/**
 * Bytes under `root` on its filesystem, hard links counted once, symlinks not followed; any depth and
 * path length (workspace-tree.ts), so nothing the agent builds is left out of the count.
 */
export async function treeBytes(root: string, seen = new Set<number>()): Promise<number> {
  let total = bytesOf(await lstat(root));
  await walkTree(root, {
    entry: (_path, st) => {
      if (st.nlink > 1 && !st.isDirectory()) {
        if (seen.has(st.ino)) return;
        seen.add(st.ino);
      }
      total += bytesOf(st);
    },
  });
  return total;
}

/** The workspace is a volume of its own (workspace-volume.ts) with no byte or no inode left. */
export async function volumeFull(workspace: string): Promise<boolean> {
  if ((await volumeBytes(workspace)) === null) return false;
  const fs = await statfs(workspace).catch(() => null);
  return fs !== null && (fs.bavail === 0 || fs.ffree === 0);
}

/**
 * A workspace that is the root of a tmpfs of its own (workspace-volume.ts) is measured in O(1): the
 * filesystem's used blocks are the workspace, deleted files still held open included. null otherwise.
 */
export async function volumeBytes(workspace: string): Promise<number | null> {
  try {
    const fs = await statfs(workspace);
    if (fs.type !== TMPFS_MAGIC) return null;
    const [own, parent] = await Promise.all([lstat(workspace), lstat(dirname(workspace))]);
    return own.dev === parent.dev ? null : (fs.blocks - fs.bfree) * fs.bsize;
  } catch {
    return null;
  }
}

/** Bytes in use on the tmpfs at `path` (one of the sandbox's own); 0 for anything else. */
async function tmpfsBytes(path: string): Promise<number> {
  try {
    const fs = await statfs(path);
    return fs.type === TMPFS_MAGIC ? (fs.blocks - fs.bfree) * fs.bsize : 0;
  } catch {
    return 0;
  }
}

/**
 * Deleted files on device `dev` that the sandbox's processes still hold open: the tree no longer shows
 * them, the disk still holds them. Read through the sandbox's own /proc (its pid namespace only).
 */
async function deletedOpenBytes(initPid: number, dev: number): Promise<number> {
  const proc = `/proc/${initPid}/root/proc`;
  let total = 0;
  const seen = new Set<number>();
  const pids = (await readdir(proc).catch(() => [] as string[])).filter((name) => /^\d+$/.test(name));
  for (const pid of pids) {
    const fdDir = `${proc}/${pid}/fd`;
    for (const fd of await readdir(fdDir).catch(() => [] as string[])) {
      const target = await readlink(`${fdDir}/${fd}`).catch(() => '');
      if (!target.endsWith(' (deleted)')) continue;
      const st = await stat(`${fdDir}/${fd}`).catch(() => null);
      if (!st || st.dev !== dev || !st.isFile() || seen.has(st.ino)) continue;
      seen.add(st.ino);
      total += bytesOf(st);
    }
  }
  return total;
}

/** The sandbox as the host sees it: its pid 1 and that process's pid namespace (from bwrap's status). */
export interface SandboxInit {
  pid: number;
  pidNamespace: string;
}

/**
 * Everything the sandbox holds: the workspace tree on the host, and, while its pid 1 is alive, deleted
 * files kept open in the workspace and the contents of its /tmp and /dev/shm.
 */
export async function sandboxBytes(workspace: string, init: SandboxInit | null): Promise<number> {
  const volume = await volumeBytes(workspace);
  const tree = volume ?? treeBytes(workspace);
  // The pid is the sandbox's only while it lives in the sandbox's namespace (else it was reused).
  const ns = init ? await readlink(`/proc/${init.pid}/ns/pid`).catch(() => '') : '';
  if (!init || ns !== `pid:[${init.pidNamespace}]`) return tree;
  const dev = (await lstat(workspace)).dev;
  const root = `/proc/${init.pid}/root`;
  const parts = await Promise.all([
    tree,
    volume === null ? deletedOpenBytes(init.pid, dev) : 0,
    tmpfsBytes(`${root}/tmp`),
    tmpfsBytes(`${root}/dev/shm`),
  ]);
  return parts.reduce((a, b) => a + b, 0);
}
