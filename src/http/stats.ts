import { z } from 'zod';
import { ChannelName, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp } from './app.js';
import { requireScope } from './auth.js';
import type { LiveGateway } from './live-gateway.js';

const StatsQuery = z.strictObject({ channel: ChannelName.optional() });

/** `GET /v1/stats`: the pool's counters (of one channel, or all), with this process's gateway's. */
export function mountStatsRoutes(app: ApiApp, pool: DataPool, gateway?: LiveGateway): void {
  app.get('/v1/stats', requireScope('trainer'), async (c) => {
    const { channel } = parseOrThrow(StatsQuery, c.req.query());
    const stats = await pool.stats(channel ?? null);
    // The gateway's counters are this process's, whatever the channel filter.
    return c.json(gateway ? { ...stats, gateway: gateway.stats() } : stats);
  });
}
