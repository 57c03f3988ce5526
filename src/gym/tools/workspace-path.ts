import { lstat, readlink, realpath } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { normalizeMountDir, sandboxHome } from '../sandbox/environment.js';
import { ToolFailure } from './failure.js';

/** A path an agent gave, mapped into the host workspace. */
export interface WorkspacePath {
  /** Where it is on the host, with every existing symlink resolved. */
  host: string;
  /** Where the agent sees it (inside the sandbox). */
  sandbox: string;
  /** Every component exists. */
  exists: boolean;
}

const MAX_SYMLINKS = 40;

/**
 * Maps `input` (relative to the workspace, absolute, or `~/...`) to the host workspace the way the
 * sandbox's kernel would resolve it: component by component, `..` after a symlink going to the link
 * target's parent, an absolute symlink target starting again from the sandbox's root. Wherever the
 * walk ends, it must end inside mountDir; a path that leaves it (`..`, another absolute path, a symlink
 * pointing out) is refused with `path_outside_workspace`.
 */
export async function resolveWorkspacePath(
  input: string,
  context: { workspace: string; mountDir: string },
): Promise<WorkspacePath> {
  const mountDir = normalizeMountDir(context.mountDir);
  const mount = mountDir.split('/').filter((p) => p !== '');
  let path = input.trim();
  if (path === '' || path.includes('\0')) throw new ToolFailure('bad_arguments', 'Error: invalid path');
  if (path === '~' || path.startsWith('~/')) path = sandboxHome(mountDir) + path.slice(1);

  const base = await realpath(context.workspace);
  const pending = path.split('/');
  // Below mountDir while `inside` is set; elsewhere in the sandbox (from its root) while it is null.
  let inside: string[] | null = posix.isAbsolute(path) ? null : [];
  let elsewhere: string[] = [];
  let missing = false;
  let hops = 0;
  while (pending.length > 0) {
    const part = pending.shift()!;
    if (part === '' || part === '.') continue;
    if (inside === null) {
      // Outside the workspace the sandbox has only plain directories: plain path arithmetic.
      if (part === '..') elsewhere.pop();
      else elsewhere.push(part);
      if (elsewhere.length === mount.length && elsewhere.every((p, i) => p === mount[i])) inside = [];
      continue;
    }
    if (part === '..') {
      if (missing) throw new ToolFailure('not_found', `Error: ${input}: No such file or directory`);
      if (inside.length === 0) {
        inside = null;
        elsewhere = mount.slice(0, -1);
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
    } catch {
      missing = true;
      inside.push(part);
      continue;
    }
    if (!isLink) {
      inside.push(part);
      continue;
    }
    if (++hops > MAX_SYMLINKS) {
      throw new ToolFailure('bad_arguments', `Error: ${input}: too many levels of symbolic links`);
    }
    const target = await readlink(host);
    if (posix.isAbsolute(target)) {
      inside = null;
      elsewhere = [];
    }
    pending.unshift(...target.split('/'));
  }
  if (inside === null) {
    throw new ToolFailure(
      'path_outside_workspace',
      `Error: access denied: ${input} is outside the workspace (${mountDir}); only paths inside it can be used`,
    );
  }
  return { host: join(base, ...inside), sandbox: posix.join(mountDir, ...inside), exists: !missing };
}
