import { chmod, lstat, mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, posix } from 'node:path';
import { ValidationError } from '@stepwise/core';
import type { TaskFile } from './schema.js';

/*
 * Task files on disk: a directory tree read into `TaskFile`s (text as utf8, anything else as base64,
 * modes kept when they are not 0644) and written back byte for byte.
 */

export const DEFAULT_FILE_MODE = 0o644;

// fatal: invalid UTF-8 becomes base64; ignoreBOM: a BOM is content and must survive the round trip.
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** A file's bytes as a TaskFile: utf8 when the bytes are valid UTF-8, base64 otherwise. */
export function taskFileFromBytes(path: string, bytes: Uint8Array, mode = DEFAULT_FILE_MODE): TaskFile {
  let file: TaskFile;
  try {
    file = { path, encoding: 'utf8', content: strictUtf8.decode(bytes) };
  } catch {
    file = { path, encoding: 'base64', content: Buffer.from(bytes).toString('base64') };
  }
  if (mode !== DEFAULT_FILE_MODE) file.mode = mode;
  return file;
}

export function taskFileBytes(file: TaskFile): Buffer {
  return Buffer.from(file.content, file.encoding === 'base64' ? 'base64' : 'utf8');
}

/**
 * The mode recorded for a file on disk. The owner-write bit is always added: a task copied onto a
 * read-only medium (like the shared sample) keeps its files writable in the workspace, where the agent
 * may have to edit them; executable and other bits are kept as they are.
 */
export function recordedMode(statMode: number): number {
  return (statMode & 0o7777) | 0o200;
}

export interface TreeListing {
  files: TaskFile[];
  /** Directories with no entries at all (relative, POSIX separators), sorted. */
  emptyDirs: string[];
}

/**
 * Reads every regular file under `root` (sorted by path, POSIX separators, `prefix` prepended).
 * Symlinks and special files are refused: a task folder must not point outside itself.
 */
export async function readTree(root: string, prefix = ''): Promise<TreeListing> {
  const files: TaskFile[] = [];
  const emptyDirs: string[] = [];
  async function walk(dir: string, rel: string): Promise<void> {
    const entries = (await readdir(dir)).sort();
    if (entries.length === 0 && rel !== '') emptyDirs.push(rel);
    for (const name of entries) {
      const abs = join(dir, name);
      const relPath = rel === '' ? name : `${rel}/${name}`;
      const st = await lstat(abs);
      if (st.isDirectory()) await walk(abs, relPath);
      else if (st.isFile()) {
        const bytes = await readFile(abs);
        files.push(taskFileFromBytes(posix.join(prefix, relPath), bytes, recordedMode(st.mode)));
      } else {
        throw new ValidationError(
          `${abs}: only regular files and directories are allowed in a task`,
          relPath,
        );
      }
    }
  }
  await walk(root, '');
  return { files, emptyDirs: emptyDirs.map((d) => posix.join(prefix, d)) };
}

/** The host path of a task-relative POSIX path under `root`; refuses anything that could escape it. */
export function hostPathOf(root: string, relPath: string): string {
  const parts = relPath.split('/');
  if (relPath.startsWith('/') || parts.includes('..') || relPath.includes('\0')) {
    throw new ValidationError(`${relPath}: must be a relative path without ..`, 'path');
  }
  return join(root, ...parts);
}

/**
 * Writes files under `root` (creating directories as needed). `exclusive` refuses to overwrite or to
 * write through an existing entry (used where an agent may have left symlinks behind).
 */
export async function writeTaskFiles(
  root: string,
  files: readonly TaskFile[],
  options: { exclusive?: boolean } = {},
): Promise<void> {
  for (const file of files) {
    const target = hostPathOf(root, file.path);
    await mkdir(dirname(target), { recursive: true });
    const mode = file.mode ?? DEFAULT_FILE_MODE;
    await writeFile(target, taskFileBytes(file), { flag: options.exclusive ? 'wx' : 'w', mode });
    // writeFile's mode is filtered by the umask and ignored for an existing file.
    await chmod(target, mode);
  }
}

export async function makeDirs(root: string, dirs: readonly string[]): Promise<void> {
  for (const dir of dirs) await mkdir(hostPathOf(root, dir), { recursive: true });
}
