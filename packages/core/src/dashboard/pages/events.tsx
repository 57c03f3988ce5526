import type { Hono } from 'hono';
import { z } from 'zod';
import { ChannelName, EventType, fromZodError, type PoolEvent, SignalSource } from '../../domain/index.js';
import type { DataPool } from '../../pool/data-pool.js';
import { eventSource, eventSummary, formatTime, type SummarySegment } from '../assets/event-summary.js';
import { Page } from '../layout.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html } from '../respond.js';

/*
 * Events: the pool's event log as it happens. The server renders the latest events (the page shows
 * data without a script); events.js follows the SSE stream from the log position the page was
 * rendered at, newest on top, and filters by signal source in place.
 */

/** Events rendered with the page. */
const FIRST = 50;
/** How far back the first render looks for events matching the filters (bounded: 10 reads of 500). */
const LOOK_BACK_CHUNK = 500;
const LOOK_BACK_CHUNKS = 10;
/** Rows the live table keeps (oldest go first). */
const LIVE_CAP = 500;

const blank = (v: unknown) => (v === '' ? undefined : v);

const EventsQuery = z.object({
  channel: z.preprocess(blank, ChannelName.optional()),
  type: z.array(EventType),
  source: z.preprocess(blank, SignalSource.optional()),
});
type EventsQuery = z.infer<typeof EventsQuery>;

function matches(event: PoolEvent, q: EventsQuery): boolean {
  if (q.channel !== undefined && event.channel !== q.channel) return false;
  if (q.type.length > 0 && !q.type.includes(event.type)) return false;
  if (q.source !== undefined && eventSource(event) !== q.source) return false;
  return true;
}

/**
 * The latest events matching the filters, newest first, and the log position they were read at
 * (the stream continues from there). Reads walk back over seq ranges without filters, so every read
 * is a bounded primary-key range whatever the filters match; rare events may not be found at all.
 */
async function latestEvents(
  pool: DataPool,
  q: EventsQuery,
): Promise<{ events: PoolEvent[]; cursor: number; scanned: number }> {
  const cursor = await pool.store.lastEventSeq();
  const found: PoolEvent[] = [];
  let hi = cursor;
  let scanned = 0;
  for (let i = 0; i < LOOK_BACK_CHUNKS && hi > 0 && found.length < FIRST; i++) {
    const lo = Math.max(0, hi - LOOK_BACK_CHUNK);
    const chunk = await pool.events({ after: lo, limit: hi - lo });
    const inRange = chunk.filter((e) => e.seq <= hi);
    scanned += inRange.length;
    found.push(...inRange.filter((e) => matches(e, q)).reverse());
    hi = lo;
  }
  return { events: found.slice(0, FIRST), cursor, scanned };
}

function Summary({ segments }: { segments: SummarySegment[] }) {
  return (
    <>
      {segments.map((s) =>
        typeof s === 'string' ? (
          s
        ) : (
          <a href={s.href} title={s.title}>
            {s.text}
          </a>
        ),
      )}
    </>
  );
}

function EventRow({ event }: { event: PoolEvent }) {
  return (
    <tr data-seq={String(event.seq)} data-source={eventSource(event) ?? undefined}>
      <td class="num">{String(event.seq)}</td>
      <td class="nowrap">
        <time datetime={new Date(event.ts).toISOString()}>{formatTime(event.ts)}</time>
      </td>
      <td>
        <span class="tag">{event.type}</span>
      </td>
      <td>{event.channel ?? '–'}</td>
      <td class="summary">
        <Summary segments={eventSummary(event)} />
      </td>
    </tr>
  );
}

function streamUrl(q: EventsQuery, cursor: number): string {
  const params = new URLSearchParams({ cursor: String(cursor) });
  if (q.channel !== undefined) params.set('channel', q.channel);
  if (q.type.length > 0) params.set('type', q.type.join(','));
  return `/v1/events/stream?${params}`;
}

/** The channel, signal-source and type filters (a GET form: the query string holds them). */
function Filters({ q, rawChannel }: { q: EventsQuery; rawChannel: string | undefined }) {
  const selected = new Set<string>(q.type);
  return (
    <form class="filters" method="get" aria-label="Event filters">
      <div>
        <label for="ev-channel">Channel</label>
        <input
          id="ev-channel"
          name="channel"
          value={rawChannel ?? q.channel ?? ''}
          placeholder="all channels"
        />
      </div>
      <div>
        <label for="ev-source">Signal source</label>
        <select id="ev-source" name="source" aria-describedby="ev-source-hint">
          <option value="" selected={q.source === undefined}>
            any
          </option>
          {SignalSource.options.map((s) => (
            <option value={s} selected={q.source === s}>
              {s}
            </option>
          ))}
        </select>
      </div>
      <button type="submit">Apply</button>
      <p id="ev-source-hint" class="muted filter-note">
        A source shows only signal events from it (applied at once).
      </p>
      <fieldset class="type-filter">
        <legend>Types (none checked: all)</legend>
        {EventType.options.map((t) => (
          <label>
            <input type="checkbox" name="type" value={t} checked={selected.has(t)} /> {t}
          </label>
        ))}
      </fieldset>
    </form>
  );
}

/** The events read at load, newest first; events.js adds live ones on top. */
function EventTable({ events }: { events: PoolEvent[] }) {
  return (
    <table class="events">
      <thead>
        <tr>
          <th scope="col" class="num">
            seq
          </th>
          <th scope="col">time (UTC)</th>
          <th scope="col">type</th>
          <th scope="col">channel</th>
          <th scope="col">summary</th>
        </tr>
      </thead>
      <tbody id="ev-rows">
        {events.length === 0 ? (
          <tr class="empty">
            <td colspan={5} class="muted">
              No events yet.
            </td>
          </tr>
        ) : null}
        {events.map((e) => (
          <EventRow event={e} />
        ))}
      </tbody>
    </table>
  );
}

function EventsPage({
  q,
  events,
  cursor,
  scanned,
  error,
  rawChannel,
}: {
  q: EventsQuery;
  events: PoolEvent[];
  cursor: number;
  scanned: number;
  error?: string;
  /** The channel as typed, shown back when it was refused. */
  rawChannel?: string;
}) {
  const filtered = q.channel !== undefined || q.type.length > 0 || q.source !== undefined;
  return (
    <Page title="Events" current="/dashboard/events">
      <Filters q={q} rawChannel={rawChannel} />
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
      <section
        id="event-log"
        aria-labelledby="ev-heading"
        data-stream={error ? undefined : streamUrl(q, cursor)}
        data-cap={String(LIVE_CAP)}
        data-types={JSON.stringify(EventType.options)}
      >
        <div class="log-head">
          <h2 id="ev-heading">Latest events</h2>
          <span id="ev-status" role="status">
            {`log position ${cursor}; live updates need JavaScript`}
          </span>
          <button type="button" id="ev-pause" hidden>
            Pause
          </button>
        </div>
        <p class="muted">
          {`${events.length} ${filtered ? 'matching ' : ''}event${events.length === 1 ? '' : 's'} at load`}
          {filtered && events.length < FIRST
            ? ` (searched the latest ${scanned.toLocaleString('en-US')})`
            : ''}
          {`; new ones appear on top, the newest ${LIVE_CAP} are kept.`}
        </p>
        <EventTable events={events} />
      </section>
      <script type="module" src="/dashboard/assets/events.js" />
    </Page>
  );
}

export function mountEventPages(app: Hono<DashboardEnv>, { pool }: DashboardOptions): void {
  app.get('/dashboard/events', async (c) => {
    const rawChannel = c.req.query('channel');
    const parsed = EventsQuery.safeParse({
      channel: rawChannel,
      type: (c.req.queries('type') ?? []).flatMap((t) => t.split(',')).filter((t) => t !== ''),
      source: c.req.query('source'),
    });
    if (!parsed.success) {
      const empty: EventsQuery = { type: [] };
      return html(
        c,
        <EventsPage
          q={empty}
          events={[]}
          cursor={0}
          scanned={0}
          error={fromZodError(parsed.error).message}
        />,
        400,
      );
    }
    const { events, cursor, scanned } = await latestEvents(pool, parsed.data);
    return html(c, <EventsPage q={parsed.data} events={events} cursor={cursor} scanned={scanned} />);
  });
}
