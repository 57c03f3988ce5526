import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type pg from 'pg';
import { StepwiseError } from '../domain/index.js';
import { inTransaction, openPostgresDatabase } from '../store/postgres/connect.js';
import {
  type AttemptError,
  type EnqueueOutcome,
  JOB_STATES,
  type JobFilter,
  type JobKind,
  type JobRequest,
  type JobRow,
  type JobState,
  jobFilterConditions,
  type RewardJob,
  type RewardJobQueue,
  toJob,
  UNFINISHED_SUFFIX,
} from './job-queue.js';

// The reward job queue on PostgreSQL, with the SQLite queue's semantics (job-queue.ts), for many processes
// sharing one database. Its locks and races: docs/rewards.md#reward-jobs ("On PostgreSQL").

export interface PostgresRewardJobQueueOptions {
  /** `postgres://user@host:port/database` */
  url: string;
  /** The store's schema (created when missing); default `public`. */
  schema?: string;
  /** Connections this queue keeps open (default 4). */
  poolSize?: number;
}

/** Where a job's (trajectory or group) target is matched, as SQLite's `jobsOf`. */
function targetClause(trajectoryId: string | null, first: number): string {
  return trajectoryId !== null
    ? `trajectory_id = $${first}`
    : `group_id = $${first} AND trajectory_id IS NULL`;
}

/** The target key of the unique pending index (migration 0002_reward_jobs), for a table alias. */
const targetKey = (alias: string) => `coalesce('t:' || ${alias}.trajectory_id, 'g:' || ${alias}.group_id)`;

/** Opens the queue in the store's schema (creating its tables, and the store's, if missing). */
export async function openPostgresRewardJobQueue(
  options: PostgresRewardJobQueueOptions,
): Promise<PostgresRewardJobQueue> {
  const { pool, kysely, schema } = await openPostgresDatabase<unknown>({
    url: options.url,
    schema: options.schema,
    poolSize: options.poolSize ?? 4,
    what: 'the reward job queue',
  });
  return new PostgresRewardJobQueue(pool, kysely, schema);
}

/** One transaction's connection. */
class Tx {
  constructor(
    readonly client: pg.PoolClient,
    private readonly prepared: (text: string, values: unknown[]) => pg.QueryConfig,
  ) {}

  async rows(text: string, values: unknown[] = []): Promise<JobRow[]> {
    return (await this.client.query(this.prepared(text, values))).rows as JobRow[];
  }

  async row(text: string, values: unknown[] = []): Promise<JobRow | undefined> {
    return (await this.rows(text, values))[0];
  }

  async run(text: string, values: unknown[] = []): Promise<void> {
    await this.client.query(this.prepared(text, values));
  }
}

export class PostgresRewardJobQueue implements RewardJobQueue {
  private closed = false;
  /** Statement names by SQL text: pg prepares each once per connection. */
  private readonly statementNames = new Map<string, string>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly kysely: Kysely<unknown>,
    /** Part of the target lock keys: advisory locks are shared by every schema of the database. */
    private readonly schema: string,
  ) {}

  private prepared = (text: string, values: unknown[]): pg.QueryConfig => {
    let name = this.statementNames.get(text);
    if (!name) {
      name = `rq${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
      this.statementNames.set(text, name);
    }
    return { name, text, values };
  };

  private checkOpen(): void {
    if (this.closed)
      throw new StepwiseError('the reward job queue is closed', 503, 'unavailable', undefined, true);
  }

  /** Runs fn in one transaction; one that lost a race runs again from the start (connect.ts). */
  private async write<T>(fn: (tx: Tx) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, (client) => fn(new Tx(client, this.prepared)), {
      check: () => this.checkOpen(),
    });
  }

  private async read<R>(text: string, values: unknown[] = []): Promise<R[]> {
    this.checkOpen();
    return (await this.pool.query(this.prepared(text, values))).rows as R[];
  }

  /** The newest job of one target and function in `states` (SQL list), locked when `lock`. */
  private async jobOf(
    tx: Tx,
    r: { kind: JobKind; function: string; trajectoryId: string | null; groupId: string | null },
    states: string,
    options: { except?: number; version?: string; lock?: boolean } = {},
  ): Promise<JobRow | undefined> {
    const values: unknown[] = [r.trajectoryId ?? r.groupId, r.function, r.kind, options.except ?? -1];
    let extra = '';
    if (options.version !== undefined) {
      // A result computed while the trajectory was open never stands in for the finished one's.
      values.push(options.version, UNFINISHED_SUFFIX);
      extra = ` AND version = $5 AND right(reason, char_length($6)) <> $6`;
    }
    return tx.row(
      `SELECT * FROM reward_jobs WHERE ${targetClause(r.trajectoryId, 1)} AND function = $2 AND kind = $3
         AND state IN (${states}) AND id <> $4${extra} ORDER BY id DESC LIMIT 1${options.lock ? ' FOR UPDATE' : ''}`,
      values,
    );
  }

  /**
   * Holds the targets of `requests` to the commit, all at once and in one order, so transactions
   * queueing overlapping targets (schedulers of several processes) wait for each other instead of
   * deadlocking on each other's new rows.
   */
  private async lockTargets(tx: Tx, requests: JobRequest[]): Promise<void> {
    const keys = requests.map((r) =>
      JSON.stringify([
        this.schema,
        r.kind,
        r.function,
        r.trajectoryId,
        r.trajectoryId !== null ? null : r.groupId,
      ]),
    );
    await tx.run(
      `SELECT pg_advisory_xact_lock(h) FROM (
         SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k ORDER BY h) AS targets`,
      [keys],
    );
  }

  private async enqueueTx(tx: Tx, requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    if (requests.length === 0) return [];
    await this.lockTargets(tx, requests);
    const outcomes: EnqueueOutcome[] = [];
    for (const r of requests) outcomes.push(await this.enqueueOne(tx, r, outcomes, now));
    return outcomes;
  }

  private async enqueueOne(
    tx: Tx,
    r: JobRequest,
    earlier: EnqueueOutcome[],
    now: number,
  ): Promise<EnqueueOutcome> {
    // Skipped: the job that was queued instead will queue this one when it finishes.
    const after = r.unlessCreated?.map((i) => earlier[i]).find((o) => o?.created);
    if (after) return { job: after.job, created: false };
    for (let tries = 0; tries < 8; tries++) {
      // Locked, so a claim cannot take it while its version changes (the claim skips it instead).
      const twin = await this.jobOf(tx, r, `'pending'`, { lock: true });
      if (twin) {
        if (twin.version === r.version && twin.max_attempts === r.maxAttempts)
          return { job: toJob(twin), created: false };
        const updated = await tx.row(
          `UPDATE reward_jobs SET version = $1, max_attempts = $2, updated_at = $3 WHERE id = $4 RETURNING *`,
          [r.version, r.maxAttempts, now, twin.id],
        );
        return { job: toJob(updated!), created: false };
      }
      if (r.kind === 'function' && !r.force) {
        const ran = await this.jobOf(tx, r, `'running', 'done', 'failed'`, { version: r.version });
        if (ran) return { job: toJob(ran), created: false };
      }
      // Nothing inserted: another process queued the pending twin since; the next turn finds it.
      const inserted = await tx.row(
        `INSERT INTO reward_jobs (kind, channel, trajectory_id, group_id, function, version, state, attempts,
           max_attempts, run_at, reason, created_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $8, $9, $8, $8)
         ON CONFLICT DO NOTHING RETURNING *`,
        [r.kind, r.channel, r.trajectoryId, r.groupId, r.function, r.version, r.maxAttempts, now, r.reason],
      );
      if (inserted) return { job: toJob(inserted), created: true };
    }
    throw Object.assign(new Error('queueing a reward job kept racing with other processes'), {
      code: '40001',
    });
  }

  async enqueue(requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    if (requests.length === 0) return [];
    return this.write((tx) => this.enqueueTx(tx, requests, now));
  }

  async claim(
    worker: string,
    limit: number,
    now: number,
    leaseMs: (job: RewardJob) => number,
  ): Promise<RewardJob[]> {
    if (limit <= 0) return [];
    return this.write(async (tx) => {
      const claimed: RewardJob[] = [];
      // Jobs whose worker went away (its lease passed): that attempt is lost and counts. A lost job
      // another claimer holds is its to handle.
      const lost = await tx.rows(
        `SELECT * FROM reward_jobs WHERE state = 'running' AND lease_until < $1 ORDER BY lease_until, id
           LIMIT $2 FOR UPDATE SKIP LOCKED`,
        [now, limit],
      );
      for (const row of lost) {
        const errors = JSON.parse(row.errors) as AttemptError[];
        const message = `attempt ${row.attempts} was lost: its worker (${row.worker}) stopped before finishing`;
        errors.push({ attempt: row.attempts, at: now, message, retryable: true });
        if (row.attempts >= row.max_attempts) {
          await tx.run(
            `UPDATE reward_jobs SET state = 'failed', error = $1, errors = $2, lease_until = NULL, worker = NULL,
               updated_at = $3, finished_at = $3 WHERE id = $4`,
            [message, JSON.stringify(errors), now, row.id],
          );
          continue;
        }
        if (await this.pendingTwin(tx, row)) {
          await this.supersede(tx, row.id, message, errors, now);
          continue;
        }
        const taken = await tx.row(
          `UPDATE reward_jobs SET attempts = attempts + 1, lease_until = $1, worker = $2, error = $3, errors = $4,
             updated_at = $5 WHERE id = $6 RETURNING *`,
          [now + leaseMs(toJob(row)), worker, message, JSON.stringify(errors), now, row.id],
        );
        claimed.push(toJob(taken!));
      }
      const need = limit - claimed.length;
      if (need <= 0) return claimed;
      // Never two jobs for one target and function at once: a pending job whose twin runs waits.
      // Rows other claimers (or an enqueue that found them) hold are skipped, never waited for.
      const due = await tx.rows(
        `SELECT p.* FROM reward_jobs p WHERE p.state = 'pending' AND p.run_at <= $1
           AND NOT EXISTS (
             SELECT 1 FROM reward_jobs r WHERE r.state = 'running' AND r.function = p.function
               AND ${targetKey('r')} = ${targetKey('p')} AND r.kind = p.kind)
         ORDER BY p.run_at, p.id LIMIT $2 FOR UPDATE OF p SKIP LOCKED`,
        [now, need],
      );
      if (due.length === 0) return claimed;
      const taken = await tx.rows(
        `UPDATE reward_jobs j SET state = 'running', attempts = j.attempts + 1, lease_until = t.lease_until,
           worker = $3, updated_at = $4
         FROM unnest($1::bigint[], $2::bigint[]) AS t(id, lease_until) WHERE j.id = t.id RETURNING j.*`,
        [due.map((r) => r.id), due.map((r) => now + leaseMs(toJob(r))), worker, now],
      );
      const byId = new Map(taken.map((r) => [r.id, r]));
      for (const r of due) claimed.push(toJob(byId.get(r.id)!));
      return claimed;
    });
  }

  private pendingTwin(tx: Tx, row: JobRow): Promise<JobRow | undefined> {
    return this.jobOf(
      tx,
      { kind: row.kind, function: row.function, trajectoryId: row.trajectory_id, groupId: row.group_id },
      `'pending'`,
      { except: row.id },
    );
  }

  private async supersede(
    tx: Tx,
    id: number,
    error: string | null,
    errors: AttemptError[],
    now: number,
  ): Promise<JobRow> {
    const row = await tx.row(
      `UPDATE reward_jobs SET state = 'superseded', error = $1, errors = $2, lease_until = NULL, worker = NULL,
         updated_at = $3, finished_at = $3 WHERE id = $4 RETURNING *`,
      [error, JSON.stringify(errors), now, id],
    );
    return row!;
  }

  /** The job, locked, if it is running for this worker. */
  private owned(tx: Tx, id: number, worker: string): Promise<JobRow | undefined> {
    return tx.row(
      `SELECT * FROM reward_jobs WHERE id = $1 AND state = 'running' AND worker = $2 FOR UPDATE`,
      [id, worker],
    );
  }

  async complete(
    id: number,
    worker: string,
    result: Record<string, unknown>,
    now: number,
    followUps: JobRequest[] = [],
  ): Promise<RewardJob | null> {
    return this.write(async (tx) => {
      if (!(await this.owned(tx, id, worker))) return null;
      const row = await tx.row(
        `UPDATE reward_jobs SET state = 'done', result = $1, lease_until = NULL, updated_at = $2, finished_at = $2
           WHERE id = $3 RETURNING *`,
        [JSON.stringify(result), now, id],
      );
      // Follow-ups never change this job: it is done, and only pending twins are updated.
      await this.enqueueTx(tx, followUps, now);
      return toJob(row!);
    });
  }

  async retry(
    id: number,
    worker: string,
    error: AttemptError,
    runAt: number,
    now: number,
  ): Promise<RewardJob | null> {
    return this.write(async (tx) => {
      const row = await this.owned(tx, id, worker);
      if (!row) return null;
      const errors = [...(JSON.parse(row.errors) as AttemptError[]), error];
      if (await this.pendingTwin(tx, row))
        return toJob(await this.supersede(tx, id, error.message, errors, now));
      const updated = await tx.row(
        `UPDATE reward_jobs SET state = 'pending', run_at = $1, error = $2, errors = $3, lease_until = NULL,
           worker = NULL, updated_at = $4 WHERE id = $5 RETURNING *`,
        [runAt, error.message, JSON.stringify(errors), now, id],
      );
      return toJob(updated!);
    });
  }

  async fail(id: number, worker: string, error: AttemptError, now: number): Promise<RewardJob | null> {
    return this.write(async (tx) => {
      const row = await this.owned(tx, id, worker);
      if (!row) return null;
      const errors = [...(JSON.parse(row.errors) as AttemptError[]), error];
      const updated = await tx.row(
        `UPDATE reward_jobs SET state = 'failed', error = $1, errors = $2, lease_until = NULL, updated_at = $3,
           finished_at = $3 WHERE id = $4 RETURNING *`,
        [error.message, JSON.stringify(errors), now, id],
      );
      return toJob(updated!);
    });
  }

  async release(id: number, worker: string, now: number): Promise<void> {
    await this.write(async (tx) => {
      const row = await this.owned(tx, id, worker);
      if (!row) return;
      if (await this.pendingTwin(tx, row)) {
        await this.supersede(tx, id, row.error, JSON.parse(row.errors) as AttemptError[], now);
        return;
      }
      await tx.run(
        `UPDATE reward_jobs SET state = 'pending', attempts = attempts - 1, run_at = $1, lease_until = NULL,
           worker = NULL, updated_at = $1 WHERE id = $2`,
        [now, id],
      );
    });
  }

  async get(id: number): Promise<RewardJob | null> {
    const [row] = await this.read<JobRow>('SELECT * FROM reward_jobs WHERE id = $1', [id]);
    return row ? toJob(row) : null;
  }

  async getMany(ids: readonly number[]): Promise<RewardJob[]> {
    if (ids.length === 0) return [];
    const rows = await this.read<JobRow>('SELECT * FROM reward_jobs WHERE id = ANY($1::bigint[])', [
      [...ids],
    ]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    return ids.flatMap((id) => {
      const row = byId.get(id);
      return row ? [toJob(row)] : [];
    });
  }

  async list(filter: JobFilter): Promise<RewardJob[]> {
    const conditions = jobFilterConditions(filter);
    const where =
      conditions.length > 0
        ? `WHERE ${conditions.map((c, i) => `${c.column} ${c.op} $${i + 1}`).join(' AND ')}`
        : '';
    const rows = await this.read<JobRow>(
      `SELECT * FROM reward_jobs ${where} ORDER BY id DESC LIMIT $${conditions.length + 1}`,
      [...conditions.map((c) => c.value), filter.limit],
    );
    return rows.map(toJob);
  }

  async counts(): Promise<Record<JobState, number>> {
    const counts = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    const rows = await this.read<{ state: JobState; n: number }>(
      'SELECT state, count(*) AS n FROM reward_jobs GROUP BY state',
    );
    for (const r of rows) counts[r.state] = r.n;
    return counts;
  }

  async nextDue(): Promise<number | null> {
    const [row] = await this.read<{ at: number | null }>(
      `SELECT min(run_at) AS at FROM reward_jobs WHERE state = 'pending'`,
    );
    return row?.at ?? null;
  }

  async cursor(name: string): Promise<number | null> {
    const [row] = await this.read<{ seq: number }>('SELECT seq FROM reward_cursors WHERE name = $1', [name]);
    return row?.seq ?? null;
  }

  async advance(name: string, seq: number, requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    return this.write(async (tx) => {
      const outcomes = await this.enqueueTx(tx, requests, now);
      await tx.run(
        `INSERT INTO reward_cursors (name, seq, updated_at) VALUES ($1, $2, $3)
           ON CONFLICT (name) DO UPDATE
           SET seq = greatest(reward_cursors.seq, excluded.seq), updated_at = excluded.updated_at`,
        [name, seq, now],
      );
      return outcomes;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.kysely.destroy();
  }
}
