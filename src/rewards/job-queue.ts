import Database from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { StepwiseError } from '../domain/index.js';
import { sqliteMigrations } from '../store/sqlite/migrations.js';
import { type Statement, statementCache } from '../store/sqlite/statements.js';

// The reward job queue in the store's SQLite file, through a connection of its own, so jobs survive a
// restart and processes sharing the file share it. States, leases, dedup: docs/rewards.md#reward-jobs

export type JobKind = 'function' | 'combine';

/**
 * Ends the `reason` of a job queued for a trajectory still open: its result never stands in for the
 * finished trajectory's, so completion queues the function again.
 */
export const UNFINISHED_SUFFIX = ':open';
export type JobState = 'pending' | 'running' | 'done' | 'failed' | 'superseded';
export const JOB_STATES: readonly JobState[] = ['pending', 'running', 'done', 'failed', 'superseded'];

export interface AttemptError {
  attempt: number;
  at: number;
  message: string;
  retryable: boolean;
}

export interface RewardJob {
  id: number;
  kind: JobKind;
  channel: string;
  trajectoryId: string | null;
  groupId: string | null;
  /** The reward function, or the combination's signal name. */
  function: string;
  version: string;
  state: JobState;
  attempts: number;
  maxAttempts: number;
  runAt: number;
  leaseUntil: number | null;
  worker: string | null;
  /** The last attempt's error. */
  error: string | null;
  errors: AttemptError[];
  result: Record<string, unknown> | null;
  /** Why it was queued: completed, group_ready, signal, compute_reward, recompute, ... */
  reason: string;
  createdAt: number;
  updatedAt: number;
  finishedAt: number | null;
}

export interface JobRequest {
  kind: JobKind;
  channel: string;
  trajectoryId: string | null;
  groupId: string | null;
  function: string;
  version: string;
  maxAttempts: number;
  reason: string;
  /** Queue even if a job with this version already ran (recompute). */
  force?: boolean;
  /**
   * Indices of earlier requests of the same call: when any of them queued a new job, skip this one
   * (a combination queued by the function jobs it waits for, when they finish).
   */
  unlessCreated?: number[];
}

export interface EnqueueOutcome {
  job: RewardJob;
  created: boolean;
}

export interface JobFilter {
  state?: JobState;
  kind?: JobKind;
  channel?: string;
  trajectoryId?: string;
  groupId?: string;
  function?: string;
  /** Only jobs with a smaller id (pages newest first). */
  beforeId?: number;
  limit: number;
}

/** The queue's contract; SQLite here, another database later. */
export interface RewardJobQueue {
  enqueue(requests: JobRequest[], now: number): Promise<EnqueueOutcome[]>;
  /** Takes up to `limit` due jobs for `worker`; each gets a lease of `leaseMs(job)`. */
  claim(
    worker: string,
    limit: number,
    now: number,
    leaseMs: (job: RewardJob) => number,
  ): Promise<RewardJob[]>;
  /** Marks a running job done and queues its follow-ups, atomically; null when the job is no longer this worker's. */
  complete(
    id: number,
    worker: string,
    result: Record<string, unknown>,
    now: number,
    followUps?: JobRequest[],
  ): Promise<RewardJob | null>;
  /** Records a failed attempt and queues the job again at `runAt`. */
  retry(
    id: number,
    worker: string,
    error: AttemptError,
    runAt: number,
    now: number,
  ): Promise<RewardJob | null>;
  /** Records the last failed attempt: the job has failed. */
  fail(id: number, worker: string, error: AttemptError, now: number): Promise<RewardJob | null>;
  /** Gives a running job back without counting the attempt (the worker is stopping). */
  release(id: number, worker: string, now: number): Promise<void>;
  get(id: number): Promise<RewardJob | null>;
  getMany(ids: readonly number[]): Promise<RewardJob[]>;
  list(filter: JobFilter): Promise<RewardJob[]>;
  counts(): Promise<Record<JobState, number>>;
  /** When the earliest pending job is due; null when none is pending. */
  nextDue(): Promise<number | null>;
  cursor(name: string): Promise<number | null>;
  /** Queues jobs and moves a cursor in one transaction (exactly once per event). */
  advance(name: string, seq: number, requests: JobRequest[], now: number): Promise<EnqueueOutcome[]>;
  close(): Promise<void>;
}

/** What a job listing filters on, as (column, operator, value): each backend writes its own SQL. */
export function jobFilterConditions(filter: JobFilter): { column: string; op: '=' | '<'; value: unknown }[] {
  const all: { column: string; op: '=' | '<'; value: unknown }[] = [
    { column: 'state', op: '=', value: filter.state },
    { column: 'kind', op: '=', value: filter.kind },
    { column: 'channel', op: '=', value: filter.channel },
    { column: 'trajectory_id', op: '=', value: filter.trajectoryId },
    { column: 'group_id', op: '=', value: filter.groupId },
    { column: 'function', op: '=', value: filter.function },
    { column: 'id', op: '<', value: filter.beforeId },
  ];
  return all.filter((c) => c.value !== undefined);
}

/** A `reward_jobs` row as both backends store it. */
export interface JobRow {
  id: number;
  kind: JobKind;
  channel: string;
  trajectory_id: string | null;
  group_id: string | null;
  function: string;
  version: string;
  state: JobState;
  attempts: number;
  max_attempts: number;
  run_at: number;
  lease_until: number | null;
  worker: string | null;
  error: string | null;
  errors: string;
  result: string | null;
  reason: string;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

export function toJob(row: JobRow): RewardJob {
  return {
    id: row.id,
    kind: row.kind,
    channel: row.channel,
    trajectoryId: row.trajectory_id,
    groupId: row.group_id,
    function: row.function,
    version: row.version,
    state: row.state,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    runAt: row.run_at,
    leaseUntil: row.lease_until,
    worker: row.worker,
    error: row.error,
    errors: JSON.parse(row.errors) as AttemptError[],
    result: row.result === null ? null : (JSON.parse(row.result) as Record<string, unknown>),
    reason: row.reason,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
    finishedAt: row.finished_at,
  };
}

export interface RewardJobQueueOptions {
  /** The store's database file; null: a private in-memory database (jobs end with the process). */
  path: string | null;
  busyTimeoutMs?: number;
  /** NORMAL (default): a committed job survives a process crash; FULL: also a power loss. */
  synchronous?: 'FULL' | 'NORMAL';
}

/** Opens the queue on the store's file (creating its tables if the store has not yet). */
export async function openRewardJobQueue(options: RewardJobQueueOptions): Promise<SqliteRewardJobQueue> {
  const db = new Database(options.path ?? ':memory:');
  if (options.path !== null) db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${options.synchronous ?? 'NORMAL'}`);
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 10_000}`);
  const kysely = new Kysely<unknown>({ dialect: new SqliteDialect({ database: db }) });
  const { error, results } = await new Migrator({ db: kysely, provider: sqliteMigrations }).migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    await kysely.destroy();
    throw new Error(
      `migrating the reward job queue failed at ${failed?.migrationName ?? '?'}: ${String(error)}`,
    );
  }
  return new SqliteRewardJobQueue(db, kysely);
}

export class SqliteRewardJobQueue implements RewardJobQueue {
  private closed = false;

  /** Prepared statements, one per SQL text. */
  private readonly stmt: (source: string) => Statement;

  constructor(
    private readonly db: Database.Database,
    private readonly kysely: Kysely<unknown>,
  ) {
    this.stmt = statementCache(db);
  }

  private write<T>(fn: () => T): T {
    if (this.closed)
      throw new StepwiseError('the reward job queue is closed', 503, 'unavailable', undefined, true);
    return this.db.transaction(fn).immediate();
  }

  private row(id: number): JobRow | undefined {
    return this.stmt('SELECT * FROM reward_jobs WHERE id = ?').get(id) as JobRow | undefined;
  }

  /**
   * The jobs of one target and function in `states`, newest first. The target is matched with `=`
   * on the column that is set, so the (trajectory_id, function) or (group_id, function) index is used.
   */
  private jobsOf(
    kind: JobKind,
    fn: string,
    trajectoryId: string | null,
    groupId: string | null,
    states: string,
  ): JobRow[] {
    // A job has a trajectory or a group, never both. `+` keeps the other terms off the indexes: an
    // index on the unset column (all NULL there) would match every job of the other kind.
    const target = trajectoryId !== null ? 'trajectory_id = ?' : 'group_id = ? AND +trajectory_id IS NULL';
    return this.stmt(
      `SELECT * FROM reward_jobs WHERE ${target} AND function = ? AND +kind = ? AND +state IN (${states})
         ORDER BY id DESC`,
    ).all(trajectoryId ?? groupId, fn, kind) as JobRow[];
  }

  /** The pending job with the same kind, function and target, other than `except`. */
  private pendingTwin(
    kind: JobKind,
    fn: string,
    trajectoryId: string | null,
    groupId: string | null,
    except = -1,
  ): JobRow | undefined {
    return this.jobsOf(kind, fn, trajectoryId, groupId, `'pending'`).find((r) => r.id !== except);
  }

  private enqueueTx(requests: JobRequest[], now: number): EnqueueOutcome[] {
    const outcomes: EnqueueOutcome[] = [];
    for (const r of requests) outcomes.push(this.enqueueOne(r, outcomes, now));
    return outcomes;
  }

  private enqueueOne(r: JobRequest, earlier: EnqueueOutcome[], now: number): EnqueueOutcome {
    // Skipped: the job that was queued instead will queue this one when it finishes.
    const after = r.unlessCreated?.map((i) => earlier[i]).find((o) => o?.created);
    if (after) return { job: after.job, created: false };
    const twin = this.pendingTwin(r.kind, r.function, r.trajectoryId, r.groupId);
    if (twin) {
      if (twin.version !== r.version || twin.max_attempts !== r.maxAttempts) {
        this.stmt('UPDATE reward_jobs SET version = ?, max_attempts = ?, updated_at = ? WHERE id = ?').run(
          r.version,
          r.maxAttempts,
          now,
          twin.id,
        );
      }
      return { job: toJob(this.row(twin.id)!), created: false };
    }
    if (r.kind === 'function' && !r.force) {
      const ran = this.jobsOf(
        r.kind,
        r.function,
        r.trajectoryId,
        r.groupId,
        `'running', 'done', 'failed'`,
      ).find((row) => row.version === r.version && !row.reason.endsWith(UNFINISHED_SUFFIX));
      if (ran) return { job: toJob(ran), created: false };
    }
    const { lastInsertRowid } = this.stmt(
      `INSERT INTO reward_jobs (kind, channel, trajectory_id, group_id, function, version, state, attempts,
         max_attempts, run_at, reason, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)`,
    ).run(
      r.kind,
      r.channel,
      r.trajectoryId,
      r.groupId,
      r.function,
      r.version,
      r.maxAttempts,
      now,
      r.reason,
      now,
      now,
    );
    return { job: toJob(this.row(Number(lastInsertRowid))!), created: true };
  }

  async enqueue(requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    if (requests.length === 0) return [];
    return this.write(() => this.enqueueTx(requests, now));
  }

  async claim(
    worker: string,
    limit: number,
    now: number,
    leaseMs: (job: RewardJob) => number,
  ): Promise<RewardJob[]> {
    if (limit <= 0) return [];
    return this.write(() => {
      const claimed: RewardJob[] = [];
      // Jobs whose worker went away (its lease passed): that attempt is lost and counts.
      const lost = this.stmt(
        `SELECT * FROM reward_jobs WHERE state = 'running' AND lease_until < ? ORDER BY lease_until LIMIT ?`,
      ).all(now, limit) as JobRow[];
      for (const row of lost) {
        const errors = JSON.parse(row.errors) as AttemptError[];
        const message = `attempt ${row.attempts} was lost: its worker (${row.worker}) stopped before finishing`;
        errors.push({ attempt: row.attempts, at: now, message, retryable: true });
        if (row.attempts >= row.max_attempts) {
          this.stmt(
            `UPDATE reward_jobs SET state = 'failed', error = ?, errors = ?, lease_until = NULL, worker = NULL,
               updated_at = ?, finished_at = ? WHERE id = ?`,
          ).run(message, JSON.stringify(errors), now, now, row.id);
          continue;
        }
        if (this.pendingTwin(row.kind, row.function, row.trajectory_id, row.group_id, row.id)) {
          this.supersede(row.id, message, errors, now);
          continue;
        }
        this.stmt(
          `UPDATE reward_jobs SET attempts = attempts + 1, lease_until = ?, worker = ?, error = ?, errors = ?,
             updated_at = ? WHERE id = ?`,
        ).run(now + leaseMs(toJob(row)), worker, message, JSON.stringify(errors), now, row.id);
        claimed.push(toJob(this.row(row.id)!));
      }
      // Never two jobs for one target and function at once: a pending job whose twin runs waits. Each
      // running job blocks at most one pending one, so this window always holds enough others.
      const need = limit - claimed.length;
      const { running } = this.stmt(
        `SELECT count(*) AS running FROM reward_jobs WHERE state = 'running'`,
      ).get() as {
        running: number;
      };
      const candidates = this.stmt(
        `SELECT * FROM reward_jobs WHERE state = 'pending' AND run_at <= ? ORDER BY run_at, id LIMIT ?`,
      ).all(now, need + running) as JobRow[];
      const due = candidates
        .filter((r) => this.jobsOf(r.kind, r.function, r.trajectory_id, r.group_id, `'running'`).length === 0)
        .slice(0, need);
      const take = this.stmt(
        `UPDATE reward_jobs SET state = 'running', attempts = attempts + 1, lease_until = ?, worker = ?,
           updated_at = ? WHERE id = ?`,
      );
      for (const row of due) {
        take.run(now + leaseMs(toJob(row)), worker, now, row.id);
        claimed.push(toJob(this.row(row.id)!));
      }
      return claimed;
    });
  }

  private supersede(id: number, error: string | null, errors: AttemptError[], now: number): void {
    this.stmt(
      `UPDATE reward_jobs SET state = 'superseded', error = ?, errors = ?, lease_until = NULL, worker = NULL,
         updated_at = ?, finished_at = ? WHERE id = ?`,
    ).run(error, JSON.stringify(errors), now, now, id);
  }

  /** The job if it is running for this worker. */
  private owned(id: number, worker: string): JobRow | null {
    const row = this.row(id);
    return row && row.state === 'running' && row.worker === worker ? row : null;
  }

  async complete(
    id: number,
    worker: string,
    result: Record<string, unknown>,
    now: number,
    followUps: JobRequest[] = [],
  ): Promise<RewardJob | null> {
    return this.write(() => {
      if (!this.owned(id, worker)) return null;
      this.stmt(
        `UPDATE reward_jobs SET state = 'done', result = ?, lease_until = NULL, updated_at = ?, finished_at = ?
           WHERE id = ?`,
      ).run(JSON.stringify(result), now, now, id);
      this.enqueueTx(followUps, now);
      return toJob(this.row(id)!);
    });
  }

  async retry(
    id: number,
    worker: string,
    error: AttemptError,
    runAt: number,
    now: number,
  ): Promise<RewardJob | null> {
    return this.write(() => {
      const row = this.owned(id, worker);
      if (!row) return null;
      const errors = [...(JSON.parse(row.errors) as AttemptError[]), error];
      if (this.pendingTwin(row.kind, row.function, row.trajectory_id, row.group_id, id)) {
        this.supersede(id, error.message, errors, now);
      } else {
        this.stmt(
          `UPDATE reward_jobs SET state = 'pending', run_at = ?, error = ?, errors = ?, lease_until = NULL,
             worker = NULL, updated_at = ? WHERE id = ?`,
        ).run(runAt, error.message, JSON.stringify(errors), now, id);
      }
      return toJob(this.row(id)!);
    });
  }

  async fail(id: number, worker: string, error: AttemptError, now: number): Promise<RewardJob | null> {
    return this.write(() => {
      const row = this.owned(id, worker);
      if (!row) return null;
      const errors = [...(JSON.parse(row.errors) as AttemptError[]), error];
      this.stmt(
        `UPDATE reward_jobs SET state = 'failed', error = ?, errors = ?, lease_until = NULL, updated_at = ?,
           finished_at = ? WHERE id = ?`,
      ).run(error.message, JSON.stringify(errors), now, now, id);
      return toJob(this.row(id)!);
    });
  }

  async release(id: number, worker: string, now: number): Promise<void> {
    this.write(() => {
      const row = this.owned(id, worker);
      if (!row) return;
      if (this.pendingTwin(row.kind, row.function, row.trajectory_id, row.group_id, id)) {
        this.supersede(id, row.error, JSON.parse(row.errors) as AttemptError[], now);
        return;
      }
      this.stmt(
        `UPDATE reward_jobs SET state = 'pending', attempts = attempts - 1, run_at = ?, lease_until = NULL,
           worker = NULL, updated_at = ? WHERE id = ?`,
      ).run(now, now, id);
    });
  }

  async get(id: number): Promise<RewardJob | null> {
    const row = this.row(id);
    return row ? toJob(row) : null;
  }

  async getMany(ids: readonly number[]): Promise<RewardJob[]> {
    return ids.flatMap((id) => {
      const row = this.row(id);
      return row ? [toJob(row)] : [];
    });
  }

  async list(filter: JobFilter): Promise<RewardJob[]> {
    // With a target named, its index narrows best: `+` keeps SQLite from picking the state index.
    const byTarget = filter.trajectoryId !== undefined || filter.groupId !== undefined;
    const conditions = jobFilterConditions(filter);
    const where =
      conditions.length > 0
        ? `WHERE ${conditions.map((c) => `${c.column === 'state' && byTarget ? '+state' : c.column} ${c.op} ?`).join(' AND ')}`
        : '';
    const rows = this.db
      .prepare(`SELECT * FROM reward_jobs ${where} ORDER BY id DESC LIMIT ?`)
      .all(...conditions.map((c) => c.value), filter.limit) as JobRow[];
    return rows.map(toJob);
  }

  async counts(): Promise<Record<JobState, number>> {
    const counts = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    const rows = this.stmt('SELECT state, count(*) AS n FROM reward_jobs GROUP BY state').all() as {
      state: JobState;
      n: number;
    }[];
    for (const r of rows) counts[r.state] = r.n;
    return counts;
  }

  async nextDue(): Promise<number | null> {
    const row = this.stmt(`SELECT min(run_at) AS at FROM reward_jobs WHERE state = 'pending'`).get() as {
      at: number | null;
    };
    return row.at;
  }

  async cursor(name: string): Promise<number | null> {
    const row = this.stmt('SELECT seq FROM reward_cursors WHERE name = ?').get(name) as
      | { seq: number }
      | undefined;
    return row?.seq ?? null;
  }

  async advance(name: string, seq: number, requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    return this.write(() => {
      const outcomes = this.enqueueTx(requests, now);
      this.stmt(
        `INSERT INTO reward_cursors (name, seq, updated_at) VALUES (?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET seq = max(seq, excluded.seq), updated_at = excluded.updated_at`,
      ).run(name, seq, now);
      return outcomes;
    });
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.kysely.destroy();
  }
}
