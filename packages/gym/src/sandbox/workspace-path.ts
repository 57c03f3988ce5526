import { lstat, readlink, realpath } from 'node:fs/promises';
import { join, posix, resolve } from 'node:path';
import { normalizeMountDir } from './environment.js';

/*
 * Where a path in a workspace the agent controlled leads, resolved component by component without
 * following anything the walk has not checked: `..` after a symlink goes to the link target's
 * parent, an absolute target starts again from the root of the namespace the path is read in. The
 * agent's tools read paths as the sandbox does (the workspace at its mountDir, tools/workspace-path.ts);
 * the verifier as the host does (the workspace at its own path, verify/workspace-path.ts). Only a walk
 * that ends inside the workspace yields a host path, and that path has no symlink left in it.
 */

/** The namespace a path (and every absolute symlink target on its way) is read in. */
export type PathView =
  /** Inside the sandbox: the workspace is at mountDir, absolute paths outside it are the sandbox's. */
  | { kind: 'sandbox'; mountDir: string }
  /** On the host: the workspace is at its own (real) path. */
  | { kind: 'host' };

export type WorkspaceWalk =
  /** It ends inside: `host` is the path on the host, `parts` below the workspace. */
  | { kind: 'inside'; host: string; parts: string[]; exists: boolean }
  /** It ends outside the workspace. */
  | { kind: 'outside' }
  /** More symlinks than the kernel follows (40). */
  | { kind: 'loop' }
  /** `..` after a component that does not exist: no such file, as the kernel says. */
  | { kind: 'missing_parent' };

const MAX_SYMLINKS = 40;

const components = (path: string) => path.split('/').filter((part) => part !== '');

/**
 * Walks `path` (relative to the workspace, or absolute in the view's namespace). A component whose
 * lstat fails for another reason than not existing (EACCES, ENAMETOOLONG) is missing, unless
 * `unreadable` is `throw`: then that error is thrown.
 */
export async function walkWorkspacePath(
  workspace: string,
  path: string,
  view: PathView,
  options: { unreadable?: 'missing' | 'throw' } = {},
): Promise<WorkspaceWalk> {
  const base = await realpath(workspace);
  // Where the workspace is in the view's namespace; on the host also the path it was given as.
  const home = components(view.kind === 'sandbox' ? normalizeMountDir(view.mountDir) : base);
  const aliases = view.kind === 'sandbox' ? [home] : [home, components(resolve(workspace))];
  const pending = path.split('/');
  // Below the workspace while `inside` is set; elsewhere in the namespace while it is null.
  let inside: string[] | null = posix.isAbsolute(path) ? null : [];
  let elsewhere: string[] = [];
  let missing = false;
  let hops = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '' || part === '.') continue;
    if (inside === null) {
      // Outside the workspace only path arithmetic: nothing there is read.
      if (part === '..') elsewhere.pop();
      else elsewhere.push(part);
      if (
        aliases.some(
          (alias) => alias.length === elsewhere.length && alias.every((p, i) => p === elsewhere[i]),
        )
      )
        inside = [];
      continue;
    }
    if (part === '..') {
      if (missing) return { kind: 'missing_parent' };
      if (inside.length === 0) {
        inside = null;
        elsewhere = home.slice(0, -1);
      } else {
        inside.pop();
      }
      continue;
    }
    if (missing) {
      inside.push(part);
      continue;
    }
    const host = join(base, ...inside, part);
    let isLink: boolean;
    try {
      isLink = (await lstat(host)).isSymbolicLink();
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (options.unreadable === 'throw' && code !== 'ENOENT' && code !== 'ENOTDIR') throw error;
      missing = true;
      inside.push(part);
      continue;
    }
    if (!isLink) {
      inside.push(part);
      continue;
    }
    if (++hops > MAX_SYMLINKS) return { kind: 'loop' };
    const target = await readlink(host);
    if (posix.isAbsolute(target)) {
      inside = null;
      elsewhere = [];
    }
    pending.unshift(...target.split('/'));
  }
  if (inside === null) return { kind: 'outside' };
  return { kind: 'inside', host: join(base, ...inside), parts: inside, exists: !missing };
}
