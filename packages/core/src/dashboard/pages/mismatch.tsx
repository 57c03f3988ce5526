import type { Hono } from 'hono';
import {
  ChannelName,
  type EngineMismatch,
  type MismatchLease,
  type MismatchStats,
  type MismatchVersion,
  parseOrThrow,
} from '../../domain/index.js';
import { formatTime } from '../assets/event-summary.js';
import { fmt, Page } from '../layout.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html } from '../respond.js';

/*
 * Mismatch: what trainers reported of the engines' behaviour log-probs against their own recomputed
 * ones (POST /v1/batches/{id}/mismatch), per engine: a k3 line over its recent leases, server-drawn
 * (no script), and its totals; an engine whose latest lease jumped is drawn and marked as flagged.
 */

/** Leases drawn per engine. */
const RECENT = 100;
const W = 360;
const H = 96;
const PAD = 8;

const sci = (v: number | null) => (v === null ? '–' : v === 0 ? '0' : v.toExponential(2));

/** k3 per lease, oldest left, with the engine's jump threshold (jumpFactor × its baseline) dashed. */
function Sparkline({ engine, stats }: { engine: EngineMismatch; stats: MismatchStats }) {
  const points = engine.recent;
  const threshold = engine.baselineK3 === null ? null : stats.jumpFactor * engine.baselineK3;
  const top = Math.max(1e-12, threshold ?? 0, ...points.map((p) => p.k3));
  const x = (i: number) => (points.length < 2 ? W / 2 : PAD + (i * (W - 2 * PAD)) / (points.length - 1));
  const y = (v: number) => H - PAD - (v / top) * (H - 2 * PAD);
  const name = engine.engineId ?? 'no engine recorded';
  return (
    <svg
      class="sparkline"
      width={W}
      height={H}
      viewBox={`0 0 ${W} ${H}`}
      role="img"
      aria-label={`k3 per lease of ${name}, oldest first`}
    >
      {threshold === null ? null : (
        <line class="threshold" x1={PAD} x2={W - PAD} y1={y(threshold)} y2={y(threshold)}>
          <title>{`jump threshold ${sci(threshold)}`}</title>
        </line>
      )}
      <polyline points={points.map((p, i) => `${x(i).toFixed(1)},${y(p.k3).toFixed(1)}`).join(' ')} />
      {points.map((p, i) => (
        <circle cx={x(i).toFixed(1)} cy={y(p.k3).toFixed(1)} r="3" data-lease-id={p.leaseId} data-k3={p.k3}>
          <title>{`${p.leaseId} (${formatTime(p.at)}): k3 ${sci(p.k3)}, ${fmt(p.tokens)} tokens`}</title>
        </circle>
      ))}
    </svg>
  );
}

function Tallies({ rows, first }: { rows: (MismatchLease | MismatchVersion)[]; first: string }) {
  return (
    <table class="mismatch-rows">
      <thead>
        <tr>
          <th scope="col">{first}</th>
          <th scope="col" class="num">
            steps
          </th>
          <th scope="col" class="num">
            tokens
          </th>
          <th scope="col" class="num">
            k1
          </th>
          <th scope="col" class="num">
            k3
          </th>
          <th scope="col" class="num">
            max |Δ log p|
          </th>
          <th scope="col" class="num">
            masked
          </th>
        </tr>
      </thead>
      <tbody>
        {rows.map((r) => (
          <tr>
            <th scope="row">
              {'leaseId' in r ? `${r.leaseId} · ${formatTime(r.at)}` : String(r.policyVersion)}
            </th>
            <td class="num">{fmt(r.steps)}</td>
            <td class="num">{fmt(r.tokens)}</td>
            <td class="num">{sci(r.k1)}</td>
            <td class="num">{sci(r.k3)}</td>
            <td class="num">{sci(r.maxAbsDiff)}</td>
            <td class="num">{fmt(r.maskedFraction)}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}

function EngineCard({ engine, stats }: { engine: EngineMismatch; stats: MismatchStats }) {
  const name = engine.engineId ?? 'no engine recorded';
  const latest = engine.recent.at(-1);
  return (
    <section
      class={engine.jump ? 'card engine flagged' : 'card engine'}
      aria-label={`Engine ${name}`}
      data-engine={engine.engineId ?? ''}
      data-jump={String(engine.jump)}
    >
      <h2>
        {name}{' '}
        {engine.jump ? (
          <span class="tag bad" role="status">
            {`jump: latest k3 ${sci(latest?.k3 ?? null)} > ${stats.jumpFactor}× ${sci(engine.baselineK3)}`}
          </span>
        ) : null}
      </h2>
      <Sparkline engine={engine} stats={stats} />
      <dl class="config">
        {(
          [
            ['k3 (all leases)', sci(engine.k3), 'k3'],
            ['k3 before the latest lease', sci(engine.baselineK3), 'baseline'],
            ['k1', sci(engine.k1), 'k1'],
            ['max |Δ log p|', sci(engine.maxAbsDiff), 'max-abs-diff'],
            ['masked per step', fmt(engine.maskedFraction), 'masked'],
            [
              'leases · steps · tokens',
              `${fmt(engine.leases)} · ${fmt(engine.steps)} · ${fmt(engine.tokens)}`,
              'size',
            ],
          ] as const
        ).map(([label, value, field]) => (
          <div>
            <dt>{label}</dt>
            <dd data-field={field}>{value}</dd>
          </div>
        ))}
      </dl>
      <details>
        <summary>By policy version, and its recent leases</summary>
        <Tallies rows={engine.versions} first="policy version" />
        <Tallies rows={[...engine.recent].reverse()} first="lease (newest first)" />
      </details>
    </section>
  );
}

function MismatchPage({ stats, channel }: { stats: MismatchStats; channel: string | null }) {
  const flagged = stats.engines.filter((e) => e.jump);
  return (
    <Page title="Mismatch" current="/dashboard/mismatch">
      <form class="filters" method="get">
        <label for="channel">Channel</label>
        <input id="channel" name="channel" value={channel ?? ''} placeholder="all channels" />
        <button type="submit">Show</button>
      </form>
      <p class="muted">
        What trainers report after their proximal pass: per step, k1 = mean(log μ − log π) and k3 = mean((r −
        1) − log r) with r = π / μ, both estimates of KL(μ ‖ π) between the engine's behaviour log-probs μ and
        the trainer's π, token-weighted here. An engine is flagged when its latest lease's k3 is over{' '}
        {stats.jumpFactor}× its mean before it and over {sci(stats.jumpFloor)}.
      </p>
      {flagged.length === 0 ? null : (
        <p class="error" role="alert" id="mismatch-flagged">
          {`Mismatch jumped on ${flagged.map((e) => e.engineId ?? 'no engine recorded').join(', ')}.`}
        </p>
      )}
      {stats.engines.length === 0 ? (
        <p class="muted">
          No mismatch reported yet: a trainer posts it with <code>Trainer.report_mismatch</code>{' '}
          (docs/trainers.md).
        </p>
      ) : (
        <>
          <div class="grid engines">
            {stats.engines.map((e) => (
              <EngineCard engine={e} stats={stats} />
            ))}
          </div>
          <section class="card" aria-label="By policy version">
            <h2>All engines by policy version</h2>
            <Tallies rows={stats.versions} first="policy version" />
          </section>
        </>
      )}
    </Page>
  );
}

export function mountMismatchPage(app: Hono<DashboardEnv>, { pool }: DashboardOptions): void {
  app.get('/dashboard/mismatch', async (c) => {
    const raw = c.req.query('channel');
    const channel = raw ? parseOrThrow(ChannelName, raw, 'channel') : null;
    return html(c, <MismatchPage stats={await pool.mismatch(channel, RECENT)} channel={channel} />);
  });
}
