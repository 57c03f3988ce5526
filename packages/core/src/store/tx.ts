import type { ChannelConfig, EventType, LabelInput, NewStep, Signal, Step } from '../domain/index.js';
import type { EvidenceTx } from './evidence.js';
import type { MismatchRow, StepOrigin, StepRef } from './mismatch.js';
import type { PromptTx } from './prompts.js';
import type {
  GroupRow,
  LabelCurrentRow,
  LabelRow,
  LeaseRow,
  PriorStep,
  TrajectoryRow,
  TxLog,
} from './rows.js';
import type { Rule } from './rule.js';
import type { CurrentLabel, ToolResultAttachment } from './types.js';

export { done, type Rule, runAsync, runSync } from './rule.js';

/** Fields of a trajectory row a rule may change (the primitive writes them and updates the row object). */
export type TrajectoryPatch = Partial<
  Pick<
    TrajectoryRow,
    | 'metadata'
    | 'touched_at'
    | 'group_id'
    | 'channel'
    | 'reward'
    | 'n_steps'
    | 'max_index'
    | 'last_index'
    | 'prefix_breaks'
    | 'min_policy_version'
  >
>;

/** How a new member joins its group: the size it declares, and the size a group it creates gets. */
export interface Join {
  nRollouts: number | null;
  size: number | null;
}

/** Fields of a group row a rule may change (the primitive writes them and updates the row object). */
export type GroupPatch = Partial<
  Pick<
    GroupRow,
    | 'state'
    | 'drop_reason'
    | 'partial'
    | 'ready_at'
    | 'ready_seq'
    | 'lease_id'
    | 'leased_version'
    | 'consumed_at'
    | 'guidance_hold'
    | 'pending_since'
    | 'expected'
  >
>;

/**
 * The row primitives the pool's rules run on, inside one transaction of a backend. They hold no
 * pool rule: what a group's state means, when it moves on, is decided in pool/.
 */
export interface PoolTx {
  /** Counters and step tails gathered by this transaction, written before it commits. */
  readonly log: TxLog;
  /** The prompt scheduler's rows (store/prompts.ts). */
  readonly prompts: PromptTx;
  /** Re-verification's evidence and pinned rewards (store/evidence.ts). */
  readonly evidence: EvidenceTx;
  emit(type: EventType, channel: string | null, data: Record<string, unknown>, now: number): void;

  /** A channel's settings (its row, else the defaults); read once per transaction. */
  channelConfig(channel: string): Rule<ChannelConfig>;
  /** Every channel with a row, by name. */
  channelNames(): Rule<string[]>;
  /** Creates the channel's row (with the defaults) if it has none. */
  ensureChannel(channel: string, now: number): Rule<void>;
  /** A channel's settings with its row created and locked (concurrent changes wait their turn). */
  lockChannel(channel: string, now: number): Rule<ChannelConfig>;
  saveChannelConfig(channel: string, config: ChannelConfig, now: number): Rule<void>;
  policyVersion(): Rule<number>;
  /** Sets the policy version; returns the one it replaces. */
  setPolicyVersion(version: number): Rule<number>;

  /** A group's row, locked for the rest of the transaction where the backend locks rows. */
  group(channel: string, id: string): Rule<GroupRow | undefined>;
  updateGroup(row: GroupRow, patch: GroupPatch): Rule<void>;
  /**
   * Joins a group as a new member (n_trajectories + 1; sized by `join.nRollouts` if it had no
   * size), creating it, collecting and sized `join.size`, if it does not exist.
   */
  joinGroup(
    channel: string,
    id: string,
    join: Join,
    now: number,
  ): Rule<{ group: GroupRow; created: boolean }>;
  deleteGroup(row: GroupRow): Rule<void>;
  /** The next position in the ready queue (the order leases take ready groups in). */
  nextReadySeq(): Rule<number>;
  /** Complete rollouts of the group lacking any of `names` as a trajectory-level, non-agent signal. */
  completeWithoutSignals(row: GroupRow, names: readonly string[]): Rule<number>;
  /** The group's counted complete rollouts with a reward above `threshold`. */
  completeAbove(row: GroupRow, threshold: number): Rule<number>;
  countReady(channel: string): Rule<number>;
  /**
   * Groups of the channel a trainer at `version` has yet to train on: collecting, held or ready, and
   * those leased or consumed under `version` or later (the batch of the update in progress).
   */
  groupsAhead(channel: string, version: number): Rule<number>;
  /** The oldest policy version of any step of the channel's open trajectories (null: none has a step). */
  oldestOpenVersion(channel: string): Rule<number | null>;
  /** Up to `limit` ready groups after queue position `after`, in queue order (others' locked rows skipped). */
  readyGroups(channel: string, after: number, limit: number): Rule<GroupRow[]>;
  /** The rollouts a group is served with: those that completed while it collected, in completion order. */
  groupMembers(row: GroupRow): Rule<TrajectoryRow[]>;
  /** The `n` oldest ready groups, skipping those another transaction is leasing right now. */
  oldestReady(channel: string, n: number): Rule<GroupRow[]>;
  /** Collecting groups: not yet sized (`unsized`), or sized with every rollout finished (`full`). */
  collecting(channel: string, which: 'unsized' | 'full'): Rule<GroupRow[]>;
  /** Collecting groups created before `before`, oldest first (rows others hold are skipped). */
  collectingSince(channel: string, before: number): Rule<GroupRow[]>;
  /** Groups waiting for guidance, longest-waiting first (rows others hold are skipped). */
  pendingGuidance(): Rule<GroupRow[]>;

  /** Savepoint: `rule` runs on a view of this transaction whose log joins this one only if it succeeds. */
  savepoint<T>(rule: (tx: PoolTx) => Rule<T>): Rule<T>;

  /** The trajectories that exist among `ids`, locked in one order (concurrent submissions never deadlock). */
  lockTrajectories(ids: readonly string[]): Rule<Map<string, TrajectoryRow>>;
  /** What identifies a stored step (a retry must match it), if there is one at `index`. */
  priorStep(row: TrajectoryRow, index: number): Rule<PriorStep | undefined>;
  /**
   * Encodes a new step against the trajectory's step below it and stores it (PostgreSQL: at the next
   * flush). Returns whether its prompt breaks the prefix of the step before.
   */
  appendStep(
    row: TrajectoryRow,
    step: NewStep,
    channel: string,
    policyVersion: number,
    now: number,
  ): Rule<boolean>;
  /** Writes the steps appended so far (a backend that batches them). */
  flushSteps(): Rule<void>;
  /** Sets a stored step's tool results (the outputs of its tool calls, seen in the next request). */
  attachToolResults(attachment: ToolResultAttachment): Rule<void>;

  /** A trajectory's row; locked for the rest of the transaction unless `lock` is false. */
  trajectory(id: string, lock?: boolean): Rule<TrajectoryRow | undefined>;
  stepExists(row: TrajectoryRow, index: number): Rule<boolean>;
  /** Inserts a trajectory row (setting its seq) and joins its group as joinGroup does. */
  insertTrajectory(row: TrajectoryRow, join: Join, now: number): Rule<{ group: GroupRow; created: boolean }>;
  updateTrajectory(row: TrajectoryRow, patch: TrajectoryPatch): Rule<void>;
  /** Open trajectories of a channel untouched since `before` (rows others hold are skipped). */
  idleTrajectories(channel: string, before: number): Rule<TrajectoryRow[]>;
  /** The sum of the trajectory's step rewards, null when no step has one. */
  stepRewardSum(row: TrajectoryRow): Rule<number | null>;
  /**
   * Writes a finished trajectory's row (status, reward, completed_at and its counts) and, when its
   * group still collects, counts it there (n_finished, n_complete, the group's oldest version when
   * `lowerVersion`) and marks it counted. Returns the collecting group's updated row, else undefined.
   */
  finishTrajectoryRow(row: TrajectoryRow, lowerVersion: boolean): Rule<GroupRow | undefined>;
  /** Lowers the group's oldest policy version to the trajectory's. */
  lowerGroupVersion(row: TrajectoryRow): Rule<void>;

  /** The trajectories' steps as captured, decoded, by trajectory id. */
  capturedSteps(rows: readonly TrajectoryRow[]): Rule<Map<string, Step[]>>;
  /** The labels in force on the trajectories, by trajectory id (none: absent). */
  currentLabels(ids: readonly string[]): Rule<Map<string, CurrentLabel[]>>;
  /** The signals in force on the trajectories, by trajectory id (none: absent). */
  currentSignals(ids: readonly string[]): Rule<Map<string, Signal[]>>;

  insertLabel(trajectoryId: string, stepIndex: number | null, input: LabelInput, now: number): Rule<LabelRow>;
  /** The label state in force for a trajectory (key TRAJECTORY_LABEL) or one of its steps. */
  currentLabel(trajectoryId: string, key: number): Rule<LabelCurrentRow | undefined>;
  /** Writes the label state in force; `tags`, when given, replace the target's tag index. */
  setCurrentLabel(row: LabelCurrentRow, tags: readonly string[] | undefined): Rule<void>;
  insertSignal(trajectoryId: string, signal: Omit<Signal, 'createdAt'>, now: number): Rule<void>;

  lease(id: string): Rule<LeaseRow | undefined>;
  insertLease(row: LeaseRow): Rule<void>;
  /** Active leases past their expiry (rows others hold are skipped). */
  overdueLeases(now: number): Rule<LeaseRow[]>;
  endLeaseRow(id: string, state: LeaseRow['state'], now: number): Rule<void>;
  /** Moves the lease's leased groups to `consumed` (ack) or back to `ready`; returns how many. */
  releaseLeasedGroups(leaseId: string, to: 'consumed' | 'ready', now: number): Rule<number>;

  /** Per step, in order: its trajectory's group and channel and the stored step's engine and version (undefined: no such trajectory). */
  stepOrigins(steps: readonly StepRef[]): Rule<(StepOrigin | undefined)[]>;
  /** Stores a lease's reported mismatch rows (replacing earlier ones of the same steps) and rebuilds its tallies. */
  saveMismatch(lease: LeaseRow, rows: readonly MismatchRow[], now: number): Rule<void>;
}
