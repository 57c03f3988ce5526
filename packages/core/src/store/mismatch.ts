import {
  type EngineMismatch,
  MISMATCH_JUMP_FACTOR,
  MISMATCH_JUMP_FLOOR,
  type MismatchLease,
  type MismatchStats,
  type MismatchTally,
  type MismatchVersion,
} from '../domain/index.js';

/*
 * Mismatch telemetry in the store: one row per reported step (`mismatch`) and, rewritten from them
 * in the same transaction, one row per lease, engine and policy version (`mismatch_leases`), which
 * is what the read model aggregates: per engine, per version, and each engine's recent leases.
 */

/** A step named by a mismatch report. */
export interface StepRef {
  trajectoryId: string;
  index: number;
}

/** Where a reported step's trajectory is, and the stored step's engine and version (`found` false: no such step). */
export interface StepOrigin {
  group_id: string;
  channel: string;
  found: boolean;
  engine_id: string | null;
  policy_version: number | null;
}

/** One reported step as stored (the lease, channel and time are the call's). */
export interface MismatchRow {
  trajectory_id: string;
  step_index: number;
  engine_id: string | null;
  policy_version: number;
  tokens: number;
  k1: number;
  k3: number;
  max_abs_diff: number;
  masked_fraction: number;
}

/** The `mismatch` columns in the order `mismatchValues` gives them. */
export const MISMATCH_COLUMNS = `lease_id, trajectory_id, step_index, channel, engine_id, policy_version, tokens,
  k1, k3, max_abs_diff, masked_fraction, created_at`;

/** A step reported again for the same lease replaces its row (a retried report counts once). */
export const MISMATCH_UPSERT = `ON CONFLICT (lease_id, trajectory_id, step_index) DO UPDATE SET
  engine_id = excluded.engine_id, policy_version = excluded.policy_version, tokens = excluded.tokens,
  k1 = excluded.k1, k3 = excluded.k3, max_abs_diff = excluded.max_abs_diff,
  masked_fraction = excluded.masked_fraction, created_at = excluded.created_at`;

/** One row's values, in MISMATCH_COLUMNS order. */
export function mismatchValues(
  lease: { id: string; channel: string },
  r: MismatchRow,
  now: number,
): unknown[] {
  return [
    lease.id,
    r.trajectory_id,
    r.step_index,
    lease.channel,
    r.engine_id,
    r.policy_version,
    r.tokens,
    r.k1,
    r.k3,
    r.max_abs_diff,
    r.masked_fraction,
    now,
  ];
}

/** Rebuilds a lease's per-(engine, version) tallies from its step rows; `at` and `lease` are placeholders. */
export function mismatchRollupSql(at: string, lease: string): string {
  return `INSERT INTO mismatch_leases
      (lease_id, engine, policy_version, channel, at, steps, tokens, k1_sum, k3_sum, max_abs_diff, masked_sum)
    SELECT lease_id, coalesce(engine_id, ''), policy_version, min(channel), ${at}, count(*), sum(tokens),
           sum(k1 * tokens), sum(k3 * tokens), max(max_abs_diff), sum(masked_fraction)
    FROM mismatch WHERE lease_id = ${lease} GROUP BY lease_id, coalesce(engine_id, ''), policy_version`;
}

/** Sums over some `mismatch_leases` rows, as the read model's queries select them. */
export interface MismatchSums {
  engine?: string;
  policy_version?: number;
  lease_id?: string;
  at?: number;
  leases?: number;
  steps: number;
  tokens: number;
  k1_sum: number;
  k3_sum: number;
  max_abs_diff: number;
  masked_sum: number;
}

const SUMS = `sum(steps) AS steps, sum(tokens) AS tokens, sum(k1_sum) AS k1_sum, sum(k3_sum) AS k3_sum,
  max(max_abs_diff) AS max_abs_diff, sum(masked_sum) AS masked_sum`;

/**
 * The read model's four queries over `mismatch_leases`, with `where` (a channel filter or '') and
 * `limit` (the placeholder of how many recent leases per engine) spelled in the backend's syntax.
 */
export function mismatchQueries(where: string, limit: string) {
  return {
    engines: `SELECT engine, count(DISTINCT lease_id) AS leases, ${SUMS} FROM mismatch_leases ${where} GROUP BY engine`,
    engineVersions: `SELECT engine, policy_version, ${SUMS} FROM mismatch_leases ${where} GROUP BY engine, policy_version`,
    versions: `SELECT policy_version, ${SUMS} FROM mismatch_leases ${where} GROUP BY policy_version`,
    // Each engine's latest leases (by when they were leased), numbered newest first.
    recent: `SELECT * FROM (
        SELECT engine, lease_id, min(at) AS at, ${SUMS},
               row_number() OVER (PARTITION BY engine ORDER BY min(at) DESC, lease_id DESC) AS rn
        FROM mismatch_leases ${where} GROUP BY engine, lease_id
      ) r WHERE rn <= ${limit} ORDER BY engine, at, lease_id`,
  };
}

function tally(s: MismatchSums): MismatchTally {
  const tokens = Number(s.tokens);
  return {
    steps: Number(s.steps),
    tokens,
    k1: Number(s.k1_sum) / tokens,
    k3: Number(s.k3_sum) / tokens,
    maxAbsDiff: Number(s.max_abs_diff),
    maskedFraction: Number(s.masked_sum) / Number(s.steps),
  };
}

const version = (s: MismatchSums): MismatchVersion => ({
  policyVersion: Number(s.policy_version),
  ...tally(s),
});

const byVersion = (a: MismatchVersion, b: MismatchVersion) => a.policyVersion - b.policyVersion;

/** The read model's answer from its four queries' rows. */
export function assembleMismatch(rows: {
  engines: MismatchSums[];
  engineVersions: MismatchSums[];
  versions: MismatchSums[];
  recent: MismatchSums[];
}): MismatchStats {
  const engines = rows.engines.map((e): EngineMismatch => {
    const recent = rows.recent.filter((r) => r.engine === e.engine);
    const points = recent.map(
      (r): MismatchLease => ({ leaseId: r.lease_id!, at: Number(r.at), ...tally(r) }),
    );
    const latest = recent.at(-1);
    const earlierTokens = Number(e.tokens) - Number(latest?.tokens ?? 0);
    // The engine's mean before its latest lease: its running mean, which the latest is judged against.
    const baselineK3 =
      latest && Number(e.leases) > 1 && earlierTokens > 0
        ? (Number(e.k3_sum) - Number(latest.k3_sum)) / earlierTokens
        : null;
    const latestK3 = points.at(-1)?.k3 ?? 0;
    return {
      engineId: e.engine === '' ? null : e.engine!,
      leases: Number(e.leases),
      ...tally(e),
      recent: points,
      baselineK3,
      jump:
        baselineK3 !== null && latestK3 > MISMATCH_JUMP_FACTOR * baselineK3 && latestK3 > MISMATCH_JUMP_FLOOR,
      versions: rows.engineVersions
        .filter((v) => v.engine === e.engine)
        .map(version)
        .sort(byVersion),
    };
  });
  engines.sort((a, b) => (a.engineId ?? '').localeCompare(b.engineId ?? ''));
  return {
    jumpFactor: MISMATCH_JUMP_FACTOR,
    jumpFloor: MISMATCH_JUMP_FLOOR,
    engines,
    versions: rows.versions.map(version).sort(byVersion),
  };
}
