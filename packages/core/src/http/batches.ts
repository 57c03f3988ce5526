import { clientIdParam, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { BatchRequest, checkBatchRequest, type RenderedBatch, renderBatch } from '../serving/batch.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { readJsonBody } from './json-body.js';

/** Trainers lease batches of ready groups, then ack (trained on) or nack (back to the queue) them. */
export function mountBatchRoutes(app: ApiApp, pool: DataPool): void {
  app.post('/v1/batches/lease', requireScope('trainer'), async (c) => {
    const raw = await readJsonBody(c);
    const request = parseOrThrow(BatchRequest, raw);
    checkBatchRequest(request, raw as Record<string, unknown>);
    const batch = await pool.lease(request, c.req.raw.signal);
    if (!batch) return c.body(null, 204);
    let rendered: RenderedBatch;
    try {
      // Read after the lease: how this channel's batches treat tokens generated before a weight switch.
      const { partial_rollouts } = await pool.channelConfig(batch.lease.channel);
      rendered = await renderBatch(batch, request, partial_rollouts);
    } catch (error) {
      // Nothing was served: the groups go back to the queue at once rather than at lease expiry.
      await pool.nack(batch.lease.id);
      throw error;
    }
    const headers = { 'content-type': rendered.contentType, ...rendered.headers };
    if (typeof rendered.body === 'string') return new Response(rendered.body, { headers });
    const parts = rendered.body;
    let next = 0;
    const stream = new ReadableStream<Uint8Array>({
      pull(controller) {
        if (next < parts.length) controller.enqueue(parts[next++]!);
        else controller.close();
      },
    });
    const length = parts.reduce((n, p) => n + p.byteLength, 0);
    return new Response(stream, { headers: { ...headers, 'content-length': String(length) } });
  });
  // A lease id is checked like any id in a path: NUL or a 10 kB string never reaches the store.
  app.post('/v1/batches/:id/ack', requireScope('trainer'), async (c) => {
    const lease = await pool.ack(clientIdParam(c.req.param('id'), 'lease_id'));
    return c.json({ lease_id: lease.id, state: lease.state, groups: lease.groupIds.length });
  });
  app.post('/v1/batches/:id/nack', requireScope('trainer'), async (c) => {
    const lease = await pool.nack(clientIdParam(c.req.param('id'), 'lease_id'));
    return c.json({ lease_id: lease.id, state: lease.state, groups: lease.groupIds.length });
  });
}
