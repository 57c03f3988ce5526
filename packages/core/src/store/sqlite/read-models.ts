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
import type { DashboardSummary, GymRunSummary, LeaseQuery, Page, PoolStats } from '../types.js';
import type { Statement } from './statements.js';

/** What the views read of a SQLite store. */
export interface SqliteReads {
  stmt(source: string): Statement;
  policyVersion(): number;
  lastEventSeq(): number;
}

/** The dashboard's and the gym's views on SQLite (reads run synchronously: one consistent state). */
export class SqliteReadModels implements ReadModels {
  constructor(private readonly db: SqliteReads) {}

  /**
   * The ready groups a lease of this shape considers, oldest readiness first (groups of another
   * size skipped), each with its staleness; paged, so a caller that stops early reads little. A
   * caller may drop the groups it is given as it goes.
   */
  async dashboardSummary(channel: string | null, bins = 10): Promise<DashboardSummary> {
    const where = channel === null ? '' : 'AND channel = ?';
    const args = channel === null ? [] : [channel];
    const range = this.db
      .stmt(
        `SELECT min(reward) AS lo, max(reward) AS hi FROM trajectories WHERE status = 'complete' AND reward IS NOT NULL ${where}`,
      )
      .get(...args) as { lo: number | null; hi: number | null };
    let histogram: DashboardSummary['rewards']['bins'] = [];
    if (range.lo !== null && range.hi !== null) {
      histogram = rewardBins(range.lo, range.hi, bins);
      const n = histogram.length;
      const width = histogram[0]!.to - histogram[0]!.from;
      const rows = this.db
        .stmt(
          `SELECT min(CAST((reward - ?) / ? AS INTEGER), ?) AS bin, count(*) AS n
         FROM trajectories WHERE status = 'complete' AND reward IS NOT NULL ${where} GROUP BY bin`,
        )
        .all(range.lo, width, n - 1, ...args) as { bin: number; n: number }[];
      for (const r of rows) histogram[r.bin]!.count = r.n;
    }
    // Per group from the covering group index alone (in its order: no sort), then joined to the
    // settled groups.
    const outcome = this.db
      .stmt(
        `SELECT
         sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.hi <= 0 THEN 1 ELSE 0 END) AS all_zero,
         sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.lo >= 1 THEN 1 ELSE 0 END) AS all_one,
         sum(CASE WHEN t.unscored > 0 THEN 0 WHEN t.hi > 0 AND t.lo < 1 THEN 1 ELSE 0 END) AS mixed,
         sum(CASE WHEN t.unscored > 0 THEN 1 ELSE 0 END) AS unscored
       FROM (
         SELECT group_id, channel, min(reward) AS lo, max(reward) AS hi,
                sum(CASE WHEN reward IS NULL THEN 1 ELSE 0 END) AS unscored
         FROM trajectories INDEXED BY trajectories_group
         WHERE status = 'complete' AND counted = 1 ${where}
         GROUP BY group_id, channel
       ) t JOIN groups g ON g.channel = t.channel AND g.id = t.group_id
       WHERE g.state IN ('ready', 'leased', 'consumed')`,
      )
      .get(...args) as Record<string, number | null>;
    return dashboardSummaryOf(range, histogram, outcome);
  }

  async gymRuns(limit = 50): Promise<GymRunSummary[]> {
    const rows = this.db
      .stmt(
        `SELECT json_extract(metadata, '$.run_id') AS run, channel,
              coalesce(json_extract(metadata, '$.category'), '') AS category, coalesce(task_id, '') AS task,
              count(*) AS samples,
              sum(CASE WHEN status = 'infra_failed' THEN 1 ELSE 0 END) AS infra,
              sum(CASE WHEN status = 'complete' AND reward IS NOT NULL THEN 1 ELSE 0 END) AS scored,
              sum(CASE WHEN status = 'complete' THEN reward ELSE 0 END) AS score_sum,
              sum(CASE WHEN status = 'complete' AND reward >= 1 THEN 1 ELSE 0 END) AS passed,
              min(created_at) AS started, max(completed_at) AS finished,
              sum(CASE WHEN status = 'open' THEN 1 ELSE 0 END) AS open
       FROM trajectories INDEXED BY trajectories_gym_run
       WHERE json_extract(metadata, '$.run_id') IS NOT NULL AND probe = 0 AND derived_from IS NULL
       GROUP BY json_extract(metadata, '$.run_id'), channel, json_extract(metadata, '$.category'), task_id`,
      )
      .all() as GymTaskRow[];
    return summarizeGymRuns(rows, limit);
  }

  async listLeases(query: LeaseQuery): Promise<Page<Lease>> {
    const where = query.channel === undefined ? '' : 'WHERE channel = ?';
    const args = query.channel === undefined ? [] : [query.channel];
    const { n } = this.db.stmt(`SELECT count(*) AS n FROM leases ${where}`).get(...args) as { n: number };
    const rows = this.db
      .stmt(`SELECT * FROM leases ${where} ORDER BY created_at DESC, rowid DESC LIMIT ? OFFSET ?`)
      .all(...args, query.limit, query.offset) as LeaseRow[];
    return { total: n, items: rows.map(toLease) };
  }

  async stats(channel: string | null): Promise<PoolStats> {
    const counterRows = (
      channel === null
        ? this.db.stmt('SELECT name, sum(value) AS value FROM counters GROUP BY name').all()
        : this.db.stmt('SELECT name, value FROM counters WHERE channel = ?').all(channel)
    ) as { name: string; value: number }[];
    const stateRows = (
      channel === null
        ? this.db.stmt('SELECT state, count(*) AS n FROM groups GROUP BY state').all()
        : this.db
            .stmt('SELECT state, count(*) AS n FROM groups WHERE channel = ? GROUP BY state')
            .all(channel)
    ) as { state: GroupState; n: number }[];
    const { n: activeLeases } = (
      channel === null
        ? this.db.stmt("SELECT count(*) AS n FROM leases WHERE state = 'active'").get()
        : this.db.stmt("SELECT count(*) AS n FROM leases WHERE state = 'active' AND channel = ?").get(channel)
    ) as { n: number };
    const awaiting = "state = 'collecting' AND expected IS NOT NULL AND n_finished >= expected";
    const { n: awaitingSignals } = (
      channel === null
        ? this.db.stmt(`SELECT count(*) AS n FROM groups WHERE ${awaiting}`).get()
        : this.db.stmt(`SELECT count(*) AS n FROM groups WHERE channel = ? AND ${awaiting}`).get(channel)
    ) as { n: number };
    const policyVersion = this.db.policyVersion();
    const versionRows = (
      channel === null
        ? this.db
            .stmt(
              "SELECT min_policy_version AS v, count(*) AS n FROM groups WHERE state = 'ready' GROUP BY min_policy_version",
            )
            .all()
        : this.db
            .stmt(
              "SELECT min_policy_version AS v, count(*) AS n FROM groups WHERE channel = ? AND state = 'ready' GROUP BY min_policy_version",
            )
            .all(channel)
    ) as { v: number | null; n: number }[];
    return assembleStats(channel, {
      counters: counterRows,
      groupStates: stateRows,
      activeLeases,
      awaitingSignals,
      policyVersion,
      readyVersions: versionRows,
      lastEventSeq: this.db.lastEventSeq(),
    });
  }

  async mismatch(channel: string | null, recent = 20): Promise<MismatchStats> {
    const queries = mismatchQueries(channel === null ? '' : 'WHERE channel = ?', '?');
    const args = channel === null ? [] : [channel];
    const all = (sql: string, ...more: unknown[]) =>
      this.db.stmt(sql).all(...args, ...more) as MismatchSums[];
    return assembleMismatch({
      engines: all(queries.engines),
      engineVersions: all(queries.engineVersions),
      versions: all(queries.versions),
      recent: all(queries.recent, recent),
    });
  }
}
