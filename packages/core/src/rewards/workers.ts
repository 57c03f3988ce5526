import { randomBytes } from 'node:crypto';
import type { Logger } from 'pino';
import { StepwiseError } from '../domain/errors.js';
import type { JobRequest, RewardJob, RewardJobQueue } from './job-queue.js';
import { errorMessage, isRetryable, RewardTimeoutError } from './plugin.js';

// Reward workers: `concurrency` jobs at a time, off the request path; a failure never turns into a 0.
// Claims, backoff and stopping: docs/rewards.md#reward-jobs ("Workers").

export interface JobOutcome {
  result: Record<string, unknown>;
  /** Jobs to queue when this one is done (in the same transaction). */
  followUps?: JobRequest[];
}

export type JobRunner = (job: RewardJob, signal: AbortSignal) => Promise<JobOutcome>;

export interface RewardWorkersOptions {
  queue: RewardJobQueue;
  run: JobRunner;
  concurrency: number;
  /** A job's time limit. */
  timeoutMs: (job: RewardJob) => number;
  /** First retry delay; doubles per attempt up to backoffMaxMs; half of it is jittered. */
  backoffMs: number;
  backoffMaxMs: number;
  /** Longest sleep between looks at the queue (jobs queued by other processes, expired leases). */
  pollMs: number;
  clock?: () => number;
  random?: () => number;
  logger?: Pick<Logger, 'warn' | 'info'>;
  workerId?: string;
}

/** Extra lease beyond a job's time limit before another worker may take it over. */
const LEASE_GRACE_MS = 5_000;

/** The abort reason of a job cut short by stop(): it is released to run again, not failed. */
class WorkersStopping extends StepwiseError {
  override readonly name = 'WorkersStopping';
  constructor(message: string) {
    super(message, 503, 'workers_stopping', undefined, true);
  }
}

export class RewardWorkers {
  readonly workerId: string;
  private readonly clock: () => number;
  private readonly random: () => number;
  private readonly running = new Map<number, { controller: AbortController; done: Promise<void> }>();
  private loopDone: Promise<void> | null = null;
  private stopped = true;
  private wakeLoop: (() => void) | null = null;
  /** A poke arrived while the loop was not asleep: it must look again before sleeping. */
  private poked = false;
  private finishWaiters = new Set<() => void>();
  private counters = { done: 0, retried: 0, failed: 0 };

  constructor(private readonly options: RewardWorkersOptions) {
    this.workerId = options.workerId ?? `w-${process.pid}-${randomBytes(4).toString('hex')}`;
    this.clock = options.clock ?? Date.now;
    this.random = options.random ?? Math.random;
  }

  start(): this {
    if (!this.stopped || this.options.concurrency <= 0) return this;
    this.stopped = false;
    this.loopDone = this.loop();
    return this;
  }

  /** New work was queued (or a slot freed): look at the queue now. */
  poke(): void {
    this.poked = true;
    this.wakeLoop?.();
  }

  stats(): { running: number; concurrency: number; done: number; retried: number; failed: number } {
    return { running: this.running.size, concurrency: this.options.concurrency, ...this.counters };
  }

  /** Delay before attempt `attempt + 1`: base·2^(attempt-1), capped, the upper half random. */
  backoff(attempt: number): number {
    const full = Math.min(this.options.backoffMaxMs, this.options.backoffMs * 2 ** Math.max(0, attempt - 1));
    return Math.round(full / 2 + (this.random() * full) / 2);
  }

  private sleep(ms: number): Promise<void> {
    if (this.poked) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        if (this.wakeLoop === done) this.wakeLoop = null;
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.wakeLoop = done;
    });
  }

  private async loop(): Promise<void> {
    const { queue, concurrency, pollMs } = this.options;
    while (!this.stopped) {
      this.poked = false;
      const free = concurrency - this.running.size;
      let claimed: RewardJob[] = [];
      if (free > 0) {
        try {
          claimed = await queue.claim(
            this.workerId,
            free,
            this.clock(),
            (job) => this.options.timeoutMs(job) + LEASE_GRACE_MS,
          );
        } catch (err) {
          if (this.stopped) break;
          this.options.logger?.warn({ err }, 'claiming reward jobs failed; will retry');
        }
        for (const job of claimed) this.launch(job);
        if (claimed.length === free) continue; // maybe more are due
      }
      if (this.stopped) break;
      let wait = pollMs;
      if (this.running.size < concurrency) {
        // A job due already but not claimed waits for its twin to finish (which pokes the loop).
        const due = await queue.nextDue().catch(() => null);
        const until = due === null ? 0 : due - this.clock();
        if (until > 0) wait = Math.min(wait, until);
      }
      await this.sleep(wait);
    }
  }

  private launch(job: RewardJob): void {
    const controller = new AbortController();
    const done = this.execute(job, controller).finally(() => {
      this.running.delete(job.id);
      this.poke(); // a slot is free
      const waiters = this.finishWaiters;
      this.finishWaiters = new Set();
      for (const w of waiters) w();
    });
    this.running.set(job.id, { controller, done });
  }

  private async execute(job: RewardJob, controller: AbortController): Promise<void> {
    const { queue, logger } = this.options;
    const limit = this.options.timeoutMs(job);
    const timer = setTimeout(() => controller.abort(new RewardTimeoutError(limit)), limit);
    const aborted = new Promise<never>((_, reject) => {
      controller.signal.addEventListener('abort', () => reject(controller.signal.reason), { once: true });
    });
    aborted.catch(() => {});
    const work = this.options.run(job, controller.signal);
    work.catch(() => {}); // a handler that ignores the abort may settle later: nobody listens then
    let outcome: JobOutcome;
    try {
      outcome = await Promise.race([work, aborted]);
    } catch (error) {
      clearTimeout(timer);
      const reason = controller.signal.aborted ? controller.signal.reason : error;
      if (reason instanceof WorkersStopping) {
        await queue.release(job.id, this.workerId, this.clock()).catch(() => {});
        return;
      }
      await this.recordFailure(job, reason);
      return;
    }
    clearTimeout(timer);
    try {
      await queue.complete(job.id, this.workerId, outcome.result, this.clock(), outcome.followUps);
      this.counters.done++;
    } catch (err) {
      // The signals are written; the lease runs out and the job runs once more (same values).
      logger?.warn({ err, job: job.id }, 'a finished reward job could not be marked done');
    }
  }

  private async recordFailure(job: RewardJob, error: unknown): Promise<void> {
    const now = this.clock();
    const retryable = isRetryable(error);
    const attempt = { attempt: job.attempts, at: now, message: errorMessage(error), retryable };
    try {
      if (retryable && job.attempts < job.maxAttempts) {
        await this.options.queue.retry(job.id, this.workerId, attempt, now + this.backoff(job.attempts), now);
        this.counters.retried++;
      } else {
        await this.options.queue.fail(job.id, this.workerId, attempt, now);
        this.counters.failed++;
        this.options.logger?.warn(
          {
            job: job.id,
            function: job.function,
            trajectory: job.trajectoryId,
            group: job.groupId,
            attempts: job.attempts,
            error: attempt.message,
          },
          'reward job failed',
        );
      }
    } catch (err) {
      this.options.logger?.warn({ err, job: job.id }, 'a reward job failure could not be recorded');
    }
  }

  /** Resolves when any running job of this process finishes, or after `ms`. */
  waitForAnyFinish(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.finishWaiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      this.finishWaiters.add(done);
    });
  }

  /** Stops claiming, aborts running jobs and gives them back to the queue. */
  async stop(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    this.poke();
    await this.loopDone;
    for (const { controller } of this.running.values()) controller.abort(new WorkersStopping('stopping'));
    await Promise.allSettled([...this.running.values()].map((r) => r.done));
    for (const w of this.finishWaiters) w();
  }
}
