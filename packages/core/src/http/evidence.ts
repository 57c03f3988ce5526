import { z } from 'zod';
import { ClientId, NotFoundError, parseOrThrow, Sha256Hex } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

const MissingBody = z.strictObject({
  sha256: z.array(Sha256Hex).max(100_000, 'at most 100000 hashes per call'),
});

/**
 * What a verifier read, kept for re-verification (docs/datapool.md#evidence). A runner (or trainer) asks which
 * blobs the store lacks, uploads those (raw bytes, checked against their hash), then keeps the
 * trajectory's manifest, once. Agents reach none of this: their base_url is not these routes.
 */
export function mountEvidenceRoutes(app: ApiApp, pool: DataPool): void {
  // An episode's owner keeps its evidence, as it completes and scores it (http/trajectories.ts).
  const owner = requireScope('runner', 'trainer');
  app.post('/v1/evidence/missing', owner, async (c) => {
    const { sha256 } = parseOrThrow(MissingBody, await readJsonBody(c));
    return c.json({ missing: await pool.missingEvidenceBlobs(sha256) });
  });
  app.put('/v1/evidence/blobs/:sha256', owner, async (c) => {
    const sha256 = parseOrThrow(Sha256Hex, c.req.param('sha256'), 'sha256');
    const bytes = new Uint8Array(await c.req.arrayBuffer());
    const stored = await pool.putEvidenceBlob(sha256, bytes);
    return c.json({ sha256, size: bytes.byteLength, stored }, stored ? 201 : 200);
  });
  app.put('/v1/trajectories/:id/evidence', owner, async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const evidence = await pool.keepEvidence(id, await readJsonBody(c, false));
    return c.json(
      { trajectory_uid: id, files: evidence.files, bytes: evidence.bytes, created_at: evidence.createdAt },
      201,
    );
  });
  app.get('/v1/trajectories/:id/evidence', owner, async (c) => {
    const id = parseOrThrow(ClientId, c.req.param('id'), 'trajectory_uid');
    const evidence = await pool.getEvidence(id);
    if (!evidence) throw new NotFoundError(`trajectory ${id} has no evidence`);
    return c.json({
      trajectory_uid: id,
      channel: evidence.channel,
      files: evidence.files,
      bytes: evidence.bytes,
      created_at: evidence.createdAt,
      final_message: evidence.finalMessage,
      entries: evidence.entries,
    });
  });
}
