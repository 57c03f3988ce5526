import type { ExclusionReason } from '../domain/index.js';
import {
  currentSignals,
  type DropReason,
  type Group,
  type GroupState,
  type Label,
  type LabelInput,
  type Lease,
  type LeaseState,
  type Signal,
  type Trajectory,
  type TrajectoryStatus,
} from '../domain/index.js';
import type { StepTail } from './step-codec.js';
import type { CurrentLabel, DashboardSummary, GymRunSummary, PoolStats, RewardTally } from './types.js';

// Rows as every SQL backend stores them, and the pure logic both backends share around them.

export interface GroupRow {
  channel: string;
  id: string;
  expected: number | null;
  n_trajectories: number;
  n_finished: number;
  n_complete: number;
  state: GroupState;
  drop_reason: DropReason | null;
  partial: number;
  min_policy_version: number | null;
  created_at: number;
  ready_at: number | null;
  ready_seq: number | null;
  lease_id: string | null;
  /** The policy version in force when the group was last leased. */
  leased_version: number | null;
  consumed_at: number | null;
  guidance_hold: number | null;
  pending_since: number | null;
}

export interface TrajectoryRow {
  seq: number;
  id: string;
  channel: string;
  group_id: string;
  task_id: string | null;
  status: TrajectoryStatus;
  reward: number | null;
  metadata: string;
  n_steps: number;
  max_index: number | null;
  last_index: number | null;
  prefix_breaks: number;
  min_policy_version: number | null;
  created_at: number;
  touched_at: number;
  completed_at: number | null;
  guided: number;
  guidance_k: number | null;
  probe: number;
  derived_from: string | null;
  derivation: string | null;
}

export interface LeaseRow {
  id: string;
  channel: string;
  consumer: string;
  state: LeaseState;
  group_ids: string;
  n_steps: number;
  created_at: number;
  expires_at: number;
  ended_at: number | null;
}

export interface LabelRow {
  id: number;
  trajectory_id: string;
  step_index: number | null;
  quality: Label['quality'];
  trainable: number | null;
  tags: string | null;
  note: string | null;
  author: string | null;
  created_at: number;
}

export interface LabelCurrentRow {
  trajectory_id: string;
  step_index: number;
  quality: Label['quality'];
  trainable: number | null;
  tags: string;
  note: string | null;
  updated_at: number;
}

export interface SignalRow {
  id: number;
  trajectory_id: string;
  step_index: number | null;
  name: string;
  value: number;
  source: Signal['source'];
  version: string;
  details: string | null;
  created_at: number;
}

/** stats().curation from the curation counters. */
export function curationTallies(get: (name: string) => number): PoolStats['curation'] {
  const tally = (kinds: readonly ('kept' | 'dropped')[]): RewardTally => {
    const sum = (what: string) => kinds.reduce((n, k) => n + get(`curation_${k}_${what}`), 0);
    const rewarded = sum('rewarded');
    return {
      groups: sum('groups'),
      trajectories: sum('trajectories'),
      meanReward: rewarded === 0 ? null : sum('reward_sum') / rewarded,
    };
  };
  return { kept: tally(['kept']), dropped: tally(['dropped']), all: tally(['kept', 'dropped']) };
}

/** Counters and events gathered during one transaction, written before it commits. */
export class TxLog {
  readonly counters = new Map<string, number>();
  readonly tails = new Map<string, StepTail>();
  readonly forgetTails = new Set<string>();
  /** steps stored per channel and trajectory, logged as one event per channel per commit */
  readonly submitted = new Map<string, Map<string, { group_id: string; count: number; created: boolean }>>();
  submittedAt = 0;

  /** A savepoint's log reads step tails through to its transaction's. */
  constructor(readonly parent?: TxLog) {}

  /** The newest step tail this transaction (or the one around its savepoint) wrote for a trajectory. */
  tail(trajectoryId: string): StepTail | undefined {
    return this.tails.get(trajectoryId) ?? this.parent?.tail(trajectoryId);
  }

  count(channel: string, name: string, delta = 1): void {
    const key = `${channel}\u0000${name}`;
    this.counters.set(key, (this.counters.get(key) ?? 0) + delta);
  }

  noteSubmitted(
    channel: string,
    trajectoryId: string,
    groupId: string,
    count: number,
    now: number,
    created = false,
  ): void {
    this.submittedAt = Math.max(this.submittedAt, now);
    let byTrajectory = this.submitted.get(channel);
    if (!byTrajectory) {
      byTrajectory = new Map();
      this.submitted.set(channel, byTrajectory);
    }
    const entry = byTrajectory.get(trajectoryId);
    if (entry) {
      entry.count += count;
      entry.created ||= created;
    } else byTrajectory.set(trajectoryId, { group_id: groupId, count, created });
  }

  absorb(other: TxLog): void {
    for (const [key, value] of other.counters) this.counters.set(key, (this.counters.get(key) ?? 0) + value);
    for (const [key, value] of other.tails) this.tails.set(key, value);
    for (const [channel, byTrajectory] of other.submitted) {
      for (const [id, entry] of byTrajectory)
        this.noteSubmitted(channel, id, entry.group_id, entry.count, other.submittedAt, entry.created);
    }
    for (const key of other.forgetTails) {
      this.forgetTails.add(key);
      this.tails.delete(key);
    }
  }
}

export const TRAJECTORY_LABEL = -1;

/** A `labels` row's values after its id, in column order (trajectory_id ... created_at). */
export function labelValues(
  trajectoryId: string,
  stepIndex: number | null,
  input: LabelInput,
  now: number,
): unknown[] {
  return [
    trajectoryId,
    stepIndex,
    input.quality ?? null,
    input.trainable == null ? null : input.trainable ? 1 : 0,
    input.tags ? JSON.stringify(input.tags) : null,
    input.note ?? null,
    input.author ?? null,
    now,
  ];
}

export function toGroup(row: GroupRow): Group {
  return {
    id: row.id,
    channel: row.channel,
    expected: row.expected,
    nTrajectories: row.n_trajectories,
    nFinished: row.n_finished,
    nComplete: row.n_complete,
    state: row.state,
    dropReason: row.drop_reason,
    partial: row.partial === 1,
    minPolicyVersion: row.min_policy_version,
    createdAt: row.created_at,
    readyAt: row.ready_at,
    leaseId: row.lease_id,
    consumedAt: row.consumed_at,
    guidanceHold: row.guidance_hold ?? null,
    pendingSince: row.pending_since ?? null,
  };
}

/** A trajectory row as a compact read returns it (list-queries.ts's compactColumns): metadata may be NULL. */
export type CompactTrajectoryRow = Omit<TrajectoryRow, 'metadata'> & {
  metadata: string | null;
  metadata_bytes?: number;
};

export function toTrajectory(row: TrajectoryRow | CompactTrajectoryRow): Trajectory {
  // A compact read (list-queries.ts's compactColumns) leaves big metadata unread: its size says so.
  const omitted =
    row.metadata === null
      ? { omittedMetadataBytes: Number((row as CompactTrajectoryRow).metadata_bytes) }
      : {};
  return {
    ...omitted,
    id: row.id,
    groupId: row.group_id,
    channel: row.channel,
    taskId: row.task_id,
    status: row.status,
    reward: row.reward,
    metadata: row.metadata === null ? {} : JSON.parse(row.metadata),
    nSteps: row.n_steps,
    lastIndex: row.last_index,
    prefixBreaks: row.prefix_breaks,
    createdAt: row.created_at,
    completedAt: row.completed_at,
    guided: row.guided === 1,
    guidanceK: row.guidance_k,
    probe: row.probe === 1,
    derivedFrom: row.derived_from,
    derivation: row.derivation ? JSON.parse(row.derivation) : null,
  };
}

export function toLease(row: LeaseRow): Lease {
  return {
    id: row.id,
    channel: row.channel,
    consumer: row.consumer,
    groupIds: JSON.parse(row.group_ids),
    nSteps: row.n_steps,
    state: row.state,
    createdAt: row.created_at,
    expiresAt: row.expires_at,
    endedAt: row.ended_at,
  };
}

export function toLabel(row: LabelRow): Label {
  return {
    id: row.id,
    trajectoryId: row.trajectory_id,
    stepIndex: row.step_index,
    quality: row.quality,
    trainable: row.trainable === null ? null : row.trainable === 1,
    tags: row.tags ? JSON.parse(row.tags) : [],
    note: row.note,
    author: row.author,
    createdAt: row.created_at,
  };
}

export function toCurrentLabel(row: LabelCurrentRow): CurrentLabel {
  return {
    trajectoryId: row.trajectory_id,
    stepIndex: row.step_index === TRAJECTORY_LABEL ? null : row.step_index,
    quality: row.quality,
    trainable: row.trainable === null ? null : row.trainable === 1,
    tags: JSON.parse(row.tags),
    note: row.note,
  };
}

export function toSignal(row: SignalRow): Signal {
  return {
    trajectoryId: row.trajectory_id,
    stepIndex: row.step_index,
    name: row.name,
    value: row.value,
    source: row.source,
    version: row.version,
    details: row.details ? JSON.parse(row.details) : {},
    createdAt: row.created_at,
  };
}

export function stalenessBucket(staleness: number): string {
  if (staleness <= 3) return String(staleness);
  if (staleness <= 7) return '4-7';
  if (staleness <= 15) return '8-15';
  return '16+';
}
/** Signal rows of many trajectories (ordered by trajectory, then time) folded to those in force. */
export function currentSignalsByTrajectory(rows: readonly SignalRow[]): Map<string, Signal[]> {
  const byTrajectory = new Map<string, Signal[]>();
  for (const row of rows) {
    const list = byTrajectory.get(row.trajectory_id);
    if (list) list.push(toSignal(row));
    else byTrajectory.set(row.trajectory_id, [toSignal(row)]);
  }
  for (const [id, history] of byTrajectory) byTrajectory.set(id, currentSignals(history));
  return byTrajectory;
}

/** The dashboard summary from its reward range, filled histogram and group outcome counts. */
export function dashboardSummaryOf(
  range: { lo: number | null; hi: number | null },
  bins: DashboardSummary['rewards']['bins'],
  outcome: Record<string, number | null>,
): DashboardSummary {
  return {
    rewards: { min: range.lo, max: range.hi, bins },
    outcomes: {
      allZero: Number(outcome.all_zero ?? 0),
      allOne: Number(outcome.all_one ?? 0),
      mixed: Number(outcome.mixed ?? 0),
      unscored: Number(outcome.unscored ?? 0),
    },
  };
}

/** Equal-width bins over [lo, hi] (one bin when all rewards are equal). */
export function rewardBins(lo: number, hi: number, bins: number): DashboardSummary['rewards']['bins'] {
  const width = hi > lo ? (hi - lo) / bins : 1;
  const n = hi > lo ? bins : 1;
  const out: DashboardSummary['rewards']['bins'] = [];
  for (let i = 0; i < n; i++) out.push({ from: lo + i * width, to: lo + (i + 1) * width, count: 0 });
  return out;
}

/** One (run, channel, category, task) aggregate of gym trajectories, as the backends query it. */
export interface GymTaskRow {
  run: string;
  channel: string;
  category: string;
  task: string;
  samples: number;
  infra: number;
  scored: number;
  score_sum: number;
  passed: number;
  started: number;
  finished: number | null;
  open: number;
}

/** Gym runs from per-task aggregates, newest first. */
export function summarizeGymRuns(rows: readonly GymTaskRow[], limit: number): GymRunSummary[] {
  const runs = new Map<
    string,
    {
      summary: GymRunSummary;
      scored: number;
      sum: number;
      passed: number;
      tasksPassed: number;
      open: number;
      cats: Map<string, { tasks: number; samples: number; scored: number; sum: number }>;
    }
  >();
  for (const r of rows) {
    const key = `${r.run}\u0000${r.channel}`;
    let run = runs.get(key);
    if (!run) {
      run = {
        summary: {
          runId: String(r.run),
          channel: r.channel,
          startedAt: r.started,
          finishedAt: r.finished,
          tasks: 0,
          samples: 0,
          infraFailed: 0,
          meanScore: null,
          passAtK: null,
          passAt1: null,
          categories: [],
        },
        scored: 0,
        sum: 0,
        passed: 0,
        tasksPassed: 0,
        open: 0,
        cats: new Map(),
      };
      runs.set(key, run);
    }
    const s = run.summary;
    s.startedAt = Math.min(s.startedAt, r.started);
    s.finishedAt = Math.max(s.finishedAt ?? 0, r.finished ?? 0) || null;
    s.tasks++;
    s.samples += r.samples;
    s.infraFailed += r.infra;
    run.scored += r.scored;
    run.sum += r.score_sum;
    run.passed += r.passed;
    run.open += r.open;
    if (r.passed > 0) run.tasksPassed++;
    const cat = run.cats.get(r.category) ?? { tasks: 0, samples: 0, scored: 0, sum: 0 };
    cat.tasks++;
    cat.samples += r.samples;
    cat.scored += r.scored;
    cat.sum += r.score_sum;
    run.cats.set(r.category, cat);
  }
  const out = [...runs.values()].map((run) => {
    const s = run.summary;
    if (run.open > 0) s.finishedAt = null;
    s.meanScore = run.scored === 0 ? null : run.sum / run.scored;
    s.passAt1 = run.scored === 0 ? null : run.passed / run.scored;
    s.passAtK = s.tasks === 0 ? null : run.tasksPassed / s.tasks;
    s.categories = [...run.cats.entries()]
      .sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))
      .map(([category, c]) => ({
        category: category || 'uncategorized',
        tasks: c.tasks,
        samples: c.samples,
        meanScore: c.scored === 0 ? null : c.sum / c.scored,
      }));
    return s;
  });
  return out.sort((a, b) => b.startedAt - a.startedAt).slice(0, limit);
}

/** What stats() reads from a backend; the rest is arithmetic both share. */
export interface StatsParts {
  counters: { name: string; value: number }[];
  groupStates: { state: GroupState; n: number }[];
  activeLeases: number;
  awaitingSignals: number;
  policyVersion: number;
  /** Ready groups by their oldest step's policy version. */
  readyVersions: { v: number | null; n: number }[];
  lastEventSeq: number;
}

export function assembleStats(channel: string | null, parts: StatsParts): PoolStats {
  const c = new Map(parts.counters.map((r) => [r.name, r.value]));
  const get = (name: string) => c.get(name) ?? 0;
  const groups = { collecting: 0, pending_guidance: 0, ready: 0, leased: 0, consumed: 0, dropped: 0 };
  for (const r of parts.groupStates) groups[r.state] = r.n;
  const stalenessHistogram: Record<string, number> = {};
  for (const r of parts.readyVersions) {
    const bucket = stalenessBucket(Math.max(0, parts.policyVersion - (r.v ?? parts.policyVersion)));
    stalenessHistogram[bucket] = (stalenessHistogram[bucket] ?? 0) + r.n;
  }
  const dropped: PoolStats['dropped'] = {};
  const excluded: PoolStats['excluded'] = {};
  for (const [name, value] of c) {
    if (name.startsWith('dropped_')) dropped[name.slice('dropped_'.length) as DropReason] = value;
    if (name.startsWith('excluded_')) excluded[name.slice('excluded_'.length) as ExclusionReason] = value;
  }
  return {
    channel,
    policyVersion: parts.policyVersion,
    produced: { steps: get('steps_produced'), trajectories: get('trajectories_created') },
    completed: {
      trajectories: get('trajectories_complete'),
      aborted: get('trajectories_aborted'),
      idleAborted: get('trajectories_idle_aborted'),
      infraFailed: get('trajectories_infra_failed'),
    },
    failedCalls: {
      aborted: get('calls_aborted'),
      upstreamError: get('calls_upstream_error'),
      captureFailed: get('calls_capture_failed'),
    },
    consumed: { groups: get('groups_consumed'), steps: get('steps_consumed') },
    leased: { batches: get('batches_leased'), groups: get('groups_leased') },
    dropped,
    excluded,
    duplicateSteps: get('duplicate_steps'),
    prefixBreaks: get('prefix_breaks'),
    lateTrajectories: get('late_trajectories'),
    queueDepth: groups.ready,
    groups,
    activeLeases: parts.activeLeases,
    awaitingSignals: parts.awaitingSignals,
    curation: curationTallies(get),
    stalenessHistogram,
    lastEventSeq: parts.lastEventSeq,
  };
}

/** The stored copy of a step a retry must match. */
export interface PriorStep {
  content_hash: number;
  prompt_len: number;
  response_len: number;
  is_last: number;
  reward: number | null;
}
