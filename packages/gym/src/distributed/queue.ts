import { StepwiseError, ValidationError } from '@stepwise/core';
import pg from 'pg';
import PgBoss from 'pg-boss';
import type { SampleResult } from '../runner.js';
import { GymTask } from '../tasks/schema.js';
import { ROLLOUT_QUEUE, type RolloutJobData, SampleResultWire, taskSha256 } from './jobs.js';

// The rollout queue: pg-boss in one PostgreSQL schema, beside two tables of ours (task definitions by
// sha256; attempts, with one result per job). Dropping the schema removes all of it.
// Why one result per job: docs/distributed.md#how-it-works

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

/** Schema names go into SQL text (pg-boss's too): lower-case identifiers only. */
export function checkQueueSchema(schema: string, flag = '--queue-schema'): string {
  if (!/^[a-z_][a-z0-9_]{0,49}$/.test(schema))
    throw new ValidationError(
      `${flag}: '${schema}' must be a lower-case identifier (a-z, 0-9, _; at most 50 characters)`,
      flag,
    );
  return schema;
}

/** The URL without its password, for messages. */
export function redactPgUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

export interface RolloutQueueOptions {
  /** postgres://user[:password]@host[:port]/database */
  url: string;
  /** Schema of pg-boss's and our tables (default `stepwise_queue`); created on first use. */
  schema?: string;
  /**
   * How often queue maintenance may run from this process, in seconds (default 30): it is what fails
   * the expired jobs of dead workers over to a retry. One process per interval runs it.
   */
  maintenanceSeconds?: number;
  /** Connections of this process's pool (default 10). */
  maxConnections?: number;
  /** Errors of pg-boss's background work (maintenance, a lost connection). */
  onError?: (error: Error) => void;
}

/** How a sample's job is leased and retried. */
export interface JobSettings {
  /** A started job not completed within this is failed over to a retry (pg-boss `expireInSeconds`). */
  leaseSeconds: number;
  /** Attempts after the first (pg-boss `retryLimit`). */
  retryLimit: number;
  /** Wait before a retry may start (pg-boss `retryDelay`). */
  retryDelaySeconds: number;
}

export interface QueuedRollout {
  id: string;
  /** Readable key, pg-boss `singletonKey`. */
  key: string;
  data: RolloutJobData;
}

export type JobEndState = 'completed' | 'failed' | 'cancelled';

export interface EndedJob {
  id: string;
  state: JobEndState;
  /** The job's output: a SampleResult when completed, pg-boss's error object when failed. */
  output: unknown;
  retryCount: number;
}

export interface FetchedRollout {
  id: string;
  /** Unparsed: the worker checks it. */
  data: unknown;
  /** 0 on the first attempt. */
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

function connectMessage(url: string, error: unknown): string {
  const e = error as { message?: string; code?: string };
  return `cannot open the rollout queue at ${redactPgUrl(url)}: ${e.message || e.code || String(error)}`;
}

export class RolloutQueue {
  private constructor(
    readonly boss: PgBoss,
    readonly schema: string,
  ) {}

  /** Connects, installs (or migrates) pg-boss and our tables in the schema, and creates the queue. */
  static async open(options: RolloutQueueOptions): Promise<RolloutQueue> {
    checkPgUrl(options.url);
    const schema = checkQueueSchema(options.schema ?? DEFAULT_QUEUE_SCHEMA);
    // Processes that open a fresh schema at once deadlock in pg-boss's creation of the schema and the
    // queue's partition: one at a time, under a session advisory lock on a connection of its own.
    const lock = new pg.Client({ connectionString: options.url, application_name: 'stepwise-rollouts' });
    lock.on('error', () => {});
    try {
      await lock.connect();
      await lock.query('SELECT pg_advisory_lock(hashtext($1))', [`stepwise-rollouts:${schema}`]);
    } catch (error) {
      await lock.end().catch(() => {});
      throw new Error(connectMessage(options.url, error));
    }
    try {
      return await RolloutQueue.openLocked(options, schema);
    } finally {
      // Ending the session releases its advisory lock.
      await lock.end().catch(() => {});
    }
  }

  private static async openLocked(options: RolloutQueueOptions, schema: string): Promise<RolloutQueue> {
    const boss = new PgBoss({
      connectionString: options.url,
      schema,
      application_name: 'stepwise-rollouts',
      max: options.maxConnections ?? 10,
      maintenanceIntervalSeconds: options.maintenanceSeconds ?? 30,
      // No cron: nothing here is scheduled.
      schedule: false,
    });
    const onError =
      options.onError ??
      ((error: Error) => process.stderr.write(`stepwise: rollout queue: ${error.message}\n`));
    boss.on('error', onError);
    try {
      await boss.start();
    } catch (error) {
      // A failed start leaves pg-boss "stopped" with its pool open: close the pool itself.
      await (boss.getDb() as { close?: () => Promise<void> }).close?.().catch(() => {});
      throw new Error(connectMessage(options.url, error));
    }
    const queue = new RolloutQueue(boss, schema);
    try {
      await queue.install();
    } catch (error) {
      await queue.close();
      throw new Error(connectMessage(options.url, error));
    }
    return queue;
  }

  private async install(): Promise<void> {
    const s = this.schema;
    // Under open()'s lock; IF NOT EXISTS for every later open.
    await this.sql(`
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
    `);
    await this.boss.createQueue(ROLLOUT_QUEUE);
  }

  private async sql<T = Record<string, unknown>>(text: string, values?: unknown[]): Promise<T[]> {
    const result = await this.boss.getDb().executeSql(text, values ?? []);
    // A multi-statement text answers one result per statement.
    const last = Array.isArray(result) ? result[result.length - 1] : result;
    return (last?.rows ?? []) as T[];
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

  /** Ids among `ids` that are jobs of the queue now (in any state, the archive included). */
  async existing(ids: readonly string[]): Promise<Set<string>> {
    if (ids.length === 0) return new Set();
    const rows = await this.sql<{ id: string }>(
      `SELECT id FROM ${this.schema}.job WHERE name = $1 AND id = ANY($2::uuid[])
       UNION SELECT id FROM ${this.schema}.archive WHERE name = $1 AND id = ANY($2::uuid[])`,
      [ROLLOUT_QUEUE, ids],
    );
    return new Set(rows.map((r) => r.id));
  }

  /**
   * Inserts the jobs that do not exist yet. Ids are the idempotency key: a job already there (in
   * any state) is left as it is, also when two coordinators enqueue at once (ON CONFLICT DO NOTHING).
   */
  async enqueue(
    jobs: readonly QueuedRollout[],
    settings: JobSettings,
  ): Promise<{ created: number; existing: number }> {
    const present = await this.existing(jobs.map((j) => j.id));
    const fresh = jobs.filter((j) => !present.has(j.id));
    let created = 0;
    // One INSERT ... ON CONFLICT DO NOTHING RETURNING id per job: null when another coordinator's
    // insert of the same id won, so the counts are this call's own.
    const insertOne = async (j: QueuedRollout) => {
      const id = await this.boss.send(ROLLOUT_QUEUE, j.data, {
        id: j.id,
        singletonKey: j.key,
        expireInSeconds: settings.leaseSeconds,
        retryLimit: settings.retryLimit,
        retryDelay: settings.retryDelaySeconds,
      });
      if (id !== null) created++;
    };
    for (let i = 0; i < fresh.length; i += 16) await Promise.all(fresh.slice(i, i + 16).map(insertOne));
    return { created, existing: jobs.length - created };
  }

  /** The jobs among `ids` that have ended (completed, failed for good, cancelled). */
  async ended(ids: readonly string[]): Promise<EndedJob[]> {
    if (ids.length === 0) return [];
    const rows = await this.sql<{ id: string; state: JobEndState; output: unknown; retry_count: number }>(
      `SELECT id, state::text AS state, output, retry_count FROM ${this.schema}.job
         WHERE name = $1 AND id = ANY($2::uuid[]) AND state IN ('completed', 'failed', 'cancelled')
       UNION ALL
       SELECT id, state::text AS state, output, retry_count FROM ${this.schema}.archive
         WHERE name = $1 AND id = ANY($2::uuid[]) AND state IN ('completed', 'failed', 'cancelled')`,
      [ROLLOUT_QUEUE, ids],
    );
    return rows.map((r) => ({ id: r.id, state: r.state, output: r.output, retryCount: r.retry_count }));
  }

  /** How many jobs of the queue carry this run id, by state (the archive included). */
  async jobsOfRun(runId: string): Promise<{ id: string; state: string; retryCount: number }[]> {
    const rows = await this.sql<{ id: string; state: string; retry_count: number }>(
      `SELECT id, state::text AS state, retry_count FROM ${this.schema}.job WHERE name = $1 AND data->>'runId' = $2
       UNION ALL
       SELECT id, state::text AS state, retry_count FROM ${this.schema}.archive WHERE name = $1 AND data->>'runId' = $2`,
      [ROLLOUT_QUEUE, runId],
    );
    return rows.map((r) => ({ id: r.id, state: r.state, retryCount: r.retry_count }));
  }

  /** Leases the next job (created, or due for a retry), or null when there is none. */
  async fetch(): Promise<FetchedRollout | null> {
    const [job] = await this.boss.fetch<unknown>(ROLLOUT_QUEUE, { batchSize: 1, includeMetadata: true });
    if (!job) return null;
    return {
      id: job.id,
      data: job.data,
      retryCount: job.retryCount,
      retryLimit: job.retryLimit,
      leaseSeconds: job.expireInSeconds,
    };
  }

  /** Completes an active job with the sample's result; false when it was not active any more. */
  async complete(id: string, result: SampleResult): Promise<boolean> {
    const r = (await this.boss.complete(ROLLOUT_QUEUE, id, result)) as unknown as { affected?: number };
    return (r?.affected ?? 0) > 0;
  }

  /** Fails an attempt: pg-boss retries the job (after the retry delay) until its retry limit. */
  async fail(id: string, reason: string): Promise<void> {
    await this.boss.fail(ROLLOUT_QUEUE, id, { message: reason });
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

  async close(): Promise<void> {
    await this.boss.stop({ graceful: false, wait: true, close: true });
  }
}
