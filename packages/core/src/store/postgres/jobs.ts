import { createHash } from 'node:crypto';
import type { Kysely } from 'kysely';
import type pg from 'pg';
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
import { type Rule, runAsync } from '../tx.js';
import { inTransaction, openPostgresDatabase } from './connect.js';

// The reward job queue's rows on PostgreSQL, for many processes sharing one database. Its locks and
// races: docs/rewards.md#reward-jobs ("On PostgreSQL").

export interface PostgresJobStoreOptions {
  /** `postgres://user@host:port/database` */
  url: string;
  /** The store's schema (created when missing); default `public`. */
  schema?: string;
  /** Connections this queue keeps open (default 4). */
  poolSize?: number;
}

/** Opens the queue's tables in the store's schema (creating them, and the store's, if missing). */
export async function openPostgresJobStore(options: PostgresJobStoreOptions): Promise<PostgresJobStore> {
  const { pool, kysely, schema } = await openPostgresDatabase<unknown>({
    url: options.url,
    schema: options.schema,
    poolSize: options.poolSize ?? 4,
    what: 'the reward job queue',
  });
  return new PostgresJobStore(pool, kysely, schema);
}

/** Where a job's (trajectory or group) target is matched. */
function targetClause(trajectoryId: string | null, first: number): string {
  return trajectoryId !== null
    ? `trajectory_id = $${first}`
    : `group_id = $${first} AND trajectory_id IS NULL`;
}

/** The target key of the unique pending index (migration 0002_reward_jobs), for a table alias. */
const targetKey = (alias: string) => `coalesce('t:' || ${alias}.trajectory_id, 'g:' || ${alias}.group_id)`;

class PostgresJobTx implements JobTx {
  constructor(
    private readonly client: pg.PoolClient,
    private readonly prepared: (text: string, values: unknown[]) => pg.QueryConfig,
    /** Part of the target lock keys: advisory locks are shared by every schema of the database. */
    private readonly schema: string,
  ) {}

  private *rows(text: string, values: unknown[] = []): Rule<JobRow[]> {
    const result = (yield this.client.query(this.prepared(text, values))) as pg.QueryResult;
    return result.rows as JobRow[];
  }

  *lockTargets(targets: readonly JobTarget[]): Rule<void> {
    if (targets.length === 0) return;
    const keys = targets.map((t) =>
      JSON.stringify([
        this.schema,
        t.kind,
        t.function,
        t.trajectoryId,
        t.trajectoryId !== null ? null : t.groupId,
      ]),
    );
    yield* this.rows(
      `SELECT pg_advisory_xact_lock(h) FROM (
         SELECT DISTINCT hashtextextended(k, 0) AS h FROM unnest($1::text[]) AS k ORDER BY h) AS targets`,
      [keys],
    );
  }

  *jobOf(
    target: JobTarget,
    states: readonly JobState[],
    options: JobOfOptions = {},
  ): Rule<JobRow | undefined> {
    const values: unknown[] = [
      target.trajectoryId ?? target.groupId,
      target.function,
      target.kind,
      options.except ?? -1,
    ];
    let extra = '';
    if (options.version) {
      values.push(options.version.version, options.version.unfinished);
      extra = ` AND version = $5 AND right(reason, char_length($6)) <> $6`;
    }
    const [row] = yield* this.rows(
      `SELECT * FROM reward_jobs WHERE ${targetClause(target.trajectoryId, 1)} AND function = $2 AND kind = $3
         AND state IN (${stateList(states)}) AND id <> $4${extra} ORDER BY id DESC LIMIT 1${options.lock ? ' FOR UPDATE' : ''}`,
      values,
    );
    return row;
  }

  *insertJob(job: NewJob, now: number): Rule<JobRow | undefined> {
    // Nothing inserted: another process queued the target's pending job since (the unique index).
    const [row] = yield* this.rows(
      `INSERT INTO reward_jobs (kind, channel, trajectory_id, group_id, function, version, state, attempts,
         max_attempts, run_at, reason, created_at, updated_at)
       VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $8, $9, $8, $8)
       ON CONFLICT DO NOTHING RETURNING *`,
      [
        job.kind,
        job.channel,
        job.trajectoryId,
        job.groupId,
        job.function,
        job.version,
        job.maxAttempts,
        now,
        job.reason,
      ],
    );
    return row;
  }

  *updateJob(id: number, patch: JobPatch): Rule<JobRow> {
    const keys = Object.keys(patch) as (keyof JobPatch)[];
    const [row] = yield* this.rows(
      `UPDATE reward_jobs SET ${keys.map((k, i) => `${k} = $${i + 1}`).join(', ')} WHERE id = $${keys.length + 1} RETURNING *`,
      [...keys.map((k) => patch[k]), id],
    );
    return row!;
  }

  lostJobs(now: number, limit: number): Rule<JobRow[]> {
    // A lost job another claimer holds is its to handle.
    return this.rows(
      `SELECT * FROM reward_jobs WHERE state = 'running' AND lease_until < $1 ORDER BY lease_until, id
         LIMIT $2 FOR UPDATE SKIP LOCKED`,
      [now, limit],
    );
  }

  dueJobs(now: number, limit: number): Rule<JobRow[]> {
    // Rows other claimers (or an enqueue that found them) hold are skipped, never waited for.
    return this.rows(
      `SELECT p.* FROM reward_jobs p WHERE p.state = 'pending' AND p.run_at <= $1
         AND NOT EXISTS (
           SELECT 1 FROM reward_jobs r WHERE r.state = 'running' AND r.function = p.function
             AND ${targetKey('r')} = ${targetKey('p')} AND r.kind = p.kind)
       ORDER BY p.run_at, p.id LIMIT $2 FOR UPDATE OF p SKIP LOCKED`,
      [now, limit],
    );
  }

  *ownedJob(id: number, worker: string): Rule<JobRow | undefined> {
    const [row] = yield* this.rows(
      `SELECT * FROM reward_jobs WHERE id = $1 AND state = 'running' AND worker = $2 FOR UPDATE`,
      [id, worker],
    );
    return row;
  }

  *moveCursor(name: string, seq: number, now: number): Rule<void> {
    yield* this.rows(
      `INSERT INTO reward_cursors (name, seq, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (name) DO UPDATE
         SET seq = greatest(reward_cursors.seq, excluded.seq), updated_at = excluded.updated_at`,
      [name, seq, now],
    );
  }
}

export class PostgresJobStore implements JobStore {
  private closed = false;
  /** Statement names by SQL text: pg prepares each once per connection. */
  private readonly statementNames = new Map<string, string>();

  constructor(
    private readonly pool: pg.Pool,
    private readonly kysely: Kysely<unknown>,
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

  /** Runs the rule in one transaction; one that lost a race runs again from the start (connect.ts). */
  write<T>(rule: (tx: JobTx) => Rule<T>): Promise<T> {
    return inTransaction(
      this.pool,
      (client) => runAsync(rule(new PostgresJobTx(client, this.prepared, this.schema))),
      {
        check: () => this.checkOpen(),
      },
    );
  }

  private async read<R>(text: string, values: unknown[] = []): Promise<R[]> {
    this.checkOpen();
    return (await this.pool.query(this.prepared(text, values))).rows as R[];
  }

  async row(id: number): Promise<JobRow | undefined> {
    const [row] = await this.read<JobRow>('SELECT * FROM reward_jobs WHERE id = $1', [id]);
    return row;
  }

  async rows(ids: readonly number[]): Promise<JobRow[]> {
    if (ids.length === 0) return [];
    const rows = await this.read<JobRow>('SELECT * FROM reward_jobs WHERE id = ANY($1::bigint[])', [
      [...ids],
    ]);
    const byId = new Map(rows.map((r) => [r.id, r]));
    return ids.flatMap((id) => {
      const row = byId.get(id);
      return row ? [row] : [];
    });
  }

  list(filter: JobFilter): Promise<JobRow[]> {
    const conditions = jobFilterConditions(filter);
    const where =
      conditions.length > 0
        ? `WHERE ${conditions.map((c, i) => `${c.column} ${c.op} $${i + 1}`).join(' AND ')}`
        : '';
    return this.read<JobRow>(
      `SELECT * FROM reward_jobs ${where} ORDER BY id DESC LIMIT $${conditions.length + 1}`,
      [...conditions.map((c) => c.value), filter.limit],
    );
  }

  counts(): Promise<{ state: JobState; n: number }[]> {
    return this.read<{ state: JobState; n: number }>(
      'SELECT state, count(*) AS n FROM reward_jobs GROUP BY state',
    );
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

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.kysely.destroy();
  }
}
