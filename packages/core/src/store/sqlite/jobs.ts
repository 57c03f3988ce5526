import Database from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { StepwiseError } from '../../domain/index.js';
import {
  type JobFilter,
  type JobOfOptions,
  type JobPatch,
  type JobRow,
  type JobState,
  type JobStore,
  type JobTarget,
  type JobTx,
  jobFilterConditions,
  type NewJob,
  stateList,
} from '../jobs.js';
import { done, type Rule, runSync } from '../tx.js';
import { sqliteMigrations } from './migrations.js';
import { type Statement, statementCache } from './statements.js';

// The reward job queue's rows in the store's SQLite file, through a connection of its own, so jobs
// survive a restart and processes sharing the file share them. Every write is one IMMEDIATE
// transaction: the file's write lock orders them, so no primitive here needs a lock of its own.

export interface SqliteJobStoreOptions {
  /** The store's database file; null: a private in-memory database (jobs end with the process). */
  path: string | null;
  busyTimeoutMs?: number;
  /** NORMAL (default): a committed job survives a process crash; FULL: also a power loss. */
  synchronous?: 'FULL' | 'NORMAL';
}

/** Opens the queue's tables on the store's file (creating them, and the store's, if missing). */
export async function openSqliteJobStore(options: SqliteJobStoreOptions): Promise<SqliteJobStore> {
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
  return new SqliteJobStore(db, kysely);
}

class SqliteJobTx implements JobTx {
  constructor(private readonly stmt: (source: string) => Statement) {}

  lockTargets(): Rule<void> {
    return done(undefined);
  }

  jobOf(
    target: JobTarget,
    states: readonly JobState[],
    options: JobOfOptions = {},
  ): Rule<JobRow | undefined> {
    // A job has a trajectory or a group, never both. `+` keeps the other terms off the indexes: an
    // index on the unset column (all NULL there) would match every job of the other kind.
    const where =
      target.trajectoryId !== null ? 'trajectory_id = ?' : 'group_id = ? AND +trajectory_id IS NULL';
    const values: unknown[] = [
      target.trajectoryId ?? target.groupId,
      target.function,
      target.kind,
      options.except ?? -1,
    ];
    let extra = '';
    if (options.version) {
      extra = ' AND +version = ? AND substr(reason, -length(?)) <> ?';
      values.push(options.version.version, options.version.unfinished, options.version.unfinished);
    }
    return done(
      this.stmt(
        `SELECT * FROM reward_jobs WHERE ${where} AND function = ? AND +kind = ? AND +state IN (${stateList(states)})
           AND +id <> ?${extra} ORDER BY id DESC LIMIT 1`,
      ).get(...values) as JobRow | undefined,
    );
  }

  insertJob(job: NewJob, now: number): Rule<JobRow | undefined> {
    const { lastInsertRowid } = this.stmt(
      `INSERT INTO reward_jobs (kind, channel, trajectory_id, group_id, function, version, state, attempts,
         max_attempts, run_at, reason, created_at, updated_at)
       VALUES (?, ?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?, ?, ?)`,
    ).run(
      job.kind,
      job.channel,
      job.trajectoryId,
      job.groupId,
      job.function,
      job.version,
      job.maxAttempts,
      now,
      job.reason,
      now,
      now,
    );
    return done(this.row(Number(lastInsertRowid)));
  }

  updateJob(id: number, patch: JobPatch): Rule<JobRow> {
    const keys = Object.keys(patch) as (keyof JobPatch)[];
    this.stmt(`UPDATE reward_jobs SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ?`).run(
      ...keys.map((k) => patch[k]),
      id,
    );
    return done(this.row(id)!);
  }

  lostJobs(now: number, limit: number): Rule<JobRow[]> {
    return done(
      this.stmt(
        `SELECT * FROM reward_jobs WHERE state = 'running' AND lease_until < ? ORDER BY lease_until LIMIT ?`,
      ).all(now, limit) as JobRow[],
    );
  }

  dueJobs(now: number, limit: number): Rule<JobRow[]> {
    // Each running job blocks at most one pending one, so this window always holds enough others.
    const { running } = this.stmt(
      `SELECT count(*) AS running FROM reward_jobs WHERE state = 'running'`,
    ).get() as {
      running: number;
    };
    const candidates = this.stmt(
      `SELECT * FROM reward_jobs WHERE state = 'pending' AND run_at <= ? ORDER BY run_at, id LIMIT ?`,
    ).all(now, limit + running) as JobRow[];
    const free = (r: JobRow) =>
      runSync(
        this.jobOf(
          { kind: r.kind, function: r.function, trajectoryId: r.trajectory_id, groupId: r.group_id },
          ['running'],
        ),
      ) === undefined;
    return done(candidates.filter(free).slice(0, limit));
  }

  ownedJob(id: number, worker: string): Rule<JobRow | undefined> {
    const row = this.row(id);
    return done(row && row.state === 'running' && row.worker === worker ? row : undefined);
  }

  moveCursor(name: string, seq: number, now: number): Rule<void> {
    this.stmt(
      `INSERT INTO reward_cursors (name, seq, updated_at) VALUES (?, ?, ?)
         ON CONFLICT (name) DO UPDATE SET seq = max(seq, excluded.seq), updated_at = excluded.updated_at`,
    ).run(name, seq, now);
    return done(undefined);
  }

  row(id: number): JobRow | undefined {
    return this.stmt('SELECT * FROM reward_jobs WHERE id = ?').get(id) as JobRow | undefined;
  }
}

export class SqliteJobStore implements JobStore {
  private closed = false;
  private readonly stmt: (source: string) => Statement;
  private readonly tx: SqliteJobTx;

  constructor(
    private readonly db: Database.Database,
    private readonly kysely: Kysely<unknown>,
  ) {
    this.stmt = statementCache(db);
    this.tx = new SqliteJobTx(this.stmt);
  }

  async write<T>(rule: (tx: JobTx) => Rule<T>): Promise<T> {
    if (this.closed)
      throw new StepwiseError('the reward job queue is closed', 503, 'unavailable', undefined, true);
    return this.db.transaction(() => runSync(rule(this.tx))).immediate();
  }

  async row(id: number): Promise<JobRow | undefined> {
    return this.tx.row(id);
  }

  async rows(ids: readonly number[]): Promise<JobRow[]> {
    return ids.flatMap((id) => {
      const row = this.tx.row(id);
      return row ? [row] : [];
    });
  }

  async list(filter: JobFilter): Promise<JobRow[]> {
    // With a target named, its index narrows best: `+` keeps SQLite from picking the state index.
    const byTarget = filter.trajectoryId !== undefined || filter.groupId !== undefined;
    const conditions = jobFilterConditions(filter);
    const where =
      conditions.length > 0
        ? `WHERE ${conditions.map((c) => `${c.column === 'state' && byTarget ? '+state' : c.column} ${c.op} ?`).join(' AND ')}`
        : '';
    return this.db
      .prepare(`SELECT * FROM reward_jobs ${where} ORDER BY id DESC LIMIT ?`)
      .all(...conditions.map((c) => c.value), filter.limit) as JobRow[];
  }

  async counts(): Promise<{ state: JobState; n: number }[]> {
    return this.stmt('SELECT state, count(*) AS n FROM reward_jobs GROUP BY state').all() as {
      state: JobState;
      n: number;
    }[];
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

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.kysely.destroy();
  }
}
