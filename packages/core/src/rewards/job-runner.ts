import { trainingSteps } from '../curation/cleaner/graft.js';
import { ConflictError, type SignalInput, type Trajectory } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { CombinationEvalError, evaluateCombination } from './combination.js';
import { type RewardFunction, type RewardsConfig, scoringFor } from './config.js';
import type { JobRequest, RewardJob } from './job-queue.js';
import type { RewardJobPlanner } from './job-requests.js';
import { jsonEqual } from './json-path.js';
import { NotApplicableError, RewardError, type RewardScore, type TrajectoryView } from './plugin.js';
import type { JobOutcome } from './workers.js';

// Running one reward job: a function's handler over its targets (signals written, combinations
// queued after it), or a combination (its signal and the trajectory's reward written back).

const MAX_RESULT_VALUES = 20;

export class RewardJobRunner {
  private readonly pool: DataPool;
  private readonly config: RewardsConfig;
  private readonly planner: RewardJobPlanner;

  constructor(pool: DataPool, config: RewardsConfig, planner: RewardJobPlanner) {
    this.pool = pool;
    this.config = config;
    this.planner = planner;
  }

  /** What reward functions read: the steps a trainer receives (an online CLEANER run's purified view). */
  private async view(t: Trajectory): Promise<TrajectoryView> {
    const [steps, signals] = await Promise.all([
      this.pool.getTrajectorySteps(t.id),
      this.pool.getSignals(t.id, { current: true }),
    ]);
    return { trajectory: t, steps: trainingSteps(t, steps), signals };
  }

  /** Runs one job: the JobRunner of the workers. */
  async runJob(job: RewardJob, signal: AbortSignal): Promise<JobOutcome> {
    return job.kind === 'combine' ? this.runCombine(job) : this.runFunction(job, signal);
  }

  private async runFunction(job: RewardJob, signal: AbortSignal): Promise<JobOutcome> {
    const fn = this.config.functions.get(job.function);
    if (!fn) throw new NotApplicableError(`reward function ${job.function} is not configured any more`);
    if (!fn.handler)
      throw new NotApplicableError(`reward function ${job.function} computes nothing (human feedback)`);
    let targets: Trajectory[];
    if (job.groupId !== null) {
      targets = [];
      for (let offset = 0; ; offset += 500) {
        const page = await this.pool.listTrajectories({
          channel: job.channel,
          groupId: job.groupId,
          status: 'complete',
          limit: 500,
          offset,
        });
        targets.push(...page.items);
        if (page.items.length < 500) break;
      }
      if (targets.length === 0)
        throw new NotApplicableError(`group ${job.groupId} has no complete trajectories`);
    } else {
      const t = await this.pool.getTrajectory(job.trajectoryId!);
      if (!t) throw new NotApplicableError(`trajectory ${job.trajectoryId} does not exist`);
      targets = [t];
    }
    const views = await Promise.all(targets.map((t) => this.view(t)));
    const scores = await fn.handler(views, { signal });
    if (signal.aborted) throw signal.reason;
    checkScores(fn, views, scores);
    const signals: SignalInput[] = scores.map((s) => ({
      trajectoryId: s.trajectoryId,
      stepIndex: s.stepIndex,
      name: fn.name,
      value: s.value,
      source: fn.plugin.source,
      version: fn.version,
      details: { ...(s.details ?? {}), plugin: fn.plugin.name, job: job.id },
    }));
    await this.pool.addSignals(signals);
    const followUps: JobRequest[] = [];
    for (const t of targets) {
      const scoring = scoringFor(this.config, t);
      if (scoring?.combination?.combination.names.includes(fn.name)) {
        followUps.push(...this.planner.combineJob(scoring, t, `after:${fn.name}`));
      }
    }
    return {
      result: {
        version: fn.version,
        signals: scores.length,
        values: scores.slice(0, MAX_RESULT_VALUES).map((s) => ({
          trajectory_uid: s.trajectoryId,
          step_index: s.stepIndex,
          value: s.value,
        })),
      },
      followUps,
    };
  }

  private async runCombine(job: RewardJob): Promise<JobOutcome> {
    const t = await this.pool.getTrajectory(job.trajectoryId!);
    if (!t) throw new NotApplicableError(`trajectory ${job.trajectoryId} does not exist`);
    const rule = scoringFor(this.config, t)?.combination;
    if (!rule) return { result: { skipped: 'no combination is configured for this trajectory' } };
    const signals = await this.pool.getSignals(t.id, { current: true });
    let evaluation: ReturnType<typeof evaluateCombination>;
    try {
      evaluation = evaluateCombination(rule.combination, signals);
    } catch (error) {
      if (error instanceof CombinationEvalError)
        throw new RewardError(error.message, false, 'combination_failed');
      throw error;
    }
    if (!evaluation.ok) return { result: { waiting: evaluation.missing } };
    const { value, inputs } = evaluation;
    const current = signals.find(
      (s) => s.stepIndex === null && s.name === rule.signal && s.source === rule.source,
    );
    const unchanged =
      current !== undefined &&
      current.value === value &&
      current.version === rule.version &&
      jsonEqual((current.details as { inputs?: unknown }).inputs, inputs);
    // The reward first: a group gated on this signal (required_signals) turns ready with it, and
    // must not be leased with the reward still unset.
    let rewardWritten: boolean | null = null;
    let rewardNote: string | null = null;
    if (rule.writeReward && t.status === 'complete') {
      if (t.reward === value) rewardWritten = true;
      else {
        try {
          await this.pool.completeTrajectory(t.id, { reward: value, status: 'complete' });
          rewardWritten = true;
        } catch (error) {
          if (!(error instanceof ConflictError)) throw error;
          // Its group was already handed to a trainer: the signal stays as the record.
          rewardWritten = false;
          rewardNote = error.message;
        }
      }
    }
    if (!unchanged) {
      await this.pool.addSignals([
        {
          trajectoryId: t.id,
          stepIndex: null,
          name: rule.signal,
          value,
          source: rule.source,
          version: rule.version,
          details: { expression: rule.combination.text, inputs, job: job.id },
        },
      ]);
    }
    return {
      result: {
        value,
        inputs,
        unchanged,
        reward_written: rewardWritten,
        ...(rewardNote ? { reward_note: rewardNote } : {}),
      },
    };
  }
}

/** A handler's answer must score exactly its targets, with finite values. */
function checkScores(fn: RewardFunction, views: TrajectoryView[], scores: RewardScore[]): void {
  const bad = (why: string) =>
    new RewardError(`plugin ${fn.plugin.name} answered badly: ${why}`, false, 'bad_plugin_answer');
  const byId = new Map(views.map((v) => [v.trajectory.id, v]));
  const seen = new Set<string>();
  for (const s of scores) {
    const view = byId.get(s.trajectoryId);
    if (!view) throw bad(`a score for trajectory ${s.trajectoryId}, which it was not given`);
    if (!Number.isFinite(s.value)) throw bad(`a non-finite score ${s.value}`);
    if (fn.plugin.target === 'step') {
      if (s.stepIndex === null || !view.steps.some((st) => st.index === s.stepIndex)) {
        throw bad(`a step score for step ${s.stepIndex} of ${s.trajectoryId}, which does not exist`);
      }
    } else if (s.stepIndex !== null) {
      throw bad('a step score from a trajectory-level function');
    }
    const key = `${s.trajectoryId}\u0000${s.stepIndex}`;
    if (seen.has(key)) throw bad(`two scores for ${key.replace('\u0000', ' step ')}`);
    seen.add(key);
  }
  if (fn.plugin.target !== 'step') {
    for (const v of views)
      if (!seen.has(`${v.trajectory.id}\u0000null`)) throw bad(`no score for ${v.trajectory.id}`);
  }
}
