import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { ConflictError } from '../domain/index.js';
import type { PoolOps } from '../pool/core.js';
import { ExportContext } from './context.js';
import { writeDpo } from './dpo.js';
import {
  type ExportManifest,
  MANIFEST_FILE,
  MANIFEST_FORMAT,
  stepwiseProvenance,
  writeManifest,
} from './manifest.js';
import { type ExportKind, type ExportRequest, resolveFilters, scanQuery } from './request.js';
import { writeRl } from './rl.js';
import { writeSft } from './sft.js';
import { FileSink } from './sink.js';
import { writeTrajectories } from './trajectories.js';

export interface RunExportOptions {
  store: PoolOps;
  request: ExportRequest;
  /** Where `<kind>.jsonl` / `rl.parquet` and `manifest.json` go (created if missing). */
  outDir: string;
  /** Replace an export already in outDir instead of refusing. */
  overwrite?: boolean;
  id?: string;
  clock?: () => number;
  /** Trajectories dealt with so far and how many matched when the export began. */
  onProgress?: (done: number, total: number) => void;
  pageSize?: number;
  /** rl: when a Parquet row group is cut (default RL_ROW_GROUP). */
  rowGroup?: { tokens: number; rows: number };
}

export function dataFileName(kind: ExportKind): string {
  return kind === 'rl' ? 'rl.parquet' : `${kind}.jsonl`;
}

/** Runs one export into outDir and writes its manifest last; a failed export leaves no data file. */
export async function runExport(options: RunExportOptions): Promise<ExportManifest> {
  const { store, request, outDir } = options;
  const clock = options.clock ?? Date.now;
  const filters = resolveFilters(request);
  const query = scanQuery(filters);
  const name = dataFileName(request.kind);
  if (!options.overwrite) {
    for (const file of [name, MANIFEST_FILE]) {
      if (existsSync(join(outDir, file)))
        throw new ConflictError(`out: ${join(outDir, file)} exists (choose another directory)`, 'out');
    }
  }
  mkdirSync(outDir, { recursive: true });
  const source = await store.describe();
  const { total } = await store.listTrajectories({ ...query, limit: 1, offset: 0 });
  let done = 0;
  options.onProgress?.(0, total);
  const ctx = new ExportContext(store, query, options.pageSize ?? 200, () => {
    done++;
    options.onProgress?.(done, Math.max(total, done));
  });
  const kindOptions: Record<string, unknown> = {};
  const sink = new FileSink(outDir, name, request.kind === 'rl' ? 'parquet' : 'jsonl');
  try {
    if (request.kind === 'sft') await writeSft(ctx, sink);
    else if (request.kind === 'dpo') {
      kindOptions.min_margin = request.min_margin ?? 0;
      await writeDpo(ctx, sink, request.min_margin ?? 0);
    } else if (request.kind === 'rl') {
      kindOptions.advantage = request.advantage ?? 'grpo';
      await writeRl(ctx, sink, request.advantage ?? 'grpo', options.rowGroup);
    } else await writeTrajectories(ctx, sink);
  } catch (error) {
    sink.discard();
    throw error;
  }
  const file = sink.commit();
  const manifest: ExportManifest = {
    format: MANIFEST_FORMAT,
    id: options.id ?? randomBytes(16).toString('hex'),
    kind: request.kind,
    created_at: new Date(clock()).toISOString(),
    stepwise: stepwiseProvenance(),
    source: { store: source.kind, path: source.path },
    filters,
    options: kindOptions,
    counts: {
      trajectories: done,
      steps: ctx.steps,
      records: file.records,
      skipped: ctx.skipped,
      ...(Object.keys(ctx.details).length > 0 ? { details: ctx.details } : {}),
    },
    files: [file],
  };
  writeManifest(outDir, manifest);
  return manifest;
}
