import { createHash } from 'node:crypto';
import { constants, type Stats } from 'node:fs';
import { chmod, lstat, mkdir, open, readdir, readlink, symlink, writeFile } from 'node:fs/promises';
import { type EvidenceEntry, type StepwiseClient, StepwiseError } from '@stepwise/core';
import type { GymTask } from './tasks/schema.js';

/*
 * What a sample's verifier read, kept for re-verification (docs/gym.md#re-verification): the final
 * workspace as the agent left it, before the verifier's own files go in, as a manifest of
 * content-addressed files (a task's input files are uploaded once for all its samples), and the
 * agent's final message. Size-bounded: a workspace past the bounds is not kept, and the sample says
 * why. Read without following a link or opening anything but regular files.
 */

export interface EvidenceBounds {
  /** Bytes of file content in all (default 16 MiB). */
  maxBytes: number;
  /** Entries in all: files, folders and links (default 10,000). */
  maxEntries: number;
}

export const DEFAULT_EVIDENCE_BOUNDS: EvidenceBounds = { maxBytes: 16 * 1024 * 1024, maxEntries: 10_000 };

/** Longest relative path kept: with the work folder in front it stays under PATH_MAX. */
const MAX_PATH = 3_000;

export type CapturedWorkspace =
  | { kept: true; entries: EvidenceEntry[]; blobs: Map<string, Buffer>; bytes: number }
  | { kept: false; reason: string };

const READ_FLAGS = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/** Thrown inside the walk when a bound is passed: the reason the evidence is not kept (never escapes). */
class NotKept extends StepwiseError {
  constructor(reason: string) {
    super(reason, 422, 'evidence_not_kept');
  }
}

/** Reads the workspace under `root` into a manifest and its blobs, or says why it is not kept. */
export async function captureWorkspace(
  root: string,
  bounds: EvidenceBounds = DEFAULT_EVIDENCE_BOUNDS,
): Promise<CapturedWorkspace> {
  const entries: EvidenceEntry[] = [];
  const blobs = new Map<string, Buffer>();
  let bytes = 0;
  const add = (entry: EvidenceEntry) => {
    if (entries.length >= bounds.maxEntries)
      throw new NotKept(`the workspace holds more than ${bounds.maxEntries} entries`);
    if (entry.path.length > MAX_PATH) throw new NotKept(`a path is longer than ${MAX_PATH} characters`);
    entries.push(entry);
  };
  const stack: string[] = [''];
  try {
    while (stack.length > 0) {
      const rel = stack.pop()!;
      const names = (await readdir(rel === '' ? root : `${root}/${rel}`)).sort();
      for (const name of names) {
        const path = rel === '' ? name : `${rel}/${name}`;
        const st = await lstat(`${root}/${path}`);
        if (st.isDirectory()) {
          add({ type: 'dir', path, mode: st.mode & 0o7777 });
          stack.push(path);
        } else if (st.isSymbolicLink()) {
          add({ type: 'symlink', path, target: await readlink(`${root}/${path}`) });
        } else if (st.isFile()) {
          if (bytes + st.size > bounds.maxBytes)
            throw new NotKept(`the workspace holds more than ${bounds.maxBytes} bytes`);
          const content = await readRegular(`${root}/${path}`, st, bounds.maxBytes - bytes);
          const sha256 = createHash('sha256').update(content).digest('hex');
          blobs.set(sha256, content);
          bytes += content.length;
          add({ type: 'file', path, mode: st.mode & 0o7777, size: content.length, sha256 });
        }
        // FIFOs, sockets and devices hold nothing a verifier reads as a file: not kept.
      }
    }
  } catch (error) {
    if (error instanceof NotKept) return { kept: false, reason: error.message };
    const e = error as NodeJS.ErrnoException;
    return { kept: false, reason: `the workspace could not be read: ${e.code ?? e.message}` };
  }
  return { kept: true, entries, blobs, bytes };
}

/** A regular file's bytes, read through a descriptor that is checked to be the file lstat saw. */
async function readRegular(path: string, seen: Stats, room: number): Promise<Buffer> {
  const handle = await open(path, READ_FLAGS);
  try {
    const st = await handle.stat();
    if (!st.isFile() || st.ino !== seen.ino || st.dev !== seen.dev)
      throw new NotKept(`${path} changed while it was read`);
    const content = await handle.readFile();
    if (content.length > room) throw new NotKept(`the workspace grew past its bound while it was read`);
    return content;
  } finally {
    await handle.close();
  }
}

/** Uploads a captured workspace's missing blobs, then keeps its manifest for the trajectory. */
export async function uploadEvidence(
  server: StepwiseClient,
  trajectoryUid: string,
  captured: Extract<CapturedWorkspace, { kept: true }>,
  finalMessage: string | null,
): Promise<void> {
  for (const sha256 of await server.missingEvidenceBlobs([...captured.blobs.keys()]))
    await server.putEvidenceBlob(sha256, captured.blobs.get(sha256)!);
  await server.keepEvidence(trajectoryUid, { entries: captured.entries, final_message: finalMessage });
}

/**
 * Rebuilds a kept workspace under `root` (an empty folder): folders, files with their modes, links.
 * Folder modes are applied last, deepest first, so a folder the agent left read-only is still filled.
 */
export async function materializeWorkspace(
  root: string,
  entries: readonly EvidenceEntry[],
  blobs: ReadonlyMap<string, Uint8Array>,
): Promise<void> {
  const dirs: { path: string; mode: number }[] = [];
  for (const entry of entries) {
    const at = `${root}/${entry.path}`;
    if (entry.type === 'dir') {
      await mkdir(at, { recursive: true });
      dirs.push({ path: at, mode: entry.mode });
      continue;
    }
    await mkdir(at.slice(0, at.lastIndexOf('/')), { recursive: true });
    if (entry.type === 'symlink') await symlink(entry.target, at);
    else {
      const content = blobs.get(entry.sha256);
      if (!content) throw new Error(`evidence blob ${entry.sha256} (${entry.path}) is not stored`);
      await writeFile(at, content, { mode: 0o600, flag: 'wx' });
      await chmod(at, entry.mode);
    }
  }
  dirs.sort((a, b) => b.path.length - a.path.length);
  for (const d of dirs) await chmod(d.path, d.mode);
}

/**
 * What decides a task's score besides the workspace: its verifier, rubric, weights, mount point and
 * the metadata a script verifier is handed. Its digest names a verifier version.
 */
function verifierSpec(task: GymTask): unknown {
  const clawgym = task.provenance.clawgym as { metadata?: unknown } | undefined;
  return {
    id: task.id,
    verifier: task.verifier,
    rubric: task.rubric,
    weights: task.weights,
    mountDir: task.mountDir,
    metadata: clawgym?.metadata ?? null,
  };
}

/** JSON with object keys sorted, so equal specs hash equal whatever their key order. */
function canonicalJson(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === 'object' && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  );
}

/**
 * The verifier version of a task set: `vf-` and 16 hex digits of a digest over every task's verifier
 * spec, in id order. Any change to a verifier, rubric or weight makes a new version; prompts and
 * input files do not count.
 */
export function verifierVersion(tasks: readonly GymTask[]): string {
  const hash = createHash('sha256');
  for (const task of [...tasks].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)))
    hash.update(canonicalJson(verifierSpec(task))).update('\n');
  return `vf-${hash.digest('hex').slice(0, 16)}`;
}
