import type { Logger } from 'pino';
import { NotFoundError, type Signal, type Trajectory, ValidationError } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { CombinationEvalError, evaluateCombination, requiredSignalNames } from './combination.js';
import { type RewardFunction, type RewardsConfig, type Scoring, scoringFor } from './config.js';
import {
  type JobRequest,
  type JobState,
  openPostgresRewardJobQueue,
  openRewardJobQueue,
  type RewardJob,
  type RewardJobQueue,
  UNFINISHED_SUFFIX,
} from './job-queue.js';
import { RewardJobPlanner } from './job-requests.js';
import { RewardJobRunner } from './job-runner.js';
import { NotApplicableError, type RewardManifest } from './plugin.js';
import { RewardScheduler } from './scheduler.js';
import { type JobOutcome, RewardWorkers } from './workers.js';

// The rewards module at run time: a scheduler following the pool's event log, the workers, and the entry
// points the HTTP API calls. When jobs are queued: docs/rewards.md#reward-jobs

export interface RewardServiceOptions {
  pool: DataPool;
  config: RewardsConfig;
  /** Default: a queue on the store's database file (in memory for an in-memory store), or on `pg`. */
  queue?: RewardJobQueue;
  /** The PostgreSQL store's database: the queue goes in its schema, shared by every process. */
  pg?: { url: string; schema?: string };
  /** Overrides `workers.concurrency` of the config; 0: this process queues jobs but runs none. */
  concurrency?: number;
  /** Follow the event log and queue jobs (default true). */
  schedule?: boolean;
  clock?: () => number;
  random?: () => number;
  logger?: Pick<Logger, 'warn' | 'info'>;
  workerId?: string;
}

export interface ComputeRewardOptions {
  /** Only these functions (default: every function of the trajectory's scoring). */
  functions?: string[];
  /** Compute again even if this version already ran (or failed). */
  recompute?: boolean;
  /** How long to wait for the jobs (0: queue and answer at once). */
  waitMs: number;
}

export interface FunctionOutcome {
  state: JobState | 'not_queued';
  job_id: number | null;
  version: string;
  /** The current trajectory-level value, when the function wrote one. */
  value: number | null;
  /** Step-level values (step-target functions). */
  steps?: { step_index: number; value: number }[];
  attempts?: number;
  error?: string | null;
}

export interface ComputeRewardAnswer {
  trajectory_uid: string;
  /** done: all jobs finished; failed: some failed (see functions); pending: still running (HTTP 202). */
  status: 'done' | 'failed' | 'pending';
  /** The combined value; without a combination, the single trajectory-level function's value. */
  reward: number | null;
  combined: {
    signal: string;
    value: number;
    inputs: Record<string, number>;
    reward_written: boolean | null;
  } | null;
  /** Combination inputs not in yet. */
  missing: string[];
  functions: Record<string, FunctionOutcome>;
  job_ids: number[];
}

export interface RequiredSignalsStatus {
  /** True when the reward can be computed: every required input is in (or nothing is required). */
  ready: boolean;
  required: string[];
  missing: string[];
}

export interface RecomputeRequest {
  channel?: string;
  trajectoryId?: string;
  /** A function name, or a combination's signal name (recombine only). */
  function?: string;
}

/**
 * Whether a trajectory's signals hold everything its scoring needs: with a combination, that the
 * combination can be computed; without one, that every function has written a current signal.
 */
export function requiredSignalsStatus(
  scoring: Scoring | null,
  signals: readonly Signal[],
): RequiredSignalsStatus {
  if (!scoring) return { ready: true, required: [], missing: [] };
  if (scoring.combination) {
    const required = requiredSignalNames(scoring.combination.combination);
    try {
      const evaluation = evaluateCombination(scoring.combination.combination, signals);
      return { ready: evaluation.ok, required, missing: evaluation.ok ? [] : evaluation.missing };
    } catch (error) {
      if (error instanceof CombinationEvalError) return { ready: true, required, missing: [] };
      throw error;
    }
  }
  const required = scoring.functions.filter((f) => f.handler !== null).map((f) => f.name);
  const present = new Set(signals.map((s) => s.name));
  const missing = required.filter((n) => !present.has(n));
  return { ready: missing.length === 0, required, missing };
}

export class RewardService {
  readonly config: RewardsConfig;
  readonly queue: RewardJobQueue;
  readonly workers: RewardWorkers;
  private readonly pool: DataPool;
  private readonly clock: () => number;
  private readonly schedule: boolean;
  private readonly ownsQueue: boolean;
  private readonly planner: RewardJobPlanner;
  private readonly runner: RewardJobRunner;
  private readonly scheduler: RewardScheduler;
  private stopped = false;

  private constructor(options: RewardServiceOptions & { queue: RewardJobQueue }, ownsQueue: boolean) {
    this.config = options.config;
    this.pool = options.pool;
    this.queue = options.queue;
    this.ownsQueue = ownsQueue;
    this.clock = options.clock ?? Date.now;
    this.schedule = options.schedule ?? true;
    this.planner = new RewardJobPlanner(this.pool, this.config);
    this.runner = new RewardJobRunner(this.pool, this.config, this.planner);
    const w = options.config.workers;
    this.workers = new RewardWorkers({
      queue: this.queue,
      run: (job, signal) => this.runJob(job, signal),
      concurrency: options.concurrency ?? w.concurrency,
      timeoutMs: (job) => this.timeoutOf(job),
      backoffMs: w.backoff_ms,
      backoffMaxMs: w.backoff_max_ms,
      pollMs: w.poll_ms,
      clock: options.clock,
      random: options.random,
      logger: options.logger,
      workerId: options.workerId,
    });
    this.scheduler = new RewardScheduler({
      pool: this.pool,
      config: this.config,
      queue: this.queue,
      planner: this.planner,
      workers: this.workers,
      clock: this.clock,
      logger: options.logger,
    });
  }

  /** Opens the job queue (on the store's file unless one is given) and builds the service. */
  static async open(options: RewardServiceOptions): Promise<RewardService> {
    if (options.queue) return new RewardService({ ...options, queue: options.queue }, false);
    const info = await options.pool.store.describe();
    if (info.kind === 'postgres' && !options.pg)
      throw new Error(
        'a PostgreSQL store keeps its reward jobs in its own database: pass `pg` (url, schema)',
      );
    const queue = options.pg
      ? await openPostgresRewardJobQueue({ url: options.pg.url, schema: options.pg.schema })
      : await openRewardJobQueue({ path: info.kind === 'sqlite' ? info.path : null });
    return new RewardService({ ...options, queue }, true);
  }

  /** Starts the workers and the scheduler. */
  start(): this {
    if (this.stopped) return this;
    this.workers.start();
    if (this.schedule) this.scheduler.start();
    return this;
  }

  /** Stops the scheduler and the workers (running jobs go back to the queue), then the queue. */
  async close(): Promise<void> {
    if (this.stopped) return;
    this.stopped = true;
    await this.scheduler.stop();
    await this.workers.stop();
    if (this.ownsQueue) await this.queue.close();
  }

  manifests(): RewardManifest[] {
    return this.config.plugins;
  }

  private timeoutOf(job: RewardJob): number {
    return job.kind === 'function'
      ? (this.config.functions.get(job.function)?.timeoutMs ?? this.config.workers.timeout_ms)
      : this.config.workers.timeout_ms;
  }

  /** Runs one job: the JobRunner of the workers. */
  async runJob(job: RewardJob, signal: AbortSignal): Promise<JobOutcome> {
    return this.runner.runJob(job, signal);
  }

  // ---- entry points ---------------------------------------------------------------------------

  /** Whether a trajectory has every signal its channel's (or task's) scoring needs. */
  async requiredSignals(trajectoryId: string): Promise<RequiredSignalsStatus> {
    const t = await this.pool.getTrajectory(trajectoryId);
    if (!t) throw new NotFoundError(`trajectory ${trajectoryId} does not exist`);
    return requiredSignalsStatus(
      scoringFor(this.config, t),
      await this.pool.getSignals(t.id, { current: true }),
    );
  }

  /** Waits until no job for these keys is pending or running, or the time is up; true when settled. */
  private async settle(
    trajectoryId: string,
    groupId: string | null,
    kinds: 'function' | 'combine',
    deadline: number,
  ): Promise<boolean> {
    for (;;) {
      const open = async (filter: { trajectoryId?: string; groupId?: string }) => {
        for (const state of ['pending', 'running'] as const) {
          const jobs = await this.queue.list({ ...filter, kind: kinds, state, limit: 1 });
          if (jobs.length > 0) return true;
        }
        return false;
      };
      const busy =
        (await open({ trajectoryId })) ||
        (groupId !== null && kinds === 'function' && (await open({ groupId })));
      if (!busy) return true;
      const left = deadline - performance.now();
      if (left <= 0) return false;
      await this.workers.waitForAnyFinish(Math.min(left, 50));
    }
  }

  /**
   * Computes a trajectory's reward now: queues its functions' jobs (not again for a version already
   * computed unless `recompute`), waits up to `waitMs` for them and then for its combination, and
   * answers what is known. `status: 'pending'` when time ran out (the jobs go on).
   */
  async computeReward(trajectoryId: string, options: ComputeRewardOptions): Promise<ComputeRewardAnswer> {
    const t = await this.pool.getTrajectory(trajectoryId);
    if (!t) throw new NotFoundError(`trajectory ${trajectoryId} does not exist`);
    const scoring = scoringFor(this.config, t);
    if (!scoring || (scoring.functions.length === 0 && !scoring.combination)) {
      throw new NotApplicableError(`no reward function is configured for channel ${t.channel}`);
    }
    const wanted = options.functions;
    wanted?.forEach((name, i) => {
      if (!scoring.functions.some((f) => f.name === name)) {
        throw new ValidationError(
          `functions.${i}: ${JSON.stringify(name)} is not a reward function of ${scoring.origin} (${scoring.functions.map((f) => f.name).join(', ') || 'none'})`,
          `functions.${i}`,
        );
      }
    });
    const chosen = scoring.functions.filter(
      (f) => f.handler !== null && (!wanted || wanted.includes(f.name)),
    );
    const requests: JobRequest[] = [];
    const recompute = options.recompute ?? false;
    let groupPending = false;
    for (const fn of chosen) {
      if (fn.plugin.target === 'group' && !(await this.planner.groupFinished(t))) {
        groupPending = true;
        continue;
      }
      const reason = t.status === 'open' ? `compute_reward${UNFINISHED_SUFFIX}` : 'compute_reward';
      requests.push(this.planner.functionJob(fn, t, reason, recompute));
    }
    const outcomes = await this.queue.enqueue(requests, this.clock());
    this.workers.poke();
    const deadline = performance.now() + options.waitMs;
    const groupId = chosen.some((f) => f.plugin.target === 'group') ? t.groupId : null;
    let settled = await this.settle(t.id, groupId, 'function', deadline);
    const ids = outcomes.map((o) => o.job.id);
    if (settled && scoring.combination) {
      const [combine] = await this.queue.enqueue(
        this.planner.combineJob(scoring, t, 'compute_reward'),
        this.clock(),
      );
      this.workers.poke();
      if (combine) ids.push(combine.job.id);
      settled = await this.settle(t.id, null, 'combine', deadline);
    }
    return this.answer(t.id, scoring, chosen, ids, settled && !groupPending);
  }

  private async answer(
    trajectoryId: string,
    scoring: Scoring,
    chosen: RewardFunction[],
    ids: number[],
    settled: boolean,
  ): Promise<ComputeRewardAnswer> {
    const t = (await this.pool.getTrajectory(trajectoryId))!;
    const signals = await this.pool.getSignals(trajectoryId, { current: true });
    const functions: Record<string, FunctionOutcome> = {};
    let failed = false;
    for (const fn of chosen) {
      const filter = fn.plugin.target === 'group' ? { groupId: t.groupId } : { trajectoryId };
      const [job] = await this.queue.list({ ...filter, kind: 'function', function: fn.name, limit: 1 });
      const mine = signals.filter((s) => s.name === fn.name && s.source === fn.plugin.source);
      const whole = mine.find((s) => s.stepIndex === null);
      const outcome: FunctionOutcome = {
        state: job?.state ?? 'not_queued',
        job_id: job?.id ?? null,
        version: whole?.version ?? fn.version,
        value: whole?.value ?? null,
      };
      if (fn.plugin.target === 'step') {
        outcome.steps = mine
          .filter((s) => s.stepIndex !== null)
          .map((s) => ({ step_index: s.stepIndex!, value: s.value }));
      }
      if (job && (job.state === 'failed' || job.error)) {
        outcome.attempts = job.attempts;
        outcome.error = job.error;
      }
      if (job?.state === 'failed') failed = true;
      functions[fn.name] = outcome;
    }
    let combined: ComputeRewardAnswer['combined'] = null;
    let missing: string[] = [];
    const rule = scoring.combination;
    if (rule) {
      const status = requiredSignalsStatus(scoring, signals);
      missing = status.missing;
      const written = signals.find(
        (s) => s.stepIndex === null && s.name === rule.signal && s.source === rule.source,
      );
      if (written && status.ready) {
        combined = {
          signal: rule.signal,
          value: written.value,
          inputs: ((written.details as { inputs?: Record<string, number> }).inputs ?? {}) as Record<
            string,
            number
          >,
          reward_written: rule.writeReward ? t.reward === written.value : null,
        };
      }
    }
    const single = chosen.filter((f) => f.plugin.target !== 'step');
    const reward = combined
      ? combined.value
      : !rule && single.length === 1
        ? (functions[single[0]!.name]!.value ?? null)
        : null;
    return {
      trajectory_uid: trajectoryId,
      status: !settled ? 'pending' : failed ? 'failed' : 'done',
      reward,
      combined,
      missing,
      functions,
      job_ids: [...new Set(ids)],
    };
  }

  /**
   * Queues jobs again, forced (a new version, a fixed endpoint, a late input): one trajectory, a
   * channel, or every complete trajectory; all functions or one, or only the combination when
   * `function` names a combination's signal.
   */
  async recompute(
    request: RecomputeRequest,
  ): Promise<{ trajectories: number; queued: number; job_ids: number[] }> {
    const only = request.function;
    if (only !== undefined && !this.config.functions.has(only) && !this.isCombinationSignal(only)) {
      throw new ValidationError(
        `function: no reward function or combination is named ${JSON.stringify(only)}`,
        'function',
      );
    }
    let trajectories = 0;
    let queued = 0;
    const jobIds: number[] = [];
    const groupsSeen = new Set<string>();
    const enqueueFor = async (list: Trajectory[]) => {
      const requests: JobRequest[] = [];
      for (const t of list) {
        const scoring = scoringFor(this.config, t);
        if (!scoring) continue;
        trajectories++;
        for (const fn of scoring.functions) {
          if (fn.handler === null || (only !== undefined && fn.name !== only)) continue;
          if (fn.plugin.target === 'group') {
            const key = `${t.channel}\u0000${t.groupId}`;
            if (groupsSeen.has(key)) continue;
            groupsSeen.add(key);
          }
          requests.push(this.planner.functionJob(fn, t, 'recompute', true));
        }
        if (only !== undefined && scoring.combination?.signal === only) {
          requests.push(...this.planner.combineJob(scoring, t, 'recompute'));
        }
      }
      const outcomes = await this.queue.enqueue(requests, this.clock());
      for (const o of outcomes) {
        if (o.created) queued++;
        if (jobIds.length < 1_000) jobIds.push(o.job.id);
      }
      this.workers.poke();
    };
    if (request.trajectoryId !== undefined) {
      const t = await this.pool.getTrajectory(request.trajectoryId);
      if (!t) throw new NotFoundError(`trajectory ${request.trajectoryId} does not exist`);
      if (request.channel !== undefined && t.channel !== request.channel) {
        throw new ValidationError(`channel: trajectory ${t.id} is in channel ${t.channel}`, 'channel');
      }
      await enqueueFor([t]);
    } else {
      let after: string | null = null;
      do {
        const page = await this.pool.store.scanTrajectories({
          channel: request.channel,
          status: 'complete',
          after,
          limit: 500,
        });
        await enqueueFor(page.items);
        after = page.cursor;
      } while (after !== null);
    }
    return { trajectories, queued, job_ids: jobIds };
  }

  private isCombinationSignal(name: string): boolean {
    return [...this.config.channels.values(), ...this.config.tasks.values(), this.config.default].some(
      (s) => s?.combination?.signal === name,
    );
  }

  jobs(filter: Parameters<RewardJobQueue['list']>[0]): Promise<RewardJob[]> {
    return this.queue.list(filter);
  }

  job(id: number): Promise<RewardJob | null> {
    return this.queue.get(id);
  }

  async describe(): Promise<Record<string, unknown>> {
    const scoringOut = (s: Scoring) => ({
      functions: s.functions.map((f) => f.name),
      combination: s.combination
        ? {
            expression: s.combination.combination.text,
            signal: s.combination.signal,
            version: s.combination.version,
            write_reward: s.combination.writeReward,
            required: requiredSignalNames(s.combination.combination),
          }
        : null,
    });
    return {
      functions: Object.fromEntries(
        [...this.config.functions.values()].map((f) => [
          f.name,
          {
            plugin: f.plugin.name,
            target: f.plugin.target,
            source: f.plugin.source,
            version: f.version,
            timeout_ms: f.timeoutMs,
            max_attempts: f.maxAttempts,
          },
        ]),
      ),
      channels: Object.fromEntries([...this.config.channels].map(([k, s]) => [k, scoringOut(s)])),
      tasks: Object.fromEntries([...this.config.tasks].map(([k, s]) => [k, scoringOut(s)])),
      default: this.config.default ? scoringOut(this.config.default) : null,
      workers: { ...this.workers.stats(), worker_id: this.workers.workerId },
      jobs: await this.queue.counts(),
    };
  }
}
