import { readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { z } from 'zod';
import type { StoreInfo } from '../store/store.js';
import type { ExportKind, ResolvedFilters } from './request.js';
import type { WrittenFile } from './sink.js';

export const MANIFEST_FILE = 'manifest.json';
export const MANIFEST_FORMAT = 'stepwise.export/1';

/** Written beside every export's data: what was exported, from where, how, and each file's digest. */
export interface ExportManifest {
  format: typeof MANIFEST_FORMAT;
  id: string;
  kind: ExportKind;
  /** ISO 8601, when the export finished. */
  created_at: string;
  stepwise: { version: string | null; commit: string | null };
  source: { store: StoreInfo['kind']; path: string | null };
  filters: ResolvedFilters;
  /** The kind's own settings (dpo: min_margin; rl: advantage). */
  options: Record<string, unknown>;
  counts: {
    /** Trajectories that matched the filters. */
    trajectories: number;
    /** Steps read from them. */
    steps: number;
    /** Lines or rows written. */
    records: number;
    /** Why matching data was left out, by reason. */
    skipped: Record<string, number>;
    /** The kind's own tallies (dpo: groups, pairs; rl: groups; sft: tool results placed). */
    details?: Record<string, number>;
  };
  files: WrittenFile[];
}

/** What `import` reads of a manifest: the files it lists, with their digests (other fields as they are). */
export const ManifestFiles = z.looseObject({
  files: z.array(z.looseObject({ name: z.string(), sha256: z.string() })).optional(),
});

export function writeManifest(dir: string, manifest: ExportManifest): void {
  const path = join(dir, MANIFEST_FILE);
  writeFileSync(`${path}.partial`, `${JSON.stringify(manifest, null, 2)}\n`);
  renameSync(`${path}.partial`, path);
}

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The package version and, when run from a git checkout, its commit; null where unknown. */
export function stepwiseProvenance(root = ROOT): ExportManifest['stepwise'] {
  let version: string | null = null;
  try {
    const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as { version?: unknown };
    if (typeof pkg.version === 'string') version = pkg.version;
  } catch {
    // not installed as a package
  }
  return { version, commit: gitCommit(root) };
}

/** Reads HEAD without running git: a detached hash, a loose ref or a packed ref. */
function gitCommit(root: string): string | null {
  try {
    let gitDir = join(root, '.git');
    if (statSync(gitDir).isFile()) {
      // A worktree or submodule: `.git` names the real directory.
      const pointer = readFileSync(gitDir, 'utf8').match(/^gitdir:\s*(.+)$/m);
      if (!pointer) return null;
      gitDir = join(root, pointer[1]!.trim());
    }
    const head = readFileSync(join(gitDir, 'HEAD'), 'utf8').trim();
    if (/^[0-9a-f]{40}$/.test(head)) return head;
    const ref = head.match(/^ref:\s*(\S+)$/)?.[1];
    if (!ref) return null;
    try {
      return readFileSync(join(gitDir, ref), 'utf8').trim();
    } catch {
      const packed = readFileSync(join(gitDir, 'packed-refs'), 'utf8');
      for (const line of packed.split('\n')) {
        const [hash, name] = line.split(' ');
        if (name === ref && hash && /^[0-9a-f]{40}$/.test(hash)) return hash;
      }
      return null;
    }
  } catch {
    return null;
  }
}
