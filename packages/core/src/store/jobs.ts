import type { Rule } from './tx.js';

/*
 * The reward job queue's rows and the primitives its rules run on (packages/core/src/rewards/job-queue.ts), inside
 * one transaction of a backend: SQLite (sqlite/jobs.ts) or PostgreSQL (postgres/jobs.ts). As with the
 * pool, no queue rule lives here: when a job is superseded, retried or taken is decided once, there.
 */

export type JobKind = 'function' | 'combine';
export type JobState = 'pending' | 'running' | 'done' | 'failed' | 'superseded';
export const JOB_STATES: readonly JobState[] = ['pending', 'running', 'done', 'failed', 'superseded'];

export interface AttemptError {
  attempt: number;
  at: number;
  message: string;
  retryable: boolean;
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
  /** JSON: AttemptError[]. */
  errors: string;
  /** JSON object, or null. */
  result: string | null;
  reason: string;
  created_at: number;
  updated_at: number;
  finished_at: number | null;
}

/** What one job is for: at most one job per target runs at a time, and one waits. */
export interface JobTarget {
  kind: JobKind;
  function: string;
  trajectoryId: string | null;
  groupId: string | null;
}

export interface NewJob extends JobTarget {
  channel: string;
  version: string;
  maxAttempts: number;
  reason: string;
}

export type JobPatch = Partial<
  Pick<
    JobRow,
    | 'state'
    | 'version'
    | 'max_attempts'
    | 'attempts'
    | 'run_at'
    | 'lease_until'
    | 'worker'
    | 'error'
    | 'errors'
    | 'result'
    | 'updated_at'
    | 'finished_at'
  >
>;

export interface JobOfOptions {
  /** A job id to leave out. */
  except?: number;
  /** Only this version, and only a result computed for a finished trajectory (reason not ending in `unfinished`). */
  version?: { version: string; unfinished: string };
  /** Locked to the commit (PostgreSQL: `FOR UPDATE`), so no claim takes it meanwhile. */
  lock?: boolean;
}

export interface JobTx {
  /**
   * Holds these targets to the commit, all at once and in one order, so transactions queueing
   * overlapping targets wait for each other instead of deadlocking (SQLite's write lock does it).
   */
  lockTargets(targets: readonly JobTarget[]): Rule<void>;
  /** The newest job of the target in `states`. */
  jobOf(target: JobTarget, states: readonly JobState[], options?: JobOfOptions): Rule<JobRow | undefined>;
  /** A pending job; undefined when a concurrent transaction queued the target's pending job first. */
  insertJob(job: NewJob, now: number): Rule<JobRow | undefined>;
  updateJob(id: number, patch: JobPatch): Rule<JobRow>;
  /** Running jobs whose lease passed, oldest lease first (rows another transaction holds are skipped). */
  lostJobs(now: number, limit: number): Rule<JobRow[]>;
  /** Pending jobs due by `now` whose target has no running job, in run order (held rows skipped). */
  dueJobs(now: number, limit: number): Rule<JobRow[]>;
  /** The job, locked, if it is running for this worker. */
  ownedJob(id: number, worker: string): Rule<JobRow | undefined>;
  /** Moves a cursor forward (never back). */
  moveCursor(name: string, seq: number, now: number): Rule<void>;
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

/** A backend of the queue: its transactions, and its reads outside any. */
export interface JobStore {
  write<T>(rule: (tx: JobTx) => Rule<T>): Promise<T>;
  row(id: number): Promise<JobRow | undefined>;
  rows(ids: readonly number[]): Promise<JobRow[]>;
  list(filter: JobFilter): Promise<JobRow[]>;
  counts(): Promise<{ state: JobState; n: number }[]>;
  /** When the earliest pending job is due; null when none is pending. */
  nextDue(): Promise<number | null>;
  cursor(name: string): Promise<number | null>;
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

/** The SQL list of states, e.g. `'running', 'done'` (from the closed set above only). */
export function stateList(states: readonly JobState[]): string {
  for (const s of states) if (!JOB_STATES.includes(s)) throw new Error(`not a job state: ${s}`);
  return states.map((s) => `'${s}'`).join(', ');
}
