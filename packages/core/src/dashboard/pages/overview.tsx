import type { Hono } from 'hono';
import { ChannelName, parseOrThrow } from '../../domain/index.js';
import type { DashboardSummary, PoolStats } from '../../store/store.js';
import { fmt, Page, Stat } from '../layout.js';
import type { DashboardEnv, DashboardOptions } from '../options.js';
import { html } from '../respond.js';

/*
 * Overview: the pool's counters as numbers, the live rates (steps in, groups served) as charts that
 * the page script updates from /v1/stats every two seconds, the staleness histogram, the reward
 * distribution and the group outcome mix, and the failure and drop counters by reason.
 */

/** A horizontal bar list: one labelled bar per entry, widths relative to the largest. */
export function Bars({ label, entries }: { label: string; entries: [string, number][] }) {
  const max = Math.max(1, ...entries.map(([, n]) => n));
  return (
    <figure class="bars" aria-label={label}>
      <figcaption>{label}</figcaption>
      {entries.length === 0 ? <p class="muted">none</p> : null}
      <dl>
        {entries.map(([name, n]) => (
          <div class="bar-row">
            <dt>{name}</dt>
            <dd>
              <span class="bar" style={`width:${(100 * n) / max}%`} />
              <span class="bar-value">{fmt(n)}</span>
            </dd>
          </div>
        ))}
      </dl>
    </figure>
  );
}

function Overview({
  stats,
  summary,
  channel,
}: {
  stats: PoolStats;
  summary: DashboardSummary;
  channel: string | null;
}) {
  const dropped = Object.entries(stats.dropped) as [string, number][];
  const excluded = Object.entries(stats.excluded) as [string, number][];
  const staleness = Object.entries(stats.stalenessHistogram).sort((a, b) => Number(a[0]) - Number(b[0]));
  const o = summary.outcomes;
  return (
    <Page title="Overview" current="/dashboard" scripts={['uPlot.iife.min.js', 'dashboard.js']}>
      <form class="filters" method="get">
        <label for="channel">Channel</label>
        <input id="channel" name="channel" value={channel ?? ''} placeholder="all channels" />
        <button type="submit">Show</button>
      </form>
      <section
        class="stats"
        aria-label="Pool"
        data-live-stats={channel === null ? '/v1/stats' : `/v1/stats?channel=${encodeURIComponent(channel)}`}
      >
        <Stat label="steps stored" value={fmt(stats.produced.steps)} id="s-steps" />
        <Stat label="trajectories" value={fmt(stats.produced.trajectories)} id="s-trajectories" />
        <Stat label="queue depth (ready groups)" value={fmt(stats.queueDepth)} id="s-queue" />
        <Stat label="open leases" value={fmt(stats.activeLeases)} id="s-leases" />
        <Stat label="groups served" value={fmt(stats.leased.groups)} id="s-served" />
        <Stat label="groups consumed" value={fmt(stats.consumed.groups)} id="s-consumed" />
        <Stat label="awaiting signals" value={fmt(stats.awaitingSignals)} id="s-awaiting" />
        <Stat label="policy version" value={fmt(stats.policyVersion)} id="s-version" />
      </section>
      <section class="charts" aria-label="Live rates">
        <figure>
          <figcaption>Steps in per second</figcaption>
          <div class="chart" id="chart-steps" data-series="steps" />
        </figure>
        <figure>
          <figcaption>Groups served per second</figcaption>
          <div class="chart" id="chart-groups" data-series="groups" />
        </figure>
      </section>
      <section class="grid" aria-label="Distributions">
        <Bars
          label="Group outcomes"
          entries={[
            ['all zero', o.allZero],
            ['all one', o.allOne],
            ['mixed', o.mixed],
            ['not all scored', o.unscored],
          ]}
        />
        <Bars
          label="Reward distribution (complete trajectories)"
          entries={summary.rewards.bins.map((b) => [`${fmt(b.from, 2)} – ${fmt(b.to, 2)}`, b.count])}
        />
        <Bars label="Ready groups by staleness" entries={staleness.map(([k, n]) => [`${k} behind`, n])} />
        <Bars
          label="Failures"
          entries={[
            ['prefix breaks', stats.prefixBreaks],
            ['infrastructure failures', stats.completed.infraFailed],
            ['aborted trajectories', stats.completed.aborted],
            ['idle-aborted', stats.completed.idleAborted],
            ['aborted calls', stats.failedCalls.aborted],
            ['upstream errors', stats.failedCalls.upstreamError],
            ['duplicate steps', stats.duplicateSteps],
          ]}
        />
        <Bars label="Dropped groups by reason" entries={dropped} />
        <Bars label="Excluded trajectories by reason" entries={excluded} />
      </section>
      <section class="card" aria-label="Curation metrics">
        <h2>Curation: kept and dropped</h2>
        <table>
          <thead>
            <tr>
              <th scope="col" />
              <th scope="col">groups</th>
              <th scope="col">trajectories</th>
              <th scope="col">mean reward</th>
            </tr>
          </thead>
          <tbody>
            {(['kept', 'dropped', 'all'] as const).map((k) => (
              <tr>
                <th scope="row">{k}</th>
                <td>{fmt(stats.curation[k].groups)}</td>
                <td>{fmt(stats.curation[k].trajectories)}</td>
                <td>{fmt(stats.curation[k].meanReward)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      </section>
    </Page>
  );
}

export function mountOverview(app: Hono<DashboardEnv>, { pool }: DashboardOptions): void {
  app.get('/dashboard', async (c) => {
    const raw = c.req.query('channel');
    const channel = raw ? parseOrThrow(ChannelName, raw, 'channel') : null;
    const [stats, summary] = await Promise.all([pool.stats(channel), pool.store.dashboardSummary(channel)]);
    return html(c, <Overview stats={stats} summary={summary} channel={channel} />);
  });
}
