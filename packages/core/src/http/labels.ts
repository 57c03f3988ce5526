import { LabelsBody, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

/** `POST /v1/labels`: an admin's curation labels (trainable, quality, tags) on steps and trajectories. */
export function mountLabelRoutes(app: ApiApp, pool: DataPool): void {
  app.post('/v1/labels', requireScope('admin'), async (c) => {
    const { labels } = parseOrThrow(LabelsBody, await readJsonBody(c));
    return c.json({ labels: await pool.addLabels(labels) });
  });
}
