import type { Hono } from 'hono';
import { z } from 'zod';
import { type ChannelConfig, ChannelName, fromZodError, type Lease } from '../../domain/index.js';
import type { PreviewGroup } from '../../pool/types.js';
import type { PoolStats } from '../../store/store.js';
import { formatTime } from '../assets/event-summary.js';
import { fmt, Page } from '../layout.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html } from '../respond.js';

/*
 * Batches: what the next lease of a given shape would get (the store's read-only rehearsal: every
 * ready group it would look at, in order, served or dropped and why), the channel's settings that
 * decide it, and the channel's consumption history (leases, newest first).
 */

const MAX_PREVIEW_BATCH = 256;
const LEASES_PER_PAGE = 20;
/** Group links shown inline for a lease; the rest (up to MAX_GROUP_LINKS) behind a disclosure. */
const INLINE_GROUPS = 5;
const MAX_GROUP_LINKS = 200;

const blank = (v: unknown) => (v === '' || v === undefined ? undefined : v);
const int = (min: number, max: number) =>
  z.coerce
    .number({ error: 'must be a number' })
    .int('must be a whole number')
    .min(min, `must be >= ${min}`)
    .max(max, `must be <= ${max}`);

const BatchesQuery = z.object({
  channel: z.preprocess(blank, ChannelName.default('train')),
  batch_size: z.preprocess(blank, int(1, MAX_PREVIEW_BATCH).default(4)),
  n_rollouts: z.preprocess(blank, int(1, 4096).optional()),
  max_staleness: z.preprocess(blank, int(0, 1_000_000).optional()),
  offset: z.preprocess(blank, int(0, 10_000_000).default(0)),
});
type BatchesQuery = z.infer<typeof BatchesQuery>;

const groupHref = (channel: string, id: string) =>
  `/dashboard/groups/${encodeURIComponent(channel)}/${encodeURIComponent(id)}`;
const trajectoryHref = (id: string) => `/dashboard/trajectories/${encodeURIComponent(id)}`;

function When({ ts }: { ts: number | null }) {
  if (ts === null) return <>–</>;
  return <time datetime={new Date(ts).toISOString()}>{formatTime(ts)}</time>;
}

function ConfigList({ config }: { config: ChannelConfig }) {
  const c = config.curation;
  const entries: [string, string][] = [
    ['n_rollouts', config.n_rollouts === null ? 'not set' : String(config.n_rollouts)],
    ['max_staleness', config.max_staleness === null ? 'none' : String(config.max_staleness)],
    ['stale_policy', config.stale_policy],
    ['max_queue_size', config.max_queue_size === null ? 'none' : fmt(config.max_queue_size)],
    ['group_timeout_ms', config.group_timeout_ms === null ? 'none' : fmt(config.group_timeout_ms)],
    ['incomplete_policy', config.incomplete_policy],
    ['idle_timeout_ms', config.idle_timeout_ms === null ? 'none' : fmt(config.idle_timeout_ms)],
    ['curation.zero_variance', c.zero_variance],
    ['curation.truncated', c.truncated],
    [
      'curation.repetition',
      c.repetition === null
        ? 'off'
        : `exclude above ${c.repetition.max_fraction} of ${c.repetition.ngram}-grams`,
    ],
    ['curation.duplicates', c.duplicates],
    ['curation.min_trajectories', String(c.min_trajectories)],
    ['required_signals', config.required_signals.length === 0 ? 'none' : config.required_signals.join(', ')],
  ];
  return (
    <dl class="config">
      {entries.map(([k, v]) => (
        <div>
          <dt>
            <code>{k}</code>
          </dt>
          <dd>{v}</dd>
        </div>
      ))}
    </dl>
  );
}

function PreviewSummary({
  q,
  preview,
  stats,
}: {
  q: BatchesQuery;
  preview: PreviewGroup[];
  stats: PoolStats;
}) {
  const served = preview.filter((p) => p.decision === 'serve');
  const dropped = preview.filter((p) => p.decision !== 'serve');
  const trajectories = served.reduce((n, p) => n + p.served.length, 0);
  const steps = served.reduce((n, p) => n + p.served.reduce((m, t) => m + t.steps, 0), 0);
  const trainable = served.reduce((n, p) => n + p.served.reduce((m, t) => m + t.trainableSteps, 0), 0);
  const reasons = new Map<string, number>();
  for (const p of dropped) reasons.set(p.decision, (reasons.get(p.decision) ?? 0) + 1);
  const full = served.length >= q.batch_size;
  return (
    <div class="preview-summary">
      <p id="preview-summary">
        <strong>{`${served.length} of ${q.batch_size} groups served`}</strong>
        {` (${fmt(trajectories)} trajectories, ${fmt(trainable)} trainable of ${fmt(steps)} steps); `}
        <strong>{`${dropped.length} dropped`}</strong>
        {dropped.length > 0 ? ` (${[...reasons].map(([r, n]) => `${r} ×${n}`).join(', ')}) on the way` : ''}
        {`. ${fmt(stats.queueDepth)} ready groups in the channel; policy version ${stats.policyVersion}.`}
      </p>
      {full || preview.length === 0 ? null : (
        <p class="preview-warn" role="note">
          {`Fewer than ${q.batch_size} groups would pass: a lease of this size gets nothing now and waits for more ready groups (the drops above happen all the same).`}
        </p>
      )}
    </div>
  );
}

function PreviewTable({
  channel,
  preview,
  maxStaleness,
}: {
  channel: string;
  preview: PreviewGroup[];
  maxStaleness: number | null;
}) {
  if (preview.length === 0)
    return <p class="muted">No ready groups of this shape: the next lease would wait.</p>;
  return (
    <table class="preview">
      <thead>
        <tr>
          <th scope="col" class="num">
            #
          </th>
          <th scope="col">group</th>
          <th scope="col">decision</th>
          <th scope="col" class="num">
            staleness
          </th>
          <th scope="col">served trajectories (trainable / steps, reward)</th>
          <th scope="col">excluded (reason, reward)</th>
        </tr>
      </thead>
      <tbody>
        {preview.map((p, i) => (
          <tr data-group-id={p.group.id} data-decision={p.decision}>
            <td class="num">{String(i + 1)}</td>
            <td>
              <a href={groupHref(channel, p.group.id)}>{p.group.id}</a>
              <div class="muted small">
                {`${p.group.nComplete} complete of ${p.group.expected ?? '?'}${p.group.partial ? ', partial' : ''}`}
              </div>
            </td>
            <td>
              {p.decision === 'serve' ? (
                <span class="tag good">serve</span>
              ) : (
                <span class="tag bad">{`dropped: ${p.decision}`}</span>
              )}
            </td>
            <td class="num">
              {String(p.staleness)}
              {maxStaleness !== null && p.staleness > maxStaleness && p.decision === 'serve' ? (
                <span class="tag"> flagged stale</span>
              ) : null}
            </td>
            <td>
              {p.served.length === 0 ? (
                <span class="muted">–</span>
              ) : (
                <ul class="plain">
                  {p.served.map((t) => (
                    <li>
                      <a href={trajectoryHref(t.trajectory.id)}>{t.trajectory.id}</a>
                      {` ${t.trainableSteps} / ${t.steps}, reward ${fmt(t.trajectory.reward)}`}
                    </li>
                  ))}
                </ul>
              )}
            </td>
            <td>
              {p.excluded.length === 0 ? (
                <span class="muted">–</span>
              ) : (
                <ul class="plain">
                  {p.excluded.map((e) => (
                    <li>
                      <a href={trajectoryHref(e.trajectoryId)}>{e.trajectoryId}</a>
                      {` ${e.reason}, reward ${fmt(e.reward)}`}
                    </li>
                  ))}
                </ul>
              )}
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function LeaseState({ state }: { state: Lease['state'] }) {
  const cls = state === 'acked' ? 'tag good' : state === 'active' ? 'tag' : 'tag bad';
  return <span class={cls}>{state}</span>;
}

function GroupLinks({ channel, ids }: { channel: string; ids: string[] }) {
  const link = (id: string) => (
    <li>
      <a href={groupHref(channel, id)}>{id}</a>
    </li>
  );
  const inline = ids.length <= INLINE_GROUPS + 1 ? ids : ids.slice(0, INLINE_GROUPS);
  const rest = ids.slice(inline.length);
  return (
    <>
      <span>{`${ids.length} group${ids.length === 1 ? '' : 's'}`}</span>
      <ul class="plain">{inline.map(link)}</ul>
      {rest.length === 0 ? null : (
        <details class="more">
          <summary>{`${rest.length} more`}</summary>
          <ul class="plain">{rest.slice(0, MAX_GROUP_LINKS).map(link)}</ul>
          {rest.length > MAX_GROUP_LINKS ? (
            <p class="muted">{`and ${rest.length - MAX_GROUP_LINKS} more not listed`}</p>
          ) : null}
        </details>
      )}
    </>
  );
}

function pageHref(q: BatchesQuery, offset: number): string {
  const params = new URLSearchParams({ channel: q.channel, batch_size: String(q.batch_size) });
  if (q.n_rollouts !== undefined) params.set('n_rollouts', String(q.n_rollouts));
  if (q.max_staleness !== undefined) params.set('max_staleness', String(q.max_staleness));
  if (offset > 0) params.set('offset', String(offset));
  return `/dashboard/batches?${params}#history`;
}

function LeaseHistory({ q, leases, total }: { q: BatchesQuery; leases: Lease[]; total: number }) {
  const first = q.offset + 1;
  return (
    <section class="card" aria-labelledby="history" id="lease-history">
      <h2 id="history">{`Consumption history: ${q.channel}`}</h2>
      {leases.length === 0 ? null : (
        <p class="muted">{`Leases ${first}–${q.offset + leases.length} of ${fmt(total)}, newest first.`}</p>
      )}
      {leases.length === 0 ? (
        <p class="muted">No leases in this channel{q.offset > 0 ? ' on this page' : ''}.</p>
      ) : (
        <table class="leases">
          <thead>
            <tr>
              <th scope="col">lease</th>
              <th scope="col">consumer</th>
              <th scope="col">state</th>
              <th scope="col">groups</th>
              <th scope="col" class="num">
                steps
              </th>
              <th scope="col">created (UTC)</th>
              <th scope="col">expires / ended (UTC)</th>
            </tr>
          </thead>
          <tbody>
            {leases.map((l) => (
              <tr data-lease-id={l.id}>
                <td>
                  <code>{l.id}</code>
                </td>
                <td>{l.consumer}</td>
                <td>
                  <LeaseState state={l.state} />
                </td>
                <td>
                  <GroupLinks channel={l.channel} ids={l.groupIds} />
                </td>
                <td class="num">{fmt(l.nSteps)}</td>
                <td class="nowrap">
                  <When ts={l.createdAt} />
                </td>
                <td class="nowrap">
                  {l.state === 'active' ? (
                    <>
                      expires <When ts={l.expiresAt} />
                    </>
                  ) : (
                    <>
                      {`${l.state} `}
                      <When ts={l.endedAt} />
                    </>
                  )}
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
      <nav class="pager" aria-label="Lease history pages">
        {q.offset > 0 ? <a href={pageHref(q, Math.max(0, q.offset - LEASES_PER_PAGE))}>← newer</a> : null}
        {q.offset + leases.length < total ? (
          <a href={pageHref(q, q.offset + LEASES_PER_PAGE)}>older →</a>
        ) : null}
      </nav>
    </section>
  );
}

function BatchForm({ raw, error }: { raw: Record<string, string | undefined>; error?: string }) {
  return (
    <form class="filters" method="get" aria-label="Next lease">
      <div>
        <label for="b-channel">Channel</label>
        <input id="b-channel" name="channel" value={raw.channel ?? 'train'} required />
      </div>
      <div>
        <label for="b-batch-size">Batch size (groups)</label>
        <input
          id="b-batch-size"
          name="batch_size"
          type="number"
          min="1"
          max={String(MAX_PREVIEW_BATCH)}
          value={raw.batch_size ?? '4'}
          required
        />
      </div>
      <div>
        <label for="b-n-rollouts">n_rollouts</label>
        <input
          id="b-n-rollouts"
          name="n_rollouts"
          type="number"
          min="1"
          value={raw.n_rollouts ?? ''}
          placeholder="any"
        />
      </div>
      <div>
        <label for="b-max-staleness">Max staleness</label>
        <input
          id="b-max-staleness"
          name="max_staleness"
          type="number"
          min="0"
          value={raw.max_staleness ?? ''}
          placeholder="channel's"
        />
      </div>
      <button type="submit">Preview</button>
      {error ? (
        <p class="error" role="alert">
          {error}
        </p>
      ) : null}
    </form>
  );
}

export function mountBatchPages(app: Hono<DashboardEnv>, { pool }: DashboardOptions): void {
  app.get('/dashboard/batches', async (c) => {
    const raw = {
      channel: c.req.query('channel'),
      batch_size: c.req.query('batch_size'),
      n_rollouts: c.req.query('n_rollouts'),
      max_staleness: c.req.query('max_staleness'),
      offset: c.req.query('offset'),
    };
    const parsed = BatchesQuery.safeParse(raw);
    if (!parsed.success)
      return html(
        c,
        <Page title="Batches" current="/dashboard/batches">
          <BatchForm raw={raw} error={fromZodError(parsed.error).message} />
        </Page>,
        400,
      );
    const q = parsed.data;
    const [preview, config, stats, leases] = await Promise.all([
      pool.store.previewBatch({
        channel: q.channel,
        batchSize: q.batch_size,
        nRollouts: q.n_rollouts ?? null,
        maxStaleness: q.max_staleness ?? null,
        consumer: 'dashboard-preview',
        ttlMs: 0,
      }),
      pool.channelConfig(q.channel),
      pool.stats(q.channel),
      pool.store.listLeases({ channel: q.channel, limit: LEASES_PER_PAGE, offset: q.offset }),
    ]);
    const maxStaleness = q.max_staleness ?? config.max_staleness;
    return html(
      c,
      <Page title="Batches" current="/dashboard/batches">
        <BatchForm raw={{ ...raw, channel: q.channel, batch_size: String(q.batch_size) }} />
        <div class="batches-top">
          <section class="card" aria-labelledby="next">
            <h2 id="next">{`Next lease: ${q.channel}`}</h2>
            <PreviewSummary q={q} preview={preview} stats={stats} />
            <PreviewTable channel={q.channel} preview={preview} maxStaleness={maxStaleness} />
          </section>
          <section class="card" aria-labelledby="config">
            <h2 id="config">Channel settings</h2>
            <ConfigList config={config} />
          </section>
        </div>
        <LeaseHistory q={q} leases={leases.items} total={leases.total} />
      </Page>,
    );
  });
}
