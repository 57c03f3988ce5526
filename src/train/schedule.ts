import type { RunningServer } from '@stepwise/core/server/server.js';
import type { AgentSpec, GymRunOptions, SampleResult } from '@stepwise/gym/runner.js';
import { scheduledRunner } from '@stepwise/gym/scheduled.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import { TASK_KINDS, type TaskKind, taskKind } from './tasks.js';

/*
 * `stepwise train --schedule`: each training round takes its groups from the pool's prompt scheduler
 * (docs/datapool.md#prompt-scheduler) over a task set registered once as the channel's prompts, and
 * the ledger that says what the rounds spent: every rollout, by task kind, and when the mean reward
 * on the learnable prompts reached the target (docs/trainers.md, "The scheduler").
 */

export const SCHEDULE_POLICIES = ['in_order', 'uniform', 'difficulty'] as const;
export type SchedulePolicy = (typeof SCHEDULE_POLICIES)[number];

/** The task set the train run's prompts are registered under (another producer's are never claimed). */
export const TRAIN_TASK_SET = 'stepwise-train';

/**
 * The difficulty pools for 0/1 rewards: a rollout passes at 1; a group that all passed is too easy,
 * one that none did too hard. Retired prompts are tried again 2 versions on: a learnable prompt whose
 * group failed by chance (about 4 in 10 at the warmed-up policy's 1-in-8) is not lost for long, and
 * an easy or hard one costs one group per 2 versions.
 */
export const DIFFICULTY_SCHEDULE = {
  pass_threshold: 0.5,
  easy_at_least: 1,
  hard_at_most: 0,
  retest_every: 2,
};

/** Learnable rollouts the target is read over: a round's worth at the default 8 groups × 8. */
export const LEARNABLE_WINDOW = 64;

type Pool = RunningServer['pool'];

/** Registers `tasks` as the channel's prompts and sets its schedule (and curation) policy. */
export async function configureSchedule(
  pool: Pool,
  channel: string,
  c: { policy: SchedulePolicy; tasks: readonly GymTask[]; rollouts: number; zeroVariance: 'keep' | 'drop' },
): Promise<void> {
  await pool.registerPrompts(
    channel,
    c.tasks.map((t) => ({ taskId: t.id, taskSet: TRAIN_TASK_SET })),
  );
  await pool.configureChannel(channel, {
    schedule: { policy: c.policy, n_rollouts: c.rollouts, ...DIFFICULTY_SCHEDULE },
    curation: { zero_variance: c.zeroVariance },
  });
}

/**
 * One round: up to `groups` groups of the prompts the scheduler hands out. `idle`: it stopped short,
 * the scheduler having nothing free while none of its groups ran (every prompt retired).
 */
export async function scheduledRound(
  options: Omit<GymRunOptions, 'samples'> & { groups: number; agent: AgentSpec },
): Promise<{ results: SampleResult[]; idle: boolean }> {
  let idle = false;
  const run = scheduledRunner({
    groups: options.groups,
    taskSet: TRAIN_TASK_SET,
    onIdle: () => {
      idle = true;
    },
  });
  // The group size is the channel's schedule.n_rollouts (configureSchedule); `samples` is unused.
  const { results } = await run({ ...options, samples: 1 });
  return { results, idle };
}

/**
 * Whether the trainer is stuck short of a batch: fewer ready groups than a batch, none collecting and
 * no lease in progress. With the scheduler handing out nothing meanwhile, no version (and so no
 * re-test of a retired prompt) can come.
 */
export async function starved(pool: Pool, channel: string, batchGroups: number): Promise<boolean> {
  const s = await pool.stats(channel);
  return (
    s.groups.ready < batchGroups &&
    s.groups.collecting === 0 &&
    s.groups.pending_guidance === 0 &&
    s.activeLeases === 0
  );
}

export interface Crossing {
  /** Rollouts of every kind generated up to the one that brought the window to the target. */
  rollouts: number;
  learnableRollouts: number;
  mean: number;
}

/**
 * Every rollout the train rounds generated, in the order they finished: counts by kind, groups, and
 * the mean reward of the last LEARNABLE_WINDOW learnable rollouts, with the first point it reached
 * the target. A fixed window (not a round's) reads both schedulers over as many learnable rollouts.
 */
export class RolloutLedger {
  rollouts = 0;
  readonly byKind: Record<TaskKind, number> = { easy: 0, learnable: 0, hard: 0 };
  /** Scores of each group's complete rollouts, by group id; the kind of each group. */
  readonly groups = new Map<string, { kind: TaskKind | null; scores: number[] }>();
  crossing: Crossing | null = null;
  best: number | null = null;
  private readonly window: number[] = [];

  constructor(
    readonly target: number | null,
    readonly windowSize = LEARNABLE_WINDOW,
  ) {}

  /** A round's results, in the order they finished; `tasks`: those the round ran (their kinds). */
  add(results: readonly SampleResult[], tasks: readonly GymTask[]): void {
    const kinds = new Map(tasks.map((t) => [t.id, taskKind(t)]));
    for (const r of results) {
      const kind = kinds.get(r.taskId) ?? null;
      this.rollouts++;
      if (kind) this.byKind[kind]++;
      const group = this.groups.get(r.groupId) ?? { kind, scores: [] };
      this.groups.set(r.groupId, group);
      // Infrastructure failures cost a rollout but carry no reward (they are masked from training).
      if (r.status !== 'complete') continue;
      group.scores.push(r.score);
      if (kind === 'learnable') this.learnable(r.score);
    }
  }

  /** The mean of the last `windowSize` learnable rollouts; null until there are that many. */
  windowMean(): number | null {
    if (this.window.length < this.windowSize) return null;
    return this.window.reduce((a, b) => a + b, 0) / this.window.length;
  }

  private learnable(score: number): void {
    this.window.push(score);
    if (this.window.length > this.windowSize) this.window.shift();
    const mean = this.windowMean();
    if (mean === null) return;
    this.best = Math.max(this.best ?? 0, mean);
    if (this.crossing === null && this.target !== null && mean >= this.target)
      this.crossing = { rollouts: this.rollouts, learnableRollouts: this.byKind.learnable, mean };
  }
}

export interface ScheduleReport {
  policy: SchedulePolicy | 'walk';
  target: number | null;
  window: number;
  /** Every rollout generated (dropped groups' included), and by kind. */
  rollouts: number;
  rollouts_by_kind: Record<TaskKind, number>;
  groups: number;
  groups_by_kind: Record<TaskKind, number>;
  reached: boolean;
  rollouts_to_target: number | null;
  learnable_rollouts_to_target: number | null;
  window_mean_at_target: number | null;
  best_window_mean: number | null;
  /** The pool's curation: zero-variance drops over the groups that reached a lease (kept or dropped). */
  zero_variance: { dropped: number; reached_lease: number; fraction: number | null };
  /** The same over every group generated, from its rewards (groups never leased included). */
  generated_zero_variance: { groups: number; of: number; fraction: number | null };
  /** Groups of each kind handed out, from the pool's prompt history. */
  handed_by_kind: Record<TaskKind, number>;
}

/** What a scheduled run spent and reached: the ledger's figures beside the pool's own counts. */
export async function scheduleReport(
  pool: Pool,
  channel: string,
  c: { policy: SchedulePolicy | 'walk'; ledger: RolloutLedger; tasks: readonly GymTask[] },
): Promise<ScheduleReport> {
  const { ledger } = c;
  const stats = await pool.stats(channel);
  const dropped = stats.dropped.zero_variance ?? 0;
  const reachedLease =
    stats.leased.groups + dropped + (stats.dropped.too_few_after_curation ?? 0) + (stats.dropped.stale ?? 0);
  const groups = [...ledger.groups.values()];
  const flat = groups.filter((g) => g.scores.length > 0 && g.scores.every((s) => s === g.scores[0]));
  const scored = groups.filter((g) => g.scores.length > 0).length;
  const kinds = new Map(c.tasks.map((t) => [t.id, taskKind(t)]));
  const handed = zeroByKind();
  for (const p of await pool.listPrompts(channel)) {
    const kind = kinds.get(p.taskId);
    if (kind) handed[kind] += p.handed;
  }
  const groupsByKind = zeroByKind();
  for (const g of groups) if (g.kind) groupsByKind[g.kind]++;
  return {
    policy: c.policy,
    target: ledger.target,
    window: ledger.windowSize,
    rollouts: ledger.rollouts,
    rollouts_by_kind: { ...ledger.byKind },
    groups: groups.length,
    groups_by_kind: groupsByKind,
    reached: ledger.crossing !== null,
    rollouts_to_target: ledger.crossing?.rollouts ?? null,
    learnable_rollouts_to_target: ledger.crossing?.learnableRollouts ?? null,
    window_mean_at_target: ledger.crossing?.mean ?? null,
    best_window_mean: ledger.best,
    zero_variance: {
      dropped,
      reached_lease: reachedLease,
      fraction: reachedLease ? dropped / reachedLease : null,
    },
    generated_zero_variance: {
      groups: flat.length,
      of: scored,
      fraction: scored ? flat.length / scored : null,
    },
    handed_by_kind: handed,
  };
}

function zeroByKind(): Record<TaskKind, number> {
  return Object.fromEntries(TASK_KINDS.map((k) => [k, 0])) as Record<TaskKind, number>;
}
