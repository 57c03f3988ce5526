import { lstat, readFile, realpath, stat } from 'node:fs/promises';
import { dirname, join, sep } from 'node:path';

/*
 * Resolving a check's path inside a workspace the agent controlled: a path with `..`, an absolute
 * path, or one that leads (through symlinks) outside the workspace is an escape, and reads nothing.
 */

export type WorkspaceEntry =
  | { kind: 'file'; path: string; size: number }
  | { kind: 'dir'; path: string }
  | { kind: 'other'; path: string }
  | { kind: 'missing' }
  /** A symlink that leads nowhere (or loops). */
  | { kind: 'broken' }
  /** The agent made it unreadable (a path too long to name, say): the agent's failure, scored 0. */
  | { kind: 'unreadable'; reason: string }
  | { kind: 'escape'; reason: string };

function inside(root: string, path: string): boolean {
  return path === root || path.startsWith(root.endsWith(sep) ? root : `${root}${sep}`);
}

function isMissing(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException).code;
  return code === 'ENOENT' || code === 'ENOTDIR';
}

function unreadable(err: unknown): WorkspaceEntry {
  const code = (err as NodeJS.ErrnoException).code;
  if (code === undefined) throw err;
  return { kind: 'unreadable', reason: `the path cannot be read (${code})` };
}

/**
 * Where a check's path leads. A path the agent made unreadable (longer than PATH_MAX once resolved,
 * permissions, a race) reads nothing, like an escape: the check fails, the sample is scored.
 */
export async function resolveInWorkspace(workspace: string, relPath: string): Promise<WorkspaceEntry> {
  try {
    return await resolveOrThrow(workspace, relPath);
  } catch (error) {
    return { kind: 'unreadable', reason: `the path cannot be read (${errorCode(error)})` };
  }
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
}

async function resolveOrThrow(workspace: string, relPath: string): Promise<WorkspaceEntry> {
  const parts = relPath.split('/');
  if (relPath.startsWith('/') || relPath.includes('\0') || parts.includes('..')) {
    return { kind: 'escape', reason: 'the path is absolute or contains ..' };
  }
  const root = await realpath(workspace);
  const target = join(root, ...parts);
  let real: string;
  try {
    real = await realpath(target);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') return { kind: 'broken' };
    if (!isMissing(err)) return unreadable(err);
    // Absent: still an escape when the nearest existing ancestor lies outside (a symlinked folder).
    for (let dir = dirname(target); ; dir = dirname(dir)) {
      try {
        const realDir = await realpath(dir);
        if (!inside(root, realDir)) return { kind: 'escape', reason: 'the path leads outside the workspace' };
        break;
      } catch (e) {
        if (!isMissing(e) || dirname(dir) === dir) return unreadable(e);
      }
    }
    try {
      await lstat(target);
      return { kind: 'broken' };
    } catch {
      return { kind: 'missing' };
    }
  }
  if (!inside(root, real)) return { kind: 'escape', reason: 'the path leads outside the workspace' };
  let st: import('node:fs').Stats;
  try {
    st = await stat(real);
  } catch (err) {
    return unreadable(err);
  }
  if (st.isFile()) return { kind: 'file', path: real, size: st.size };
  if (st.isDirectory()) return { kind: 'dir', path: real };
  return { kind: 'other', path: real };
}

/** Largest file a check reads (a verifier must not be made to load a huge file into memory). */
export const MAX_CHECKED_FILE_BYTES = 32 * 1024 * 1024;

/** A workspace file's text, or why it cannot be read. */
export async function readWorkspaceText(
  workspace: string,
  relPath: string,
): Promise<{ text: string } | { error: string }> {
  const entry = await resolveInWorkspace(workspace, relPath);
  switch (entry.kind) {
    case 'escape':
    case 'unreadable':
      return { error: entry.reason };
    case 'missing':
      return { error: 'the file does not exist' };
    case 'broken':
      return { error: 'the path is a broken symlink' };
    case 'dir':
      return { error: 'the path is a directory' };
    case 'other':
      return { error: 'the path is not a regular file' };
    case 'file':
      if (entry.size > MAX_CHECKED_FILE_BYTES) {
        return { error: `the file is larger than ${MAX_CHECKED_FILE_BYTES} bytes` };
      }
      try {
        return { text: await readFile(entry.path, 'utf8') };
      } catch (error) {
        return { error: `the file cannot be read (${errorCode(error)})` };
      }
  }
}
