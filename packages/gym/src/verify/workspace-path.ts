import { lstat, readFile, realpath, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { walkWorkspacePath } from '../sandbox/workspace-path.js';

/*
 * Resolving a check's path inside a workspace the agent controlled: a path with `..`, an absolute
 * path, or one that leads (through symlinks) outside the workspace is an escape, and reads nothing.
 * The walk is the agent's tools' own (sandbox/workspace-path.ts), read in the host's namespace.
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

function unreadable(error: unknown): WorkspaceEntry {
  return { kind: 'unreadable', reason: `the path cannot be read (${errorCode(error)})` };
}

function errorCode(error: unknown): string {
  return (error as NodeJS.ErrnoException).code ?? (error as Error).message;
}

/**
 * Where a check's path leads, read as the host reads it (sandbox/workspace-path.ts): a symlink's
 * absolute target is a host path. A path the agent made unreadable (longer than PATH_MAX once
 * resolved, permissions, a race) reads nothing, like an escape: the check fails, the sample is scored.
 */
export async function resolveInWorkspace(workspace: string, relPath: string): Promise<WorkspaceEntry> {
  // Stricter than the agent's tools: only plain relative paths, never `..`, even one that stays inside.
  if (relPath.startsWith('/') || relPath.includes('\0') || relPath.split('/').includes('..'))
    return { kind: 'escape', reason: 'the path is absolute or contains ..' };
  try {
    const walk = await walkWorkspacePath(workspace, relPath, { kind: 'host' }, { unreadable: 'throw' });
    switch (walk.kind) {
      case 'outside':
        return { kind: 'escape', reason: 'the path leads outside the workspace' };
      case 'loop':
      case 'missing_parent':
        return { kind: 'broken' };
      case 'inside':
        break;
    }
    if (!walk.exists) {
      // The path itself is there, a symlink that leads nowhere: broken, not missing.
      const named = join(await realpath(workspace), ...relPath.split('/'));
      return (await lstat(named).then(
        () => true,
        () => false,
      ))
        ? { kind: 'broken' }
        : { kind: 'missing' };
    }
    const st = await stat(walk.host);
    if (st.isFile()) return { kind: 'file', path: walk.host, size: st.size };
    if (st.isDirectory()) return { kind: 'dir', path: walk.host };
    return { kind: 'other', path: walk.host };
  } catch (error) {
    return unreadable(error);
  }
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
