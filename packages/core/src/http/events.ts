import type { Context } from 'hono';
import { streamSSE } from 'hono/streaming';
import { z } from 'zod';
import { ChannelName, EventType, parseOrThrow } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import type { ApiApp, ApiEnv } from './app.js';
import { requireScope } from './auth.js';

const EventListQuery = z.strictObject({
  cursor: z.coerce.number().int().min(0).default(0),
  limit: z.coerce.number().int().min(1).max(1000).default(100),
  channel: ChannelName.optional(),
  type: z
    .string()
    .transform((v) => v.split(','))
    .pipe(z.array(EventType))
    .optional(),
});

/** The event log: a page after a cursor, or a live server-sent stream (trainer). */
export function mountEventRoutes(app: ApiApp, pool: DataPool): void {
  app.get('/v1/events', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(EventListQuery, c.req.query());
    const filter = { channel: q.channel, types: q.type };
    if (c.req.header('accept')?.includes('text/event-stream')) return streamEvents(c, q.cursor, filter);
    const events = await pool.events({ after: q.cursor, limit: q.limit, ...filter });
    return c.json({ events, cursor: events.at(-1)?.seq ?? q.cursor });
  });
  app.get('/v1/events/stream', requireScope('trainer'), async (c) => {
    const q = parseOrThrow(EventListQuery, c.req.query());
    const lastId = Number(c.req.header('last-event-id'));
    return streamEvents(c, Number.isFinite(lastId) && lastId > 0 ? lastId : q.cursor, {
      channel: q.channel,
      types: q.type,
    });
  });
  const streamEvents = (
    c: Context<ApiEnv>,
    cursor: number,
    filter: { channel?: string; types?: EventType[] },
  ) =>
    streamSSE(c, async (stream) => {
      const aborter = new AbortController();
      stream.onAbort(() => aborter.abort());
      for await (const event of pool.watchEvents({ after: cursor, ...filter }, aborter.signal)) {
        await stream.writeSSE({ id: String(event.seq), event: event.type, data: JSON.stringify(event) });
      }
    });
}
