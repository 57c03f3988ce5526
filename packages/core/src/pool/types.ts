import type { DropReason, ExclusionReason, Group, Lease, Signal, Step, Trajectory } from '../domain/index.js';
import type { CurrentLabel } from '../store/store.js';

// The pool's vocabulary: what a lease asks for and serves, what a sweep did. Serving and the SDK read
// these; the stores never produce them (the rules in this folder do).

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
  /** When the trainer asked (a long-poll's first try): the batch's fill time is logged from it. */
  askedAt?: number;
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

/** One group as the next lease would see it (a read-only rehearsal: nothing is leased or dropped). */
export interface PreviewGroup {
  group: Group;
  staleness: number;
  /**
   * `serve`, why the lease would drop it (and take the next group instead), or `awaiting_pin`: a
   * rollout lacks the channel's pinned score, so the lease passes it by and it stays ready.
   */
  decision: 'serve' | DropReason | 'awaiting_pin';
  /** Trajectories it would be served with, and how many of their steps are trainable. */
  served: { trajectory: Trajectory; steps: number; trainableSteps: number }[];
  excluded: { trajectoryId: string; reason: ExclusionReason; reward: number | null }[];
}

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

/** Where a prompt stands for the `difficulty` schedule (pool/schedule.ts#poolOf). */
export type PromptPool = 'unseen' | 'learnable' | 'easy' | 'hard' | 'retest';

/** A prompt handed to a producer: roll it out `nRollouts` times, as one group. */
export interface NextPrompt {
  taskId: string;
  taskSet: string;
  nRollouts: number;
  pool: PromptPool;
}

/** A prompt of a channel with its history (GET /v1/channels/{name}/prompts). */
export interface PromptView {
  taskId: string;
  taskSet: string;
  position: number;
  pool: PromptPool;
  inFlight: boolean;
  handed: number;
  groups: number;
  attempts: number;
  passes: number;
  lastPassRate: number | null;
  lastMean: number | null;
  lastStd: number | null;
  lastVersion: number | null;
}
