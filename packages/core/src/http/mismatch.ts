import { clientIdParam, MismatchBody, mismatchFromWire, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

/**
 * `POST /v1/batches/{lease_id}/mismatch`: a trainer's rollout-vs-trainer mismatch per leased step,
 * read back per engine and policy version in `GET /v1/stats` (docs/trainers.md#mismatch-telemetry).
 */
export function mountMismatchRoutes(app: ApiApp, pool: DataPool): void {
  app.post('/v1/batches/:id/mismatch', requireScope('trainer'), async (c) => {
    const leaseId = clientIdParam(c.req.param('id'), 'lease_id');
    const { steps } = parseOrThrow(MismatchBody, await readJsonBody(c));
    const stored = await pool.reportMismatch(leaseId, steps.map(mismatchFromWire));
    return c.json({ lease_id: stored.leaseId, steps: stored.steps });
  });
}
