// The data the store reads and writes, as the pool and its callers see it.
import type {
  DropReason,
  EventType,
  ExclusionReason,
  Group,
  Label,
  Lease,
  NewStep,
  Signal,
  Step,
  StepwiseError,
  ToolResult,
  Trajectory,
  TrajectoryStatus,
} from '../domain/index.js';

/** Tool outputs seen in a later request, for the stored step whose tool calls they answer. */
export interface ToolResultAttachment {
  trajectoryId: string;
  index: number;
  results: ToolResult[];
}

/** One caller's submission; many are committed together in one transaction (group commit). */
export interface SubmitRequest {
  channel: string;
  nRollouts: number | null;
  steps: NewStep[];
  /** Applied in the same transaction; an attachment for a step that is not stored is skipped. */
  toolResults?: ToolResultAttachment[];
}

/** An LLM call that produced no step: the agent went away mid-generation, or the engine failed. */
export interface CallFailure {
  channel: string;
  trajectoryId: string;
  groupId: string;
  kind: 'aborted' | 'upstream_error' | 'capture_failed';
  engineId: string | null;
  /** HTTP status the agent was answered with (upstream errors). */
  status: number | null;
  message: string;
  /** What had been generated when an aborted call ended. */
  partial: { promptTokens: number; responseIds: number[]; responseText: string } | null;
}

/** A request an agent made that a trust boundary refused (docs/security.md), kept as an event. */
export interface Refusal {
  channel: string | null;
  trajectoryId: string | null;
  /** Who refused it: the gateway's own rules, or the gym sandbox's bridge. */
  by: 'gateway' | 'bridge';
  /** `METHOD /path` as the agent sent them (the first ones, when there were many). */
  attempts: string[];
  /** How many were refused, listed or not. */
  count: number;
  reason: string;
}

export type SubmitOutcome =
  | { ok: true; inserted: number; duplicates: number; completed: string[] }
  | { ok: false; error: StepwiseError };

export interface CreateTrajectoryInput {
  id: string;
  groupId: string;
  channel: string;
  nRollouts: number | null;
  metadata: Record<string, unknown>;
  taskId?: string | null;
  guided?: boolean;
  guidanceK?: number | null;
  probe?: boolean;
  derivedFrom?: string | null;
  derivation?: Record<string, unknown> | null;
  /** ActGuide-RL: the group is held for guidance at this threshold (see Group.guidanceHold). */
  holdForGuidance?: number | null;
  /** Refuse (409 on `group_id`) when the group already exists: the caller may not join one. */
  newGroup?: boolean;
}

export interface CompleteInput {
  reward: number | null;
  status: Exclude<TrajectoryStatus, 'open'>;
}

export interface LeaseParams {
  channel: string;
  batchSize: number;
  nRollouts: number | null;
  /** Overrides the channel's max_staleness for this lease when given. */
  maxStaleness: number | null;
  consumer: string;
  ttlMs: number;
  /**
   * Time is left to wait: with admission control on, the lease waits for an open rollout that
   * this batch's update would make too stale (pool/lease.ts#straggling).
   */
  patient?: boolean;
}

/** The latest curation state of a step (stepIndex set) or a whole trajectory (stepIndex null). */
export interface CurrentLabel {
  trajectoryId: string;
  stepIndex: number | null;
  quality: Label['quality'];
  trainable: boolean | null;
  tags: string[];
  note: string | null;
}

export interface ServedTrajectory {
  trajectory: Trajectory;
  steps: Step[];
  labels: CurrentLabel[];
  /** The signals in force: the latest per (step, name, source), oldest first. */
  signals: Signal[];
}

export interface ServedGroup {
  group: Group;
  staleness: number;
  stale: boolean;
  trajectories: ServedTrajectory[];
  /** Trajectories the channel's curation left out of this group, with the reason (absent: none). */
  excluded?: {
    trajectoryId: string;
    reason: ExclusionReason;
    reward: number | null;
    detail?: Record<string, unknown>;
  }[];
}

/** A ready group the channel's curation dropped while this lease was filled (its place was refilled). */
export interface CurationDrop {
  groupId: string;
  reason: DropReason;
  /** Rewards of its complete rollouts, for metrics over kept and dropped data alike. */
  rewards: (number | null)[];
}

export interface LeasedBatch {
  lease: Lease;
  policyVersion: number;
  groups: ServedGroup[];
  /** Groups curation dropped while filling this lease (absent: none). */
  dropped?: CurationDrop[];
}

/** What the dashboard's overview shows beyond stats(): how rewards and group outcomes are spread. */
export interface DashboardSummary {
  /** Complete trajectories with a reward, binned over [min, max] (equal-width bins). */
  rewards: { min: number | null; max: number | null; bins: { from: number; to: number; count: number }[] };
  /** Settled groups (ready, leased, consumed) by outcome: every reward <= 0, every reward >= 1, or mixed. */
  outcomes: { allZero: number; allOne: number; mixed: number; unscored: number };
}

export interface LeaseQuery {
  channel?: string;
  limit: number;
  offset: number;
}

/** One group as the next lease would see it (a read-only rehearsal: nothing is leased or dropped). */
export interface PreviewGroup {
  group: Group;
  staleness: number;
  /** `serve`, or why the lease would drop it (and take the next group instead). */
  decision: 'serve' | DropReason;
  /** Trajectories it would be served with, and how many of their steps are trainable. */
  served: { trajectory: Trajectory; steps: number; trainableSteps: number }[];
  excluded: { trajectoryId: string; reason: ExclusionReason; reward: number | null }[];
}

/** Reward metrics over a set of trajectories (mean over those with a reward; null when none has). */
export interface RewardTally {
  groups: number;
  trajectories: number;
  meanReward: number | null;
}

export interface SignalQuery {
  /** Only the latest signal per (step, name, source). */
  current?: boolean;
}

export interface LabelFilter {
  trainable?: boolean;
  quality?: Label['quality'];
  tag?: string;
}

export interface StepQuery extends LabelFilter {
  channel?: string;
  trajectoryId?: string;
  groupId?: string;
  rewardMin?: number;
  rewardMax?: number;
  status?: TrajectoryStatus;
  limit: number;
  offset: number;
}

export interface TrajectoryQuery extends LabelFilter {
  channel?: string;
  groupId?: string;
  taskId?: string;
  rewardMin?: number;
  rewardMax?: number;
  status?: TrajectoryStatus;
  /** ActGuide: guided rollouts (true) or not (false). */
  guided?: boolean;
  probe?: boolean;
  /** Derived trajectories (CLEANER's purified ones and their copies) or originals. */
  derived?: boolean;
  /** Trajectories with a step generated by this policy version. */
  policyVersion?: number;
  /**
   * Metadata over this many bytes is not read (the trajectory says how big it is instead): list
   * views stay bounded whatever a row holds. Unset: read whole.
   */
  inlineMetadataBytes?: number;
  limit: number;
  offset: number;
}

/** How a single trajectory is read: `inlineMetadataBytes` as in TrajectoryQuery. */
export interface TrajectoryRead {
  inlineMetadataBytes?: number;
}

/** A gym run as its stored trajectories tell it (metadata `run_id`, `task_id`, `category`). */
export interface GymRunSummary {
  runId: string;
  channel: string;
  startedAt: number;
  finishedAt: number | null;
  tasks: number;
  samples: number;
  infraFailed: number;
  meanScore: number | null;
  /** Share of tasks with at least one sample scoring >= 1 (pass@k, k = samples per task). */
  passAtK: number | null;
  /** Share of scored samples (infrastructure failures left out) scoring >= 1 (pass@1). */
  passAt1: number | null;
  categories: { category: string; tasks: number; samples: number; meanScore: number | null }[];
}

export interface Page<T> {
  total: number;
  items: T[];
}

/** A keyset walk over trajectories in storage order (oldest first): stable while new ones arrive. */
export interface TrajectoryScan extends LabelFilter {
  channel?: string;
  groupId?: string;
  taskId?: string;
  rewardMin?: number;
  rewardMax?: number;
  status?: TrajectoryStatus;
  /** The cursor of the previous page; null starts at the beginning. */
  after: string | null;
  limit: number;
}

export interface ScanPage<T> {
  items: T[];
  /** Pass as `after` for the next page; null when this page was the last. */
  cursor: string | null;
}

/** Where a store keeps its data (exports record it as their source). */
export interface StoreInfo {
  kind: 'sqlite' | 'postgres';
  /** Absolute path of the database file; null for an in-memory or remote database. */
  path: string | null;
}

export interface EventQuery {
  after: number;
  limit: number;
  channel?: string;
  types?: EventType[];
}

export interface PoolStats {
  channel: string | null;
  policyVersion: number;
  produced: { steps: number; trajectories: number };
  completed: { trajectories: number; aborted: number; idleAborted: number; infraFailed: number };
  /** LLM calls through the gateway that produced no step. */
  /** `captureFailed`: the engine answered but the step could not be stored; the agent got an error. */
  failedCalls: { aborted: number; upstreamError: number; captureFailed: number };
  consumed: { groups: number; steps: number };
  leased: { batches: number; groups: number };
  dropped: Partial<Record<DropReason, number>>;
  /** Trajectories curation left out of served or dropped groups, by reason. */
  excluded: Partial<Record<ExclusionReason, number>>;
  duplicateSteps: number;
  prefixBreaks: number;
  lateTrajectories: number;
  queueDepth: number;
  groups: {
    collecting: number;
    pending_guidance: number;
    ready: number;
    leased: number;
    consumed: number;
    dropped: number;
  };
  activeLeases: number;
  /**
   * What curation did with the groups it saw, for metrics that do not only see what was kept
   * (dropping zero-variance groups hides exactly the all-solved and all-failed ones): trajectories
   * served, trajectories dropped (excluded ones and the members of dropped groups), and both.
   */
  curation: { kept: RewardTally; dropped: RewardTally; all: RewardTally };
  /** Collecting groups whose rollouts are all in, held back until their required signals are. */
  awaitingSignals: number;
  /** Ready groups by staleness (current policy version minus the group's oldest step version). */
  stalenessHistogram: Record<string, number>;
  lastEventSeq: number;
}

/**
 * What a change another process committed may mean to this one: `ready` (a group may be leasable),
 * `policy` (the policy version changed), `events` (only new events to read).
 */
export type StoreChange = 'ready' | 'policy' | 'events';

export interface GroupSweepResult {
  /** Open trajectories closed as aborted after their channel's idle timeout. */
  idleAborted: number;
  dropped: number;
  servedPartial: number;
  expiredLeases: number;
  /** Groups whose guidance hold timed out, released as they were. */
  guidanceReleased: number;
}

/** Why a group left `pending_guidance`. */
export type GuidanceRelease = 'replaced' | 'abandoned' | 'operator' | 'timeout';

export interface GroupQuery {
  channel?: string;
  state?: Group['state'];
  limit: number;
  offset: number;
}
