import { z } from 'zod';
import { ChannelName, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import { DriftTally } from './drift.js';
import type { LiveGateway } from './live-gateway.js';

const StatsQuery = z.strictObject({ channel: ChannelName.optional() });

/** Trajectories a drift report reads at most (each with all its steps' ids). */
export const MAX_DRIFT_TRAJECTORIES = 1000;

const DriftQuery = z.strictObject({
  channel: ChannelName.optional(),
  limit: z.coerce.number().int().min(1).max(MAX_DRIFT_TRAJECTORIES).default(100),
});

/**
 * `GET /v1/stats`: the pool's counters (of one channel, or all), the trainers' reported mismatch per
 * engine and version, and this process's gateway's counters.
 */
export function mountStatsRoutes(app: ApiApp, pool: DataPool, gateway?: LiveGateway): void {
  app.get('/v1/stats', requireScope('trainer'), async (c) => {
    const { channel } = parseOrThrow(StatsQuery, c.req.query());
    const [stats, mismatch] = await Promise.all([
      pool.stats(channel ?? null),
      pool.mismatch(channel ?? null),
    ]);
    // The gateway's counters are this process's, whatever the channel filter.
    return c.json({ ...stats, mismatch, ...(gateway ? { gateway: gateway.stats() } : {}) });
  });
  // Prefix breaks and token continuity per model, over the latest `limit` trajectories (drift.ts).
  app.get('/v1/stats/drift', requireScope('trainer'), async (c) => {
    const { channel, limit } = parseOrThrow(DriftQuery, c.req.query());
    const page = await pool.listTrajectories({ ...(channel ? { channel } : {}), limit, offset: 0 });
    // One trajectory's steps in memory at a time.
    const tally = new DriftTally();
    for (const t of page.items) tally.add(await pool.getTrajectorySteps(t.id));
    return c.json({ trajectories: page.items.length, models: tally.report() });
  });
}
