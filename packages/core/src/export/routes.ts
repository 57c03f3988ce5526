import { randomBytes } from 'node:crypto';
import { createReadStream, rmSync } from 'node:fs';
import { stat } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { Readable } from 'node:stream';
import type { Hono } from 'hono';
import { z } from 'zod';
import { NotFoundError, parseOrThrow, StepwiseError } from '../domain/index.js';
import { type AuthVariables, requireScope } from '../http/auth.js';
import { readJsonBody } from '../http/json-body.js';
import type { PoolOps } from '../pool/core.js';
import type { DataPool } from '../pool/data-pool.js';
import { MANIFEST_FILE } from './manifest.js';
import { EXPORT_KINDS, ExportRequest } from './request.js';
import { dataFileName, runExport } from './run-export.js';

const ExportId = z.string().regex(/^[0-9a-f]{32}$/, 'must be an export id (32 hex digits)');
/** Only the names an export writes: nothing else under the exports directory can be asked for. */
const ExportFileName = z.enum([MANIFEST_FILE, ...EXPORT_KINDS.map(dataFileName)]);

const CONTENT_TYPES: Record<string, string> = {
  '.json': 'application/json',
  '.jsonl': 'application/x-ndjson',
  '.parquet': 'application/vnd.apache.parquet',
};

export interface ExportRoutesOptions {
  /** Where exports are written (default: `exports/` beside the store's database file). */
  exportsDir?: string;
}

async function exportsDirOf(store: PoolOps, options: ExportRoutesOptions): Promise<string> {
  if (options.exportsDir) return resolve(options.exportsDir);
  const { path } = await store.describe();
  if (path === null)
    throw new StepwiseError('exports need a store kept in a file (this one is in memory)', 409, 'conflict');
  return join(dirname(path), 'exports');
}

/**
 * `POST /v1/exports` runs an export on the server into `<exports dir>/<id>/` and answers its
 * manifest; `GET /v1/exports/:id/:file` streams one of its files.
 */
export function mountExportRoutes(
  app: Hono<{ Variables: AuthVariables }>,
  pool: DataPool,
  options: ExportRoutesOptions = {},
): void {
  app.post('/v1/exports', requireScope('trainer'), async (c) => {
    const request = parseOrThrow(ExportRequest, await readJsonBody(c, false));
    const id = randomBytes(16).toString('hex');
    const outDir = join(await exportsDirOf(pool.store, options), id);
    let manifest: Awaited<ReturnType<typeof runExport>>;
    try {
      manifest = await runExport({ store: pool.store, request, outDir, id });
    } catch (error) {
      rmSync(outDir, { recursive: true, force: true });
      throw error;
    }
    const names = [...manifest.files.map((f) => f.name), MANIFEST_FILE];
    return c.json({
      ...manifest,
      download: Object.fromEntries(names.map((name) => [name, `/v1/exports/${id}/${name}`])),
    });
  });

  app.get('/v1/exports/:id/:file', requireScope('trainer'), async (c) => {
    const id = parseOrThrow(ExportId, c.req.param('id'), 'id');
    const file = parseOrThrow(ExportFileName, c.req.param('file'), 'file');
    const root = await exportsDirOf(pool.store, options);
    const path = resolve(root, id, file);
    if (!path.startsWith(root + sep)) throw new NotFoundError(`export ${id} has no file ${file}`);
    const found = await stat(path).catch(() => null);
    if (!found?.isFile()) throw new NotFoundError(`export ${id} has no file ${file}`);
    const extension = file.slice(file.lastIndexOf('.'));
    return c.body(Readable.toWeb(createReadStream(path)) as ReadableStream, 200, {
      'content-type': CONTENT_TYPES[extension] ?? 'application/octet-stream',
      'content-length': String(found.size),
      'content-disposition': `attachment; filename="${file}"`,
    });
  });
}
