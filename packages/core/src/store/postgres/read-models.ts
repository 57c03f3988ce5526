import type { GroupState, Lease, MismatchStats } from '../../domain/index.js';
import { assembleMismatch, type MismatchSums, mismatchQueries } from '../mismatch.js';
import type { ReadModels } from '../read-models.js';
import {
  assembleStats,
  dashboardSummaryOf,
  type GymTaskRow,
  type LeaseRow,
  rewardBins,
  summarizeGymRuns,
  toLease,
} from '../rows.js';
import { runAsync } from '../tx.js';
import type { DashboardSummary, GymRunSummary, LeaseQuery, Page, PoolStats } from '../types.js';
import type { PgTx } from './tx.js';

/** What the views read of a PostgreSQL store. */
export interface PgReads {
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  one<T>(text: string, values?: unknown[]): Promise<T | undefined>;
  /** Reads on one connection in one snapshot. */
  snapshot<T>(fn: (tx: PgTx) => Promise<T>): Promise<T>;
}

/** The dashboard's and the gym's views on PostgreSQL. */
export class PgReadModels implements ReadModels {
  constructor(private readonly db: PgReads) {}

  async dashboardSummary(channel: string | null, bins = 10): Promise<DashboardSummary> {
    return this.db.snapshot(async (tx) => {
      const range = (await tx.row<{ lo: number | null; hi: number | null }>(
        `SELECT min(reward) AS lo, max(reward) AS hi FROM trajectories
         WHERE status = 'complete' AND reward IS NOT NULL AND ($1::text IS NULL OR channel = $1)`,
        [channel],
      ))!;
      let histogram: DashboardSummary['rewards']['bins'] = [];
      if (range.lo !== null && range.hi !== null) {
        histogram = rewardBins(range.lo, range.hi, bins);
        const n = histogram.length;
        const width = histogram[0]!.to - histogram[0]!.from;
        const rows = await tx.rows<{ bin: number; n: number }>(
          `SELECT least(floor((reward - $1) / $2)::int, $3) AS bin, count(*) AS n
           FROM trajectories WHERE status = 'complete' AND reward IS NOT NULL AND ($4::text IS NULL OR channel = $4)
           GROUP BY 1`,
          [range.lo, width, n - 1, channel],
        );
        for (const r of rows) histogram[r.bin]!.count = r.n;
      }
      const outcome = (await tx.row<Record<string, number | null>>(
        `SELECT
           sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.hi <= 0 THEN 1 ELSE 0 END) AS all_zero,
           sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.lo >= 1 THEN 1 ELSE 0 END) AS all_one,
           sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.hi > 0 AND t.lo < 1 THEN 1 ELSE 0 END) AS mixed,
           sum(CASE WHEN t.unscored > 0 THEN 1 ELSE 0 END) AS unscored
         FROM (
           SELECT group_id, channel, min(reward) AS lo, max(reward) AS hi,
                  sum(CASE WHEN reward IS NULL THEN 1 ELSE 0 END) AS unscored
           FROM trajectories
           WHERE status = 'complete' AND counted = 1 AND ($1::text IS NULL OR channel = $1)
           GROUP BY group_id, channel
         ) t JOIN groups g ON g.channel = t.channel AND g.id = t.group_id
         WHERE g.state IN ('ready', 'leased', 'consumed')`,
        [channel],
      ))!;
      return dashboardSummaryOf(range, histogram, outcome);
    });
  }

  async gymRuns(limit = 50): Promise<GymRunSummary[]> {
    const rows = await this.db.rows<GymTaskRow>(
      `SELECT (metadata::jsonb) ->> 'run_id' AS run, channel,
              coalesce((metadata::jsonb) ->> 'category', '') AS category, coalesce(task_id, '') AS task,
              count(*) AS samples,
              sum(CASE WHEN status = 'infra_failed' THEN 1 ELSE 0 END) AS infra,
              sum(CASE WHEN status = 'complete' AND reward IS NOT NULL THEN 1 ELSE 0 END) AS scored,
              coalesce(sum(CASE WHEN status = 'complete' THEN reward ELSE 0 END), 0) AS score_sum,
              sum(CASE WHEN status = 'complete' AND reward >= 1 THEN 1 ELSE 0 END) AS passed,
              min(created_at) AS started, max(completed_at) AS finished,
              sum(CASE WHEN status = 'open' THEN 1 ELSE 0 END) AS open
       FROM trajectories
       WHERE ((metadata::jsonb) ->> 'run_id') IS NOT NULL AND probe = 0 AND derived_from IS NULL
       GROUP BY 1, 2, 3, 4`,
    );
    return summarizeGymRuns(rows, limit);
  }

  async listLeases(query: LeaseQuery): Promise<Page<Lease>> {
    const channel = query.channel ?? null;
    const total = (await this.db.one<{ n: number }>(
      'SELECT count(*) AS n FROM leases WHERE $1::text IS NULL OR channel = $1',
      [channel],
    ))!.n;
    const rows = await this.db.rows<LeaseRow>(
      `SELECT * FROM leases WHERE $1::text IS NULL OR channel = $1 ORDER BY created_at DESC, seq DESC LIMIT $2 OFFSET $3`,
      [channel, query.limit, query.offset],
    );
    return { total, items: rows.map(toLease) };
  }

  async stats(channel: string | null): Promise<PoolStats> {
    return this.db.snapshot(async (tx) => {
      const counters = await tx.rows<{ name: string; value: number }>(
        'SELECT name, sum(value) AS value FROM counters WHERE $1::text IS NULL OR channel = $1 GROUP BY name',
        [channel],
      );
      const groupStates = await tx.rows<{ state: GroupState; n: number }>(
        'SELECT state, count(*) AS n FROM groups WHERE $1::text IS NULL OR channel = $1 GROUP BY state',
        [channel],
      );
      const activeLeases = (await tx.row<{ n: number }>(
        "SELECT count(*) AS n FROM leases WHERE state = 'active' AND ($1::text IS NULL OR channel = $1)",
        [channel],
      ))!.n;
      const awaitingSignals = (await tx.row<{ n: number }>(
        `SELECT count(*) AS n FROM groups WHERE ($1::text IS NULL OR channel = $1)
           AND state = 'collecting' AND expected IS NOT NULL AND n_finished >= expected`,
        [channel],
      ))!.n;
      const readyVersions = await tx.rows<{ v: number | null; n: number }>(
        `SELECT min_policy_version AS v, count(*) AS n FROM groups
         WHERE ($1::text IS NULL OR channel = $1) AND state = 'ready' GROUP BY min_policy_version`,
        [channel],
      );
      const lastEventSeq =
        (await tx.row<{ seq: number | null }>('SELECT max(seq) AS seq FROM events'))?.seq ?? 0;
      return assembleStats(channel, {
        counters,
        groupStates,
        activeLeases,
        awaitingSignals,
        policyVersion: await runAsync(tx.policyVersion()),
        readyVersions,
        lastEventSeq,
      });
    });
  }

  async mismatch(channel: string | null, recent = 20): Promise<MismatchStats> {
    const queries = mismatchQueries('WHERE $1::text IS NULL OR channel = $1', '$2');
    return this.db.snapshot(async (tx) => {
      // Every query gets both parameters: PostgreSQL wants each one a query names to be given.
      const all = (sql: string) =>
        tx.rows<MismatchSums>(sql, sql.includes('$2') ? [channel, recent] : [channel]);
      return assembleMismatch({
        engines: await all(queries.engines),
        engineVersions: await all(queries.engineVersions),
        versions: await all(queries.versions),
        recent: await all(queries.recent),
      });
    });
  }
}
