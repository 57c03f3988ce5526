import type { RunningServer } from '@stepwise/core/server/server.js';
import type { SampleResult } from '@stepwise/gym/runner.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import type { RolloutLedger, SchedulePolicy, ScheduleReport } from './schedule.js';
import type { TrainerUpdate } from './trainer-events.js';

// The vocabulary of `stepwise train` (loop.ts runs it, outputs.ts writes what it leaves).

export interface TrainOptions {
  /** Where the stores, the SFT export, the manifest and the curve go. */
  out: string;
  /** The run's store (`--db`): a new SQLite file or an empty PostgreSQL schema; default `<out>/train.db`. */
  db?: string;
  /** With a PostgreSQL `db`: the schema of its tables. */
  pgSchema?: string;
  seed: number;
  /** Policy versions to train (one leased batch each): the most, when `targetReward` stops sooner. */
  versions: number;
  /**
   * Stop once a round's mean reward reaches this: the trainer's update of that round's batch is the
   * final policy (the eval round still runs on it). Unset: all `versions` are trained.
   */
  targetReward?: number;
  /** Tasks (groups) per round (default `DEFAULT_GROUPS`). */
  groups?: number;
  /** Samples per task: the group size. */
  rollouts: number;
  /** SFT steps of the warm-up (0: none). */
  warmupSteps: number;
  /**
   * Start from this model folder (e.g. an earlier run's `OUT/warmup`) instead of the preset and a
   * warm-up: a control run, or RL with other settings, from the same starting policy.
   */
  init?: string;
  warmupLr: number;
  lr: number;
  /** AdamW's eps for the RL updates (the trainer library's `adam_eps`; default 1e-5). */
  adamEps?: number;
  /** PPO clip range ε of the RL loss (default `DEFAULT_CLIP`). */
  clip?: number;
  /** Optimizer steps per batch. */
  epochs: number;
  maxStaleness: number;
  /** Samples run at once (the engine generates one at a time; tools and verifiers overlap). */
  concurrency: number;
  /** false: the same loop with no optimizer step (the control run). */
  update: boolean;
  /**
   * Fully asynchronous: rounds never wait for a version (the channel's admission control bounds
   * their lead) and each update switches the engines in flight through the gateway, running
   * generations cut and continued (`abort`: partial rollouts) or frozen (`keep`). Unset: rounds
   * wait for the version `maxStaleness` behind them and updates drain (docs/trainers.md).
   */
  async?: 'abort' | 'keep';
  /**
   * Take each round's groups from the pool's prompt scheduler under this policy, over a task set
   * registered once as the channel's prompts. Unset: each round walks a list (fresh copy tasks, or
   * the mixed set in order), as before the scheduler.
   */
  schedule?: SchedulePolicy;
  /**
   * `copy` (default): the copy task. `mixed`: easy, learnable and hard tasks (tasks.ts), and
   * `targetReward` is read on the learnable ones (the mean of their last LEARNABLE_WINDOW rollouts).
   */
  tasks?: 'copy' | 'mixed';
  /** Tasks of each kind in the set a scheduled or mixed run registers (default DEFAULT_PROMPTS_PER_KIND). */
  promptsPerKind?: number;
  /** `drop`: curation drops all-equal groups at lease time (no GRPO signal); default `keep`. */
  zeroVariance?: 'keep' | 'drop';
  /** Stop once the training rounds have generated this many rollouts (a run that may never reach its target). */
  maxRollouts?: number;
  port?: number;
  /** The Python with the `train` extra (default: `requireTrainPython()`). */
  python?: string;
  print: (line: string) => void;
  signal?: AbortSignal;
}

export interface VersionReward {
  version: number;
  rollouts: number;
  meanReward: number;
}

export interface TrainResult {
  out: string;
  /** Mean reward per policy version that generated rollouts, oldest first. */
  rewardByVersion: VersionReward[];
  updates: TrainerUpdate[];
  /** Groups dropped as stale by the pool, from its stats. */
  staleDropped: number;
  /** What the training rounds spent and reached, by task kind (null for the copy task's walk). */
  schedule: ScheduleReport | null;
  /** Mean reward by version over the learnable tasks of the training rounds (mixed runs; else null). */
  learnableByVersion: VersionReward[] | null;
  /** Why the rounds stopped before the trainer's last version (target, rollout cap, nothing to hand out). */
  stopped: string | null;
  /** The eval round's mean reward: the final policy on fresh copy tasks. */
  evalMean: number;
  seconds: number;
}

/** What the rounds of rollouts share: the run's options, its server, and the samples so far. */
export interface Rounds {
  o: TrainOptions;
  serverUrl: string;
  pool: RunningServer['pool'];
  out: string;
  groups: number;
  unsafeNoSandbox: boolean;
  say: (line: string) => void;
  samples: { result: SampleResult; round: number; channel: string }[];
  /** The registered task set (scheduled or mixed runs), else null: fresh copy tasks each round. */
  fixed: GymTask[] | null;
  /** Training groups made so far. */
  made: number;
  /** The last scheduled round stopped short: the scheduler had nothing to hand out. */
  idle: boolean;
  ledger: RolloutLedger;
}
