import {
  type AttemptError,
  JOB_STATES,
  type JobFilter,
  type JobKind,
  type JobRow,
  type JobState,
  type JobStore,
  type JobTarget,
  type JobTx,
} from '../store/jobs.js';
import { openPostgresJobStore, type PostgresJobStoreOptions } from '../store/postgres/jobs.js';
import { openSqliteJobStore, type SqliteJobStoreOptions } from '../store/sqlite/jobs.js';
import type { Rule } from '../store/tx.js';

// The reward job queue: its rules, written once over the row primitives of either backend
// (store/sqlite/jobs.ts, store/postgres/jobs.ts), each run in one transaction of it. States, leases,
// dedup: docs/rewards.md#reward-jobs

export type { AttemptError, JobFilter, JobKind, JobRow, JobState };
export { JOB_STATES };

/**
 * Ends the `reason` of a job queued for a trajectory still open: its result never stands in for the
 * finished trajectory's, so completion queues the function again.
 */
export const UNFINISHED_SUFFIX = ':open';

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

/** The queue's contract, on SQLite or PostgreSQL. */
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

export function toJob(row: JobRow): RewardJob {
  return {
    id: Number(row.id),
    kind: row.kind,
    channel: row.channel,
    trajectoryId: row.trajectory_id,
    groupId: row.group_id,
    function: row.function,
    version: row.version,
    state: row.state,
    attempts: row.attempts,
    maxAttempts: row.max_attempts,
    runAt: Number(row.run_at),
    leaseUntil: row.lease_until === null ? null : Number(row.lease_until),
    worker: row.worker,
    error: row.error,
    errors: JSON.parse(row.errors) as AttemptError[],
    result: row.result === null ? null : (JSON.parse(row.result) as Record<string, unknown>),
    reason: row.reason,
    createdAt: Number(row.created_at),
    updatedAt: Number(row.updated_at),
    finishedAt: row.finished_at === null ? null : Number(row.finished_at),
  };
}

const targetOf = (row: JobRow): JobTarget => ({
  kind: row.kind,
  function: row.function,
  trajectoryId: row.trajectory_id,
  groupId: row.group_id,
});

const errorsOf = (row: JobRow): AttemptError[] => JSON.parse(row.errors) as AttemptError[];

/** Queues each request, or finds the job that stands for it. */
function* enqueueAll(tx: JobTx, requests: JobRequest[], now: number): Rule<EnqueueOutcome[]> {
  if (requests.length === 0) return [];
  yield* tx.lockTargets(requests);
  const outcomes: EnqueueOutcome[] = [];
  for (const r of requests) outcomes.push(yield* enqueueOne(tx, r, outcomes, now));
  return outcomes;
}

function* enqueueOne(tx: JobTx, r: JobRequest, earlier: EnqueueOutcome[], now: number): Rule<EnqueueOutcome> {
  // Skipped: the job that was queued instead will queue this one when it finishes.
  const after = r.unlessCreated?.map((i) => earlier[i]).find((o) => o?.created);
  if (after) return { job: after.job, created: false };
  for (let tries = 0; tries < 8; tries++) {
    // Locked, so a claim cannot take it while its version changes (the claim skips it instead).
    const twin = yield* tx.jobOf(r, ['pending'], { lock: true });
    if (twin) {
      if (twin.version === r.version && twin.max_attempts === r.maxAttempts)
        return { job: toJob(twin), created: false };
      const updated = yield* tx.updateJob(twin.id, {
        version: r.version,
        max_attempts: r.maxAttempts,
        updated_at: now,
      });
      return { job: toJob(updated), created: false };
    }
    if (r.kind === 'function' && !r.force) {
      // A result computed while the trajectory was open never stands in for the finished one's.
      const ran = yield* tx.jobOf(r, ['running', 'done', 'failed'], {
        version: { version: r.version, unfinished: UNFINISHED_SUFFIX },
      });
      if (ran) return { job: toJob(ran), created: false };
    }
    const inserted = yield* tx.insertJob(r, now);
    if (inserted) return { job: toJob(inserted), created: true };
    // Another process queued the pending twin since: the next turn finds it.
  }
  throw Object.assign(new Error('queueing a reward job kept racing with other processes'), { code: '40001' });
}

/** Ends a job whose pending twin will do its work instead. */
function* supersede(
  tx: JobTx,
  id: number,
  error: string | null,
  errors: AttemptError[],
  now: number,
): Rule<JobRow> {
  return yield* tx.updateJob(id, {
    state: 'superseded',
    error,
    errors: JSON.stringify(errors),
    lease_until: null,
    worker: null,
    updated_at: now,
    finished_at: now,
  });
}

function* claimJobs(
  tx: JobTx,
  worker: string,
  limit: number,
  now: number,
  leaseMs: (job: RewardJob) => number,
): Rule<RewardJob[]> {
  const claimed: RewardJob[] = [];
  // Jobs whose worker went away (its lease passed): that attempt is lost and counts.
  for (const row of yield* tx.lostJobs(now, limit)) {
    const message = `attempt ${row.attempts} was lost: its worker (${row.worker}) stopped before finishing`;
    const errors = [...errorsOf(row), { attempt: row.attempts, at: now, message, retryable: true }];
    if (row.attempts >= row.max_attempts) {
      yield* tx.updateJob(row.id, {
        state: 'failed',
        error: message,
        errors: JSON.stringify(errors),
        lease_until: null,
        worker: null,
        updated_at: now,
        finished_at: now,
      });
      continue;
    }
    if (yield* tx.jobOf(targetOf(row), ['pending'], { except: row.id })) {
      yield* supersede(tx, row.id, message, errors, now);
      continue;
    }
    const taken = yield* tx.updateJob(row.id, {
      attempts: row.attempts + 1,
      lease_until: now + leaseMs(toJob(row)),
      worker,
      error: message,
      errors: JSON.stringify(errors),
      updated_at: now,
    });
    claimed.push(toJob(taken));
  }
  // Never two jobs for one target and function at once: a pending job whose twin runs waits.
  const need = limit - claimed.length;
  if (need <= 0) return claimed;
  for (const row of yield* tx.dueJobs(now, need)) {
    const taken = yield* tx.updateJob(row.id, {
      state: 'running',
      attempts: row.attempts + 1,
      lease_until: now + leaseMs(toJob(row)),
      worker,
      updated_at: now,
    });
    claimed.push(toJob(taken));
  }
  return claimed;
}

/** Gives a running job back: pending again unless its pending twin stands for it. */
function* requeue(
  tx: JobTx,
  row: JobRow,
  error: AttemptError | null,
  runAt: number,
  now: number,
): Rule<JobRow> {
  const errors = error ? [...errorsOf(row), error] : errorsOf(row);
  const message = error ? error.message : row.error;
  if (yield* tx.jobOf(targetOf(row), ['pending'], { except: row.id }))
    return yield* supersede(tx, row.id, message, errors, now);
  return yield* tx.updateJob(row.id, {
    state: 'pending',
    run_at: runAt,
    error: message,
    errors: JSON.stringify(errors),
    lease_until: null,
    worker: null,
    updated_at: now,
    // A release does not count the attempt it gives back.
    ...(error ? {} : { attempts: row.attempts - 1 }),
  });
}

/** The queue over a backend: each operation one transaction running its rule. */
export class StoredRewardJobQueue implements RewardJobQueue {
  constructor(private readonly store: JobStore) {}

  async enqueue(requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    if (requests.length === 0) return [];
    return this.store.write((tx) => enqueueAll(tx, requests, now));
  }

  async claim(
    worker: string,
    limit: number,
    now: number,
    leaseMs: (job: RewardJob) => number,
  ): Promise<RewardJob[]> {
    if (limit <= 0) return [];
    return this.store.write((tx) => claimJobs(tx, worker, limit, now, leaseMs));
  }

  complete(
    id: number,
    worker: string,
    result: Record<string, unknown>,
    now: number,
    followUps: JobRequest[] = [],
  ): Promise<RewardJob | null> {
    return this.store.write(function* (tx) {
      if (!(yield* tx.ownedJob(id, worker))) return null;
      const row = yield* tx.updateJob(id, {
        state: 'done',
        result: JSON.stringify(result),
        lease_until: null,
        updated_at: now,
        finished_at: now,
      });
      // Follow-ups never change this job: it is done, and only pending twins are updated.
      yield* enqueueAll(tx, followUps, now);
      return toJob(row);
    });
  }

  retry(
    id: number,
    worker: string,
    error: AttemptError,
    runAt: number,
    now: number,
  ): Promise<RewardJob | null> {
    return this.store.write(function* (tx) {
      const row = yield* tx.ownedJob(id, worker);
      return row ? toJob(yield* requeue(tx, row, error, runAt, now)) : null;
    });
  }

  fail(id: number, worker: string, error: AttemptError, now: number): Promise<RewardJob | null> {
    return this.store.write(function* (tx) {
      const row = yield* tx.ownedJob(id, worker);
      if (!row) return null;
      const updated = yield* tx.updateJob(id, {
        state: 'failed',
        error: error.message,
        errors: JSON.stringify([...errorsOf(row), error]),
        lease_until: null,
        updated_at: now,
        finished_at: now,
      });
      return toJob(updated);
    });
  }

  async release(id: number, worker: string, now: number): Promise<void> {
    await this.store.write(function* (tx) {
      const row = yield* tx.ownedJob(id, worker);
      if (row) yield* requeue(tx, row, null, now, now);
    });
  }

  async get(id: number): Promise<RewardJob | null> {
    const row = await this.store.row(id);
    return row ? toJob(row) : null;
  }

  async getMany(ids: readonly number[]): Promise<RewardJob[]> {
    return (await this.store.rows(ids)).map(toJob);
  }

  async list(filter: JobFilter): Promise<RewardJob[]> {
    return (await this.store.list(filter)).map(toJob);
  }

  async counts(): Promise<Record<JobState, number>> {
    const counts = Object.fromEntries(JOB_STATES.map((s) => [s, 0])) as Record<JobState, number>;
    for (const r of await this.store.counts()) counts[r.state] = Number(r.n);
    return counts;
  }

  nextDue(): Promise<number | null> {
    return this.store.nextDue();
  }

  cursor(name: string): Promise<number | null> {
    return this.store.cursor(name);
  }

  advance(name: string, seq: number, requests: JobRequest[], now: number): Promise<EnqueueOutcome[]> {
    return this.store.write(function* (tx) {
      const outcomes = yield* enqueueAll(tx, requests, now);
      yield* tx.moveCursor(name, seq, now);
      return outcomes;
    });
  }

  close(): Promise<void> {
    return this.store.close();
  }
}

export type RewardJobQueueOptions = SqliteJobStoreOptions;
export type PostgresRewardJobQueueOptions = PostgresJobStoreOptions;

/** Opens the queue on the store's SQLite file (creating its tables if the store has not yet). */
export async function openRewardJobQueue(options: RewardJobQueueOptions): Promise<RewardJobQueue> {
  return new StoredRewardJobQueue(await openSqliteJobStore(options));
}

/** Opens the queue in the store's PostgreSQL schema (creating its tables, and the store's, if missing). */
export async function openPostgresRewardJobQueue(
  options: PostgresRewardJobQueueOptions,
): Promise<RewardJobQueue> {
  return new StoredRewardJobQueue(await openPostgresJobStore(options));
}
