import { redactUrl, StepwiseError, ValidationError } from '@stepwise/core';
import pg from 'pg';
import type { SampleResult } from '../runner.js';
import { GymTask } from '../tasks/schema.js';
import { type RolloutJobData, SampleResultWire, taskSha256 } from './jobs.js';

/*
 * The rollout queue: three tables of ours in one PostgreSQL schema, on a pg pool. Dropping the schema
 * removes all of it.
 * - stepwise_rollout_job: one row per (task, sample) job, with its lease and retries. A worker claims
 *   a job with one UPDATE over SELECT ... FOR UPDATE SKIP LOCKED (two claims never get the same job),
 *   and completes or fails only the claim it holds. A job active past its lease (its worker died) is
 *   failed over to a retry by whichever process next asks for work or for ended jobs: no timer.
 * - stepwise_gym_task: task definitions by sha256, stored once per content.
 * - stepwise_rollout_attempt: every attempt at a job, and the job's one result.
 * Why the result lives in the attempt table, not in the job: docs/distributed.md#how-it-works
 */

export const DEFAULT_QUEUE_SCHEMA = 'stepwise_queue';

/** Throws a ValidationError naming `flag` unless `url` is a postgres:// (or postgresql://) URL. */
export function checkPgUrl(url: string, flag = '--pg'): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new ValidationError(
      `${flag}: '${url}' is not a URL; expected postgres://user[:password]@host[:port]/database`,
      flag,
    );
  }
  if (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')
    throw new ValidationError(
      `${flag}: expected a postgres:// URL (postgres://user[:password]@host[:port]/database), not ${parsed.protocol}//...`,
      flag,
    );
  if (parsed.hostname === '' && !parsed.searchParams.has('host'))
    throw new ValidationError(`${flag}: the URL names no host`, flag);
  return url;
}

/** Schema names go into SQL text: lower-case identifiers only. */
export function checkQueueSchema(schema: string, flag = '--queue-schema'): string {
  if (!/^[a-z_][a-z0-9_]{0,49}$/.test(schema))
    throw new ValidationError(
      `${flag}: '${schema}' must be a lower-case identifier (a-z, 0-9, _; at most 50 characters)`,
      flag,
    );
  return schema;
}

export interface RolloutQueueOptions {
  /** postgres://user[:password]@host[:port]/database */
  url: string;
  /** Schema of the queue's tables (default `stepwise_queue`); created on first use. */
  schema?: string;
  /** Connections of this process's pool (default 10). */
  maxConnections?: number;
  /** Errors of idle pooled connections (the server went away); default: a line on stderr. */
  onError?: (error: Error) => void;
}

/** How a sample's job is leased and retried. */
export interface JobSettings {
  /** A started job not completed within this is failed over to a retry. */
  leaseSeconds: number;
  /** Attempts after the first. */
  retryLimit: number;
  /** Wait before a retry may start. */
  retryDelaySeconds: number;
}

export interface QueuedRollout {
  /** The job's id (`rolloutJobId`): the idempotency key of enqueue. */
  id: string;
  /** Readable key, `<group>#<sample>` (`rolloutJobKey`); indexed, for looking a sample's job up. */
  key: string;
  data: RolloutJobData;
}

export type JobEndState = 'completed' | 'failed' | 'cancelled';
/** `retry`: failed over, due again at its start time. `cancelled` is only ever set by hand. */
export type JobState = 'created' | 'retry' | 'active' | JobEndState;

export interface EndedJob {
  id: string;
  state: JobEndState;
  /** The job's output: a SampleResult when completed, `{ message }` of the last failure when failed. */
  output: unknown;
  retryCount: number;
}

export interface FetchedRollout {
  id: string;
  /** Unparsed: the worker checks it. */
  data: unknown;
  /**
   * 0 on the first attempt, one more on each later claim: the claim's own number, which `complete`
   * and `fail` take to change the job only while this claim holds it.
   */
  retryCount: number;
  retryLimit: number;
  leaseSeconds: number;
}

export interface RolloutAttempt {
  trajectoryUid: string;
  baseUrl: string;
  retryCount: number;
  worker: string;
  result: SampleResult | null;
  abandoned: boolean;
}

/** What a worker knows of its own attempt when it records it. */
export type AttemptRecord = Pick<RolloutAttempt, 'trajectoryUid' | 'baseUrl' | 'retryCount' | 'worker'>;

/** Thrown by `recordResult` when another attempt recorded the job's result first, or took the job over. */
export class AttemptSuperseded extends StepwiseError {
  override readonly name = 'AttemptSuperseded';
  constructor(message: string) {
    super(message, 409, 'attempt_superseded');
  }
}

const UNIQUE_VIOLATION = '23505';
const TABLES = ['stepwise_rollout_job', 'stepwise_gym_task', 'stepwise_rollout_attempt'];

function connectMessage(url: string, error: unknown): string {
  const e = error as { message?: string; code?: string };
  return `cannot open the rollout queue at ${redactUrl(url)}: ${e.message || e.code || String(error)}`;
}

/** The queue's tables and indexes; every statement IF NOT EXISTS, run under install()'s lock. */
function installSql(s: string): string {
  return `
    CREATE SCHEMA IF NOT EXISTS ${s};
    CREATE TABLE IF NOT EXISTS ${s}.stepwise_rollout_job (
      id uuid PRIMARY KEY,
      key text NOT NULL,
      data jsonb NOT NULL,
      state text NOT NULL DEFAULT 'created'
        CHECK (state IN ('created', 'retry', 'active', 'completed', 'failed', 'cancelled')),
      -- Claims after the first: 0 on the first attempt.
      retry_count int NOT NULL DEFAULT 0,
      retry_limit int NOT NULL,
      retry_delay_seconds int NOT NULL,
      lease_seconds int NOT NULL,
      -- When it may be claimed (a retry waits its delay).
      start_after timestamptz NOT NULL DEFAULT now(),
      -- While active: past this, its worker is taken for dead and the job failed over.
      lease_until timestamptz,
      -- The SampleResult it completed with, or the last failure's { message }.
      output jsonb,
      created_on timestamptz NOT NULL DEFAULT now(),
      started_on timestamptz,
      completed_on timestamptz
    );
    CREATE INDEX IF NOT EXISTS stepwise_rollout_job_due
      ON ${s}.stepwise_rollout_job (created_on, id) WHERE state IN ('created', 'retry');
    CREATE INDEX IF NOT EXISTS stepwise_rollout_job_lease
      ON ${s}.stepwise_rollout_job (lease_until) WHERE state = 'active';
    CREATE INDEX IF NOT EXISTS stepwise_rollout_job_key ON ${s}.stepwise_rollout_job (key);
    CREATE INDEX IF NOT EXISTS stepwise_rollout_job_run ON ${s}.stepwise_rollout_job ((data->>'runId'));
    CREATE TABLE IF NOT EXISTS ${s}.stepwise_gym_task (
      sha256 text PRIMARY KEY,
      task jsonb NOT NULL,
      created_on timestamptz NOT NULL DEFAULT now()
    );
    CREATE TABLE IF NOT EXISTS ${s}.stepwise_rollout_attempt (
      job_id uuid NOT NULL,
      trajectory_uid text NOT NULL,
      base_url text NOT NULL,
      retry_count int NOT NULL,
      worker text NOT NULL,
      started_on timestamptz NOT NULL DEFAULT now(),
      result jsonb,
      finished_on timestamptz,
      -- Set when a later attempt took the job over: this one may not record a result any more.
      abandoned_on timestamptz,
      PRIMARY KEY (job_id, trajectory_uid)
    );
    CREATE UNIQUE INDEX IF NOT EXISTS stepwise_rollout_attempt_one_result
      ON ${s}.stepwise_rollout_attempt (job_id) WHERE result IS NOT NULL;
  `;
}

/**
 * Creates the schema and tables unless they are all there. Processes that open a fresh schema at
 * once would race in CREATE ... IF NOT EXISTS (a duplicate key in the catalog): one at a time, under
 * a transaction-level advisory lock. An installed queue needs no CREATE privilege to open.
 */
async function install(pool: pg.Pool, schema: string): Promise<void> {
  const installed = async (db: pg.Pool | pg.PoolClient) => {
    const { rows } = await db.query<{ n: number }>(
      'SELECT count(to_regclass(t))::int AS n FROM unnest($1::text[]) AS t',
      [TABLES.map((t) => `${schema}.${t}`)],
    );
    return rows[0]?.n === TABLES.length;
  };
  if (await installed(pool)) return;
  const client = await pool.connect();
  let broken = false;
  try {
    await client.query('BEGIN');
    await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [`stepwise-rollouts:${schema}`]);
    if (!(await installed(client))) await client.query(installSql(schema));
    await client.query('COMMIT');
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {
      broken = true;
    });
    throw error;
  } finally {
    client.release(broken);
  }
}

export class RolloutQueue {
  private closed = false;

  private constructor(
    private readonly pool: pg.Pool,
    readonly schema: string,
  ) {}

  /** Connects and installs the queue's tables in the schema (creating it) unless they are there. */
  static async open(options: RolloutQueueOptions): Promise<RolloutQueue> {
    checkPgUrl(options.url);
    const schema = checkQueueSchema(options.schema ?? DEFAULT_QUEUE_SCHEMA);
    const pool = new pg.Pool({
      connectionString: options.url,
      application_name: 'stepwise-rollouts',
      max: options.maxConnections ?? 10,
    });
    const onError =
      options.onError ??
      ((error: Error) => process.stderr.write(`stepwise: rollout queue: ${error.message}\n`));
    // A pooled connection that errors while idle (the server went away) must not crash the process;
    // nor one that errors while checked out: its query fails, and the pool discards it.
    pool.on('error', onError);
    pool.on('connect', (client) => client.on('error', () => {}));
    try {
      await install(pool, schema);
    } catch (error) {
      await pool.end().catch(() => {});
      throw new Error(connectMessage(options.url, error));
    }
    return new RolloutQueue(pool, schema);
  }

  private async sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]> {
    const result = await this.pool.query(text, values);
    return result.rows as T[];
  }

  /** Stores the definitions (once per content); returns each task's sha256 by task id. */
  async saveTasks(tasks: readonly GymTask[]): Promise<Map<string, string>> {
    const shas = new Map<string, string>();
    const rows: { sha256: string; task: GymTask }[] = [];
    for (const task of tasks) {
      const sha = taskSha256(task);
      shas.set(task.id, sha);
      rows.push({ sha256: sha, task });
    }
    for (let i = 0; i < rows.length; i += 100)
      await this.sql(
        `INSERT INTO ${this.schema}.stepwise_gym_task (sha256, task)
         SELECT x.sha256, x.task FROM json_to_recordset($1::json) AS x(sha256 text, task jsonb)
         ON CONFLICT (sha256) DO NOTHING`,
        [JSON.stringify(rows.slice(i, i + 100))],
      );
    return shas;
  }

  async loadTask(sha256: string): Promise<GymTask | null> {
    const [row] = await this.sql<{ task: unknown }>(
      `SELECT task FROM ${this.schema}.stepwise_gym_task WHERE sha256 = $1`,
      [sha256],
    );
    return row ? GymTask.parse(row.task) : null;
  }

  /** Ids among `ids` that are jobs of the queue now (in any state). */
  async existing(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = await this.sql<{ id: string }>(
      `SELECT id FROM ${this.schema}.stepwise_rollout_job WHERE id = ANY($1::uuid[])`,
      [ids],
    );
    return new Set(rows.map((r) => r.id));
  }

  /**
   * Inserts the jobs that do not exist yet. Ids are the idempotency key: a job already there (in
   * any state) is left as it is, also when two coordinators enqueue at once (ON CONFLICT DO NOTHING).
   * The counts are this call's own: a row another coordinator's insert won is not returned here.
   */
  async enqueue(
    jobs: readonly QueuedRollout[],
    settings: JobSettings,
  ): Promise<{ created: number; existing: number }> {
    // In id order: coordinators inserting overlapping batches at once take the rows' locks in the
    // same order, so neither waits on the other in a cycle.
    const rows = [...jobs]
      .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
      .map((j) => ({ id: j.id, key: j.key, data: j.data }));
    let created = 0;
    for (let i = 0; i < rows.length; i += 200) {
      const inserted = await this.sql(
        `INSERT INTO ${this.schema}.stepwise_rollout_job
           (id, key, data, retry_limit, retry_delay_seconds, lease_seconds)
         SELECT x.id, x.key, x.data, $2::int, $3::int, $4::int FROM json_to_recordset($1::json) AS x(id uuid, key text, data jsonb)
         ON CONFLICT (id) DO NOTHING
         RETURNING id`,
        [
          JSON.stringify(rows.slice(i, i + 200)),
          settings.retryLimit,
          settings.retryDelaySeconds,
          settings.leaseSeconds,
        ],
      );
      created += inserted.length;
    }
    return { created, existing: jobs.length - created };
  }

  /** The jobs among `ids` that have ended (completed, failed for good, cancelled). */
  async ended(ids: readonly string[]): Promise<EndedJob[]> {
    if (ids.length === 0) return [];
    // The coordinator asks: a dead worker's last attempt ends (failed) without waiting for a worker.
    await this.expireLeases();
    const rows = await this.sql<{ id: string; state: JobEndState; output: unknown; retry_count: number }>(
      `SELECT id, state, output, retry_count FROM ${this.schema}.stepwise_rollout_job
       WHERE id = ANY($1::uuid[]) AND state IN ('completed', 'failed', 'cancelled')`,
      [ids],
    );
    return rows.map((r) => ({ id: r.id, state: r.state, output: r.output, retryCount: r.retry_count }));
  }

  /** The jobs that carry this run id, with their states. */
  async jobsOfRun(runId: string): Promise<{ id: string; state: JobState; retryCount: number }[]> {
    const rows = await this.sql<{ id: string; state: JobState; retry_count: number }>(
      `SELECT id, state, retry_count FROM ${this.schema}.stepwise_rollout_job WHERE data->>'runId' = $1`,
      [runId],
    );
    return rows.map((r) => ({ id: r.id, state: r.state, retryCount: r.retry_count }));
  }

  /**
   * Fails the active jobs whose lease ran out over to a retry (after their retry delay), or for good
   * at their retry limit: their workers died, or outlived the lease. Rows another process is
   * updating right now are skipped (it is settling them).
   */
  private async expireLeases(): Promise<void> {
    await this.sql(
      `UPDATE ${this.schema}.stepwise_rollout_job j SET
         state = CASE WHEN j.retry_count < j.retry_limit THEN 'retry' ELSE 'failed' END,
         start_after = now() + j.retry_delay_seconds * interval '1 second',
         completed_on = CASE WHEN j.retry_count < j.retry_limit THEN NULL ELSE now() END,
         lease_until = NULL,
         output = jsonb_build_object('message',
           format('attempt %s outlived its lease of %s s (its worker died or was too slow)',
             j.retry_count + 1, j.lease_seconds))
       WHERE j.id IN (
         SELECT id FROM ${this.schema}.stepwise_rollout_job
         WHERE state = 'active' AND lease_until < now()
         FOR UPDATE SKIP LOCKED)`,
    );
  }

  /**
   * Leases the next job (created, or a retry that is due), or null when there is none. Expired
   * leases are failed over first, so a dead worker's job comes back without any timer.
   */
  async fetch(): Promise<FetchedRollout | null> {
    await this.expireLeases();
    // One statement: the row is locked as it is picked, and one locked by another claim is skipped.
    const [job] = await this.sql<{
      id: string;
      data: unknown;
      retry_count: number;
      retry_limit: number;
      lease_seconds: number;
    }>(
      `UPDATE ${this.schema}.stepwise_rollout_job j SET
         state = 'active',
         retry_count = j.retry_count + CASE WHEN j.started_on IS NULL THEN 0 ELSE 1 END,
         started_on = now(),
         lease_until = now() + j.lease_seconds * interval '1 second'
       WHERE j.id = (
         SELECT id FROM ${this.schema}.stepwise_rollout_job
         WHERE state IN ('created', 'retry') AND start_after <= now()
         ORDER BY created_on, id
         LIMIT 1
         FOR UPDATE SKIP LOCKED)
       RETURNING j.id, j.data, j.retry_count, j.retry_limit, j.lease_seconds`,
    );
    if (!job) return null;
    return {
      id: job.id,
      data: job.data,
      retryCount: job.retry_count,
      retryLimit: job.retry_limit,
      leaseSeconds: job.lease_seconds,
    };
  }

  /**
   * Completes an active job with the sample's result; false when it was not active any more, or
   * (given the claim's `retryCount`) when another claim holds it now: a stale completion changes
   * nothing.
   */
  async complete(id: string, result: SampleResult, retryCount?: number): Promise<boolean> {
    const rows = await this.sql(
      `UPDATE ${this.schema}.stepwise_rollout_job SET
         state = 'completed', completed_on = now(), lease_until = NULL, output = $2::jsonb
       WHERE id = $1 AND state = 'active' AND ($3::int IS NULL OR retry_count = $3)
       RETURNING id`,
      [id, JSON.stringify(result), retryCount ?? null],
    );
    return rows.length > 0;
  }

  /**
   * Fails an active job's attempt: it is retried after its retry delay while it has retries left,
   * else it has failed for good. False (and nothing changed) as for `complete`.
   */
  async fail(id: string, reason: string, retryCount?: number): Promise<boolean> {
    const rows = await this.sql(
      `UPDATE ${this.schema}.stepwise_rollout_job SET
         state = CASE WHEN retry_count < retry_limit THEN 'retry' ELSE 'failed' END,
         start_after = now() + retry_delay_seconds * interval '1 second',
         completed_on = CASE WHEN retry_count < retry_limit THEN NULL ELSE now() END,
         lease_until = NULL,
         output = jsonb_build_object('message', $2::text)
       WHERE id = $1 AND state = 'active' AND ($3::int IS NULL OR retry_count = $3)
       RETURNING id`,
      [id, reason, retryCount ?? null],
    );
    return rows.length > 0;
  }

  async attempts(jobId: string): Promise<RolloutAttempt[]> {
    const rows = await this.sql<{
      trajectory_uid: string;
      base_url: string;
      retry_count: number;
      worker: string;
      result: unknown;
      abandoned: boolean;
    }>(
      `SELECT trajectory_uid, base_url, retry_count, worker, result, abandoned_on IS NOT NULL AS abandoned
       FROM ${this.schema}.stepwise_rollout_attempt WHERE job_id = $1 ORDER BY started_on`,
      [jobId],
    );
    return rows.map((r) => ({
      trajectoryUid: r.trajectory_uid,
      baseUrl: r.base_url,
      retryCount: r.retry_count,
      worker: r.worker,
      result: r.result == null ? null : SampleResultWire.parse(r.result),
      abandoned: r.abandoned,
    }));
  }

  /**
   * Takes the job over from its earlier attempts: those without a result are marked abandoned (they
   * can record none after this), and all attempts are returned as they stand after it.
   */
  async takeOver(jobId: string): Promise<RolloutAttempt[]> {
    await this.sql(
      `UPDATE ${this.schema}.stepwise_rollout_attempt SET abandoned_on = now()
       WHERE job_id = $1 AND result IS NULL AND abandoned_on IS NULL`,
      [jobId],
    );
    return this.attempts(jobId);
  }

  async recordAttempt(jobId: string, attempt: AttemptRecord): Promise<void> {
    await this.sql(
      `INSERT INTO ${this.schema}.stepwise_rollout_attempt (job_id, trajectory_uid, base_url, retry_count, worker)
       VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
      [jobId, attempt.trajectoryUid, attempt.baseUrl, attempt.retryCount, attempt.worker],
    );
  }

  /**
   * Makes `result` the job's one result. Throws AttemptSuperseded when another attempt's result is
   * recorded, or a later attempt took the job over from this one.
   */
  async recordResult(jobId: string, attempt: AttemptRecord, result: SampleResult): Promise<void> {
    let rows: unknown[];
    try {
      rows = await this.sql(
        `INSERT INTO ${this.schema}.stepwise_rollout_attempt AS a
           (job_id, trajectory_uid, base_url, retry_count, worker, result, finished_on)
         VALUES ($1, $2, $3, $4, $5, $6::jsonb, now())
         ON CONFLICT (job_id, trajectory_uid) DO UPDATE SET result = EXCLUDED.result, finished_on = now()
           WHERE a.abandoned_on IS NULL
         RETURNING a.job_id`,
        [
          jobId,
          attempt.trajectoryUid,
          attempt.baseUrl,
          attempt.retryCount,
          attempt.worker,
          JSON.stringify(result),
        ],
      );
    } catch (error) {
      if ((error as { code?: string }).code === UNIQUE_VIOLATION)
        throw new AttemptSuperseded(`another attempt recorded the result of job ${jobId} first`);
      throw error;
    }
    if (rows.length === 0)
      throw new AttemptSuperseded(`a later attempt took job ${jobId} over (this one outlived its lease)`);
  }

  /** Whether a later attempt took the job over from this one. */
  async isAbandoned(jobId: string, trajectoryUid: string): Promise<boolean> {
    const [row] = await this.sql<{ abandoned: boolean }>(
      `SELECT abandoned_on IS NOT NULL AS abandoned FROM ${this.schema}.stepwise_rollout_attempt
       WHERE job_id = $1 AND trajectory_uid = $2`,
      [jobId, trajectoryUid],
    );
    return row?.abandoned ?? false;
  }

  /** The recorded results of these jobs, by job id. */
  async results(ids: readonly string[]): Promise<Map<string, SampleResult>> {
    if (ids.length === 0) return new Map();
    const rows = await this.sql<{ job_id: string; result: unknown }>(
      `SELECT job_id, result FROM ${this.schema}.stepwise_rollout_attempt
       WHERE job_id = ANY($1::uuid[]) AND result IS NOT NULL`,
      [ids],
    );
    return new Map(rows.map((r) => [r.job_id, SampleResultWire.parse(r.result)]));
  }

  /** Ends the pool; a second call does nothing. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }
}
