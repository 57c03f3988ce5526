import { createHash } from 'node:crypto';
import { lchown, lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';

/*
 * When Stepwise runs as root, sandboxed commands run as an unprivileged host uid, so that the kernel
 * counts RLIMIT_NPROC for them (it never limits uid 0) and they hold no capability. The uid is derived
 * from the workspace, so two sandboxes on different workspaces almost never share a process budget,
 * and repeated runs on one workspace find its files already theirs.
 */
const UID_BASE = 1_000_000;
const UID_RANGE = 1 << 24;

export function sandboxUidFor(realWorkspace: string): number {
  return UID_BASE + (createHash('sha256').update(realWorkspace).digest().readUInt32BE(0) % UID_RANGE);
}

/**
 * Gives the workspace tree to `uid` (without following symlinks). A non-directory with several hard
 * links is left alone: one of its names may be outside the workspace.
 */
export async function chownTree(root: string, uid: number, gid: number): Promise<void> {
  const own = async (path: string, st: { uid: number; gid: number }) => {
    if (st.uid !== uid || st.gid !== gid) await lchown(path, uid, gid);
  };
  await own(root, await lstat(root));
  const pending = [root];
  while (pending.length > 0) {
    const dir = pending.pop()!;
    let entries: import('node:fs').Dirent[];
    try {
      entries = await readdir(dir, { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      const path = join(dir, entry.name);
      let st: import('node:fs').Stats;
      try {
        st = await lstat(path);
      } catch {
        continue;
      }
      if (!st.isDirectory() && st.nlink > 1) continue;
      await own(path, st).catch(() => undefined);
      if (st.isDirectory()) pending.push(path);
    }
  }
}
