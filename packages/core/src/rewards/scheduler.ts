import type { Logger } from 'pino';
import type { DataPool } from '../pool/data-pool.js';
import type { RewardsConfig } from './config.js';
import type { JobRequest, RewardJobQueue } from './job-queue.js';
import type { RewardJobPlanner } from './job-requests.js';
import type { RewardWorkers } from './workers.js';

// The reward scheduler: follows the pool's event log from a cursor saved in the queue and queues the
// jobs each event calls for. When jobs are queued: docs/rewards.md#reward-jobs

const CURSOR = 'scheduler';
const SCHEDULED_EVENTS = ['trajectory_completed', 'group_ready', 'signal_added'] as const;

export interface RewardSchedulerOptions {
  pool: DataPool;
  config: RewardsConfig;
  queue: RewardJobQueue;
  planner: RewardJobPlanner;
  workers: RewardWorkers;
  clock: () => number;
  logger?: Pick<Logger, 'warn' | 'info'>;
}

export class RewardScheduler {
  private readonly pool: DataPool;
  private readonly config: RewardsConfig;
  private readonly queue: RewardJobQueue;
  private readonly planner: RewardJobPlanner;
  private readonly workers: RewardWorkers;
  private readonly clock: () => number;
  private readonly logger?: Pick<Logger, 'warn' | 'info'>;
  private scheduler: Promise<void> | null = null;
  private stopScheduler: (() => void) | null = null;
  private stopped = false;

  constructor(options: RewardSchedulerOptions) {
    this.pool = options.pool;
    this.config = options.config;
    this.queue = options.queue;
    this.planner = options.planner;
    this.workers = options.workers;
    this.clock = options.clock;
    this.logger = options.logger;
  }

  /** Starts following the event log (once). */
  start(): void {
    if (!this.stopped && !this.scheduler) this.scheduler = this.follow();
  }

  /** Stops following and waits for the loop to end. */
  async stop(): Promise<void> {
    this.stopped = true;
    this.stopScheduler?.();
    await this.scheduler;
  }

  private async follow(): Promise<void> {
    let cursor: number;
    try {
      const saved = await this.queue.cursor(CURSOR);
      if (saved !== null) cursor = saved;
      else if (this.config.backfill) cursor = 0;
      else {
        cursor = await this.pool.store.lastEventSeq();
        await this.queue.advance(CURSOR, cursor, [], this.clock());
      }
    } catch (err) {
      this.logger?.warn({ err }, 'the reward scheduler could not start');
      return;
    }
    const pollMs = this.config.workers.poll_ms;
    while (!this.stopped) {
      let busy = false;
      try {
        const events = await this.pool.events({ after: cursor, limit: 500, types: [...SCHEDULED_EVENTS] });
        if (events.length > 0) {
          const requests: JobRequest[] = [];
          for (const event of events) requests.push(...(await this.planner.jobsForEvent(event)));
          const last = events.at(-1)!.seq;
          const outcomes = await this.queue.advance(CURSOR, last, requests, this.clock());
          cursor = last;
          if (outcomes.some((o) => o.created)) this.workers.poke();
          busy = events.length === 500;
        }
      } catch (err) {
        if (this.stopped) break;
        this.logger?.warn({ err }, 'the reward scheduler failed to read events; will retry');
      }
      if (!busy && !this.stopped) await this.pause(pollMs);
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.stopScheduler = null;
        resolve();
      };
      const timer = setTimeout(done, ms);
      this.stopScheduler = done;
    });
  }
}
