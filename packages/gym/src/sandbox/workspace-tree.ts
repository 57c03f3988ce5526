import { constants, type Stats } from 'node:fs';
import { chmod, type FileHandle, lstat, open, readdir, rmdir, unlink } from 'node:fs/promises';

/*
 * Walking a tree an untrusted agent built, from the host: any depth (no recursion), any path length
 * (past ANCHOR_AT characters a directory is opened and its contents reached as /proc/self/fd/N/name,
 * so no path the kernel sees exceeds PATH_MAX), symlinks never followed (loops cannot matter), FIFOs,
 * sockets and devices never opened, other filesystems never entered. Nothing here throws: what could not
 * be reached is counted and described.
 */

/**
 * Paths longer than this, or this many levels below their last descriptor, are reached through an open
 * descriptor of their directory: the kernel then resolves a few components per call, not thousands.
 */
const ANCHOR_AT = 2_048;
const ANCHOR_HOPS = 32;
/** lstat calls in flight at once, per directory. */
const BATCH = 256;
const ROOT = process.getuid?.() === 0;
const DIRECTORY_FLAGS =
  constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** An open directory whose descriptor paths of its subtree go through; closed when none is left. */
interface Anchor {
  handle: FileHandle;
  users: number;
}

interface Dir {
  /** Reaches the directory's contents (`/proc/self/fd/N` for an anchored one). */
  inside: string;
  /** Names the directory itself, through its parent (for rmdir). */
  self: string;
  /** The anchor `self` goes through, if any. */
  via: Anchor | null;
  /** The directory's own anchor, if it has one. */
  own: Anchor | null;
  /** Levels between `inside` and the root or the anchor it goes through. */
  hops: number;
  expanded: boolean;
}

export interface WalkProblems {
  /** Entries that could not be listed, examined or acted on. */
  count: number;
  /** The first of them, worded for a reason. */
  first: string | null;
}

export interface TreeVisitor {
  /** Every entry below the root (directories too), with its lstat; `path` is short enough to use. */
  entry?: (path: string, st: Stats) => Promise<void> | void;
  /** A directory whose whole contents were visited (post-order); `path` names it through its parent. */
  leave?: (path: string) => Promise<void>;
}

function describe(error: unknown): string {
  const e = error as NodeJS.ErrnoException;
  return e.code ? `${e.code} (${e.syscall ?? 'fs'})` : String(e.message ?? e);
}

async function release(anchor: Anchor | null): Promise<void> {
  if (anchor && --anchor.users === 0) await anchor.handle.close().catch(() => undefined);
}

/** A non-root host gives a directory the agent made unreadable its owner's rwx back (same user). */
async function listNames(dir: string): Promise<string[]> {
  try {
    return await readdir(dir);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (ROOT || (code !== 'EACCES' && code !== 'EPERM')) throw error;
  }
  const st = await lstat(dir);
  await chmod(dir, (st.mode & 0o7777) | 0o700);
  return await readdir(dir);
}

/**
 * Visits every entry under `root` (not `root` itself) on root's filesystem, depth first, contents before
 * their directory's `leave`. Resolves with what could not be visited.
 */
export async function walkTree(root: string, visitor: TreeVisitor): Promise<WalkProblems> {
  const problems: WalkProblems = { count: 0, first: null };
  const note = (path: string, error: unknown) => {
    problems.count++;
    problems.first ??= `${path.length > 200 ? `…${path.slice(-200)}` : path}: ${describe(error)}`;
  };
  let device: number;
  try {
    device = (await lstat(root)).dev;
  } catch (error) {
    note(root, error);
    return problems;
  }
  const stack: Dir[] = [{ inside: root, self: root, via: null, own: null, hops: 0, expanded: false }];
  while (stack.length > 0) {
    const dir = stack.at(-1)!;
    if (dir.expanded) {
      stack.pop();
      await release(dir.own);
      if (dir.self !== root) await visitor.leave?.(dir.self).catch((error) => note(dir.self, error));
      await release(dir.via);
      continue;
    }
    dir.expanded = true;
    let names: string[];
    try {
      names = await listNames(dir.inside);
    } catch (error) {
      note(dir.inside, error);
      continue;
    }
    const via = dir.own ?? dir.via;
    for (let i = 0; i < names.length; i += BATCH) {
      const paths = names.slice(i, i + BATCH).map((name) => `${dir.inside}/${name}`);
      const stats = await Promise.all(
        paths.map((p) =>
          lstat(p).then(
            (st) => ({ st }),
            (error: unknown) => ({ error }),
          ),
        ),
      );
      for (const [j, got] of stats.entries()) {
        const path = paths[j]!;
        if ('error' in got) {
          note(path, got.error);
          continue;
        }
        const { st } = got;
        if (st.dev !== device) continue;
        await Promise.resolve(visitor.entry?.(path, st)).catch((error) => note(path, error));
        if (st.isDirectory()) {
          const child = await enter(path, via, dir.own ? 1 : dir.hops + 1).catch((error: unknown) => error);
          if (child instanceof Error) note(path, child);
          else stack.push(child as Dir);
        }
      }
    }
  }
  return problems;
}

/** A subdirectory to walk; anchored when its path grows long. */
async function enter(path: string, via: Anchor | null, hops: number): Promise<Dir> {
  let own: Anchor | null = null;
  if (path.length > ANCHOR_AT || hops > ANCHOR_HOPS) {
    own = { handle: await open(path, DIRECTORY_FLAGS), users: 1 };
  }
  if (via) via.users++;
  const inside = own ? `/proc/self/fd/${own.handle.fd}` : path;
  return { inside, self: path, via, own, hops: own ? 0 : hops, expanded: false };
}

/** A non-root host makes a directory it must change writable again (the agent may have made it not). */
async function retryWritable<T>(path: string, act: () => Promise<T>): Promise<T> {
  try {
    return await act();
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (ROOT || (code !== 'EACCES' && code !== 'EPERM')) throw error;
  }
  const parent = path.slice(0, path.lastIndexOf('/'));
  const st = await lstat(parent);
  await chmod(parent, (st.mode & 0o7777) | 0o700);
  return await act();
}

/**
 * Removes `root` and everything under it, whatever the agent made of it (see the top of the file).
 * Never throws: resolves with null when all is gone, else why not.
 */
export async function removeTree(root: string): Promise<string | null> {
  try {
    await lstat(root);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' ? null : `${root}: ${describe(error)}`;
  }
  const problems = await walkTree(root, {
    entry: async (path, st) => {
      if (!st.isDirectory()) await retryWritable(path, () => unlink(path));
    },
    leave: (path) => retryWritable(path, () => rmdir(path)),
  });
  try {
    const st = await lstat(root);
    if (st.isDirectory()) await retryWritable(root, () => rmdir(root));
    else await unlink(root);
    return null;
  } catch (error) {
    return problems.first ?? `${root}: ${describe(error)}`;
  }
}
