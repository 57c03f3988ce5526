import { onlineCleaner, trainingSteps } from '../curation/cleaner/graft.js';
import { type CurationDecision, curateGroup, isNoop, needsSteps } from '../curation/pipeline.js';
import {
  type ChannelConfig,
  type ChannelCuration,
  isStepTrainable,
  type Lease,
  newLeaseId,
  type Step,
} from '../domain/index.js';
import {
  type GroupRow,
  type LeaseRow,
  type TrajectoryRow,
  toGroup,
  toLease,
  toTrajectory,
} from '../store/rows.js';
import type { CurrentLabel } from '../store/store.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { admissionLimit } from './admission.js';
import { adoptGroupSize, dropGroup, sweepCollecting } from './groups.js';
import { expireLeases } from './leases.js';
import type {
  CurationDrop,
  LeasedBatch,
  LeaseParams,
  PreviewGroup,
  ServedGroup,
  ServedTrajectory,
} from './types.js';

/** A ready group after curation: the members it is served with, what was left out, decoded steps. */
export interface Curated {
  members: TrajectoryRow[];
  excluded: CurationDecision['excluded'];
  /** The members' steps as captured (decoded once for the filters, reused to serve). */
  steps: Map<string, Step[]>;
  /** Rewards of the group's rollouts, excluded ones included. */
  rewards: Map<string, number | null>;
}

interface Pick {
  row: GroupRow;
  staleness: number;
  stale: boolean;
  members: TrajectoryRow[];
  curated: Curated | null;
}

/** What a lease's transaction decided; its steps are read after the commit (serveLease). */
export interface Leased {
  lease: Lease;
  policyVersion: number;
  picks: Pick[];
  drops: CurationDrop[];
}

/** A ready group a lease of this shape may take, and how many versions behind the policy it is. */
function candidate(row: GroupRow, params: LeaseParams, policyVersion: number): number | null {
  if (params.nRollouts !== null && row.expected !== params.nRollouts) return null;
  return Math.max(0, policyVersion - (row.min_policy_version ?? policyVersion));
}

/**
 * A mixture's minimum shares in one batch of `size` groups (⌊min_share × size⌋ of each task set, so
 * they always fit together): a group fits while the slots left after it still hold every other
 * set's unmet share.
 */
class BatchQuotas {
  private readonly required = new Map<string, number>();
  private readonly taken = new Map<string, number>();

  constructor(
    mixture: ChannelConfig['schedule']['mixture'],
    private readonly size: number,
  ) {
    for (const [set, { min_share }] of Object.entries(mixture ?? {}))
      if (min_share > 0) this.required.set(set, Math.floor(min_share * size + 1e-9));
  }

  get active(): boolean {
    return this.required.size > 0;
  }

  fits(set: string | null, chosen: number): boolean {
    let unmet = 0;
    for (const [other, need] of this.required)
      if (other !== set) unmet += Math.max(0, need - (this.taken.get(other) ?? 0));
    return this.size - chosen - 1 >= unmet;
  }

  take(set: string | null): void {
    if (set !== null) this.taken.set(set, (this.taken.get(set) ?? 0) + 1);
  }
}

/** How many ready groups a lease reads per query: enough for a batch and a few dropped on the way. */
const pageSize = (params: LeaseParams) => params.batchSize * 2 + 16;

/** The trainer's first lease declares the group size for groups nobody sized. */
function* declareGroupSize(tx: PoolTx, params: LeaseParams, now: number): Rule<ChannelConfig> {
  let config = yield* tx.channelConfig(params.channel);
  if (params.nRollouts === null || config.n_rollouts !== null) return config;
  config = yield* tx.lockChannel(params.channel, now);
  if (config.n_rollouts !== null) return config;
  config = { ...config, n_rollouts: params.nRollouts };
  yield* tx.saveChannelConfig(params.channel, config, now);
  tx.emit('channel_configured', params.channel, { config, by: 'lease' }, now);
  yield* adoptGroupSize(tx, params.channel, params.nRollouts, config, now);
  return config;
}

/**
 * Leases `batchSize` ready groups in queue order, or nothing when fewer are ready. Stale groups
 * are dropped or served as the channel says; curation runs here, and a group it empties or
 * flattens is dropped, the next ready group taking its place.
 */
export function* leaseGroups(tx: PoolTx, params: LeaseParams, now: number): Rule<Leased | null> {
  yield* expireLeases(tx, now);
  yield* sweepCollecting(tx, now);
  const config = yield* declareGroupSize(tx, params, now);
  const maxStaleness = params.maxStaleness ?? config.max_staleness;
  const policyVersion = yield* tx.policyVersion();
  const admission = maxStaleness !== null && admissionLimit(config) !== null;
  if (admission && params.patient && (yield* straggling(tx, params.channel, policyVersion, maxStaleness)))
    return null;
  const chosen: Pick[] = [];
  const drops: CurationDrop[] = [];
  const quotas = new BatchQuotas(config.schedule.mixture, params.batchSize);
  /** Takes `row` into the batch unless it is dropped or does not fit; true once the batch is full. */
  const consider = function* (row: GroupRow): Rule<boolean> {
    const staleness = candidate(row, params, policyVersion);
    if (staleness === null) return false;
    const stale = maxStaleness !== null && staleness > maxStaleness;
    if (stale && config.stale_policy === 'drop') {
      yield* dropGroup(tx, row, 'stale', now);
      return false;
    }
    // A group that would leave no room for another task set's minimum share waits for a later batch.
    const set = quotas.active ? yield* tx.prompts.taskSetOfGroup(row.channel, row.id) : null;
    if (!quotas.fits(set, chosen.length)) return false;
    // Under a reward pin a group waits, ready, until every rollout has the pinned score.
    const members = yield* servedMembers(tx, row, config);
    if (members === null) return false;
    let curated: Curated | null = null;
    if (!isNoop(config.curation)) {
      curated = yield* curate(tx, row, members, config.curation, now, drops);
      if (curated === null) return false; // dropped: the next ready group takes its place
    }
    chosen.push({ row, staleness, stale, members: curated?.members ?? members, curated });
    quotas.take(set);
    return chosen.length === params.batchSize;
  };
  if (admission) {
    // Groups this batch's update would make too stale go first, so none is left to go stale.
    for (const row of yield* edgeFirst(tx, params, policyVersion, maxStaleness))
      if (yield* consider(row)) break;
  } else {
    let after = 0;
    queue: for (;;) {
      const rows = yield* tx.readyGroups(params.channel, after, pageSize(params));
      if (rows.length === 0) break;
      for (const row of rows) {
        after = Number(row.ready_seq);
        if (yield* consider(row)) break queue;
      }
    }
  }
  if (chosen.length < params.batchSize) return null;

  const leaseId = newLeaseId();
  const picks: Pick[] = [];
  let nSteps = 0;
  for (const { row, staleness, stale, members, curated } of chosen) {
    yield* tx.updateGroup(row, { state: 'leased', lease_id: leaseId, leased_version: policyVersion });
    for (const t of members) nSteps += t.n_steps;
    if (stale) tx.log.count(params.channel, 'groups_served_stale');
    picks.push({ row, staleness, stale, members, curated });
  }
  const lease: LeaseRow = {
    id: leaseId,
    channel: params.channel,
    consumer: params.consumer,
    state: 'active',
    group_ids: JSON.stringify(chosen.map((c) => c.row.id)),
    n_steps: nSteps,
    created_at: now,
    expires_at: now + params.ttlMs,
    ended_at: null,
  };
  yield* tx.insertLease(lease);
  tx.log.count(params.channel, 'batches_leased');
  tx.log.count(params.channel, 'groups_leased', picks.length);
  tx.emit(
    'batch_leased',
    params.channel,
    {
      lease_id: leaseId,
      consumer: params.consumer,
      group_ids: chosen.map((c) => c.row.id),
      n_steps: nSteps,
      ...(params.askedAt !== undefined ? { fill_ms: now - params.askedAt } : {}),
    },
    now,
  );
  return { lease: toLease(lease), policyVersion, picks, drops };
}

/**
 * Whether an open rollout of the channel has a token this batch's update would make too stale
 * (its version at the edge of max_staleness): a patient lease waits for it rather than leave its
 * group to be dropped (long-horizon tasks are not starved by fast ones).
 */
function* straggling(
  tx: PoolTx,
  channel: string,
  policyVersion: number,
  maxStaleness: number,
): Rule<boolean> {
  const oldest = yield* tx.oldestOpenVersion(channel);
  const waits = oldest !== null && policyVersion - oldest >= maxStaleness;
  if (waits) tx.log.count(channel, 'straggler_waits');
  return waits;
}

/** Every ready group (bounded by admission), those at the edge of max_staleness first, else in queue order. */
function* edgeFirst(
  tx: PoolTx,
  params: LeaseParams,
  policyVersion: number,
  maxStaleness: number,
): Rule<GroupRow[]> {
  const rows: GroupRow[] = [];
  for (let after = 0; ; ) {
    const page = yield* tx.readyGroups(params.channel, after, 256);
    if (page.length === 0) break;
    rows.push(...page);
    after = Number(page[page.length - 1]!.ready_seq);
  }
  const atEdge = (row: GroupRow) => (candidate(row, params, policyVersion) ?? -1) >= maxStaleness;
  return [...rows.filter(atEdge), ...rows.filter((row) => !atEdge(row))];
}

/** The leased groups as the trainer receives them: read after the lease commits (the groups are ours). */
export function* serveLease(tx: PoolTx, leased: Leased): Rule<LeasedBatch> {
  const members = leased.picks.flatMap((p) => p.members);
  const ids = members.map((m) => m.id);
  const signals = yield* tx.currentSignals(ids);
  const labels = yield* tx.currentLabels(ids);
  const undecoded = leased.picks.flatMap((p) => p.members.filter((m) => !p.curated?.steps.has(m.id)));
  const captured = yield* tx.capturedSteps(undecoded);
  const groups: ServedGroup[] = leased.picks.map(({ row, staleness, stale, members, curated }) =>
    servedGroup(
      row,
      staleness,
      stale,
      members.map((m) =>
        servedTrajectory(
          m,
          curated?.steps.get(m.id) ?? captured.get(m.id) ?? [],
          labels.get(m.id) ?? [],
          signals.get(m.id) ?? [],
        ),
      ),
      curated,
    ),
  );
  return {
    lease: leased.lease,
    policyVersion: leased.policyVersion,
    groups,
    ...(leased.drops.length > 0 ? { dropped: leased.drops } : {}),
  };
}

/**
 * Applies the channel's curation to a ready group inside the lease transaction: exclusions are
 * recorded (event + counter) and a group the filters empty or flatten is dropped (null).
 */
function* curate(
  tx: PoolTx,
  row: GroupRow,
  members: TrajectoryRow[],
  curation: ChannelCuration,
  now: number,
  drops: CurationDrop[],
): Rule<Curated | null> {
  const steps = needsSteps(curation) ? yield* tx.capturedSteps(members) : new Map<string, Step[]>();
  const decision = curateGroup(
    members.map((m) => {
      const captured = steps.get(m.id);
      return { id: m.id, reward: m.reward, steps: captured && memberTrainingSteps(m, captured) };
    }),
    curation,
  );
  // Reward tallies over kept and dropped trajectories alike (stats().curation).
  const tally = (kind: 'kept' | 'dropped', rows: readonly TrajectoryRow[]) => {
    const rewarded = rows.filter((m) => m.reward !== null);
    tx.log.count(row.channel, `curation_${kind}_trajectories`, rows.length);
    tx.log.count(row.channel, `curation_${kind}_rewarded`, rewarded.length);
    tx.log.count(
      row.channel,
      `curation_${kind}_reward_sum`,
      rewarded.reduce((sum, m) => sum + m.reward!, 0),
    );
  };
  const excludedIds = new Set(decision.excluded.map((e) => e.id));
  tally(
    'dropped',
    members.filter((m) => excludedIds.has(m.id)),
  );
  for (const { id, reason, detail } of decision.excluded) {
    tx.log.count(row.channel, `excluded_${reason}`);
    tx.emit(
      'trajectory_excluded',
      row.channel,
      { group_id: row.id, trajectory_id: id, reason, ...(detail ? { detail } : {}) },
      now,
    );
  }
  const kept = members.filter((m) => !excludedIds.has(m.id));
  if (decision.drop) {
    tally('dropped', kept);
    tx.log.count(row.channel, 'curation_dropped_groups');
    drops.push({ groupId: row.id, reason: decision.drop, rewards: members.map((m) => m.reward) });
    yield* dropGroup(tx, row, decision.drop, now);
    return null;
  }
  tally('kept', kept);
  tx.log.count(row.channel, 'curation_kept_groups');
  const keep = new Set(decision.keep);
  return {
    members: members.filter((m) => keep.has(m.id)),
    excluded: decision.excluded,
    steps,
    rewards: new Map(members.map((m) => [m.id, m.reward])),
  };
}

/**
 * A group's complete rollouts as a lease serves them. Under the channel's reward pin each one's reward
 * is its pinned score; null while any of them has none yet (the group is not served).
 */
function* servedMembers(tx: PoolTx, row: GroupRow, config: ChannelConfig): Rule<TrajectoryRow[] | null> {
  const members = yield* tx.groupMembers(row);
  const pin = config.reward_pin;
  if (pin === null) return members;
  const values = yield* tx.evidence.pinnedValues(
    members.map((m) => m.id),
    pin,
  );
  if (members.some((m) => !values.has(m.id))) return null;
  return members.map((m) => ({ ...m, reward: values.get(m.id)! }));
}

/** A served group as the lease answers it: trajectories, and what curation left out. */
function servedGroup(
  row: GroupRow,
  staleness: number,
  stale: boolean,
  trajectories: ServedTrajectory[],
  curated: Curated | null,
): ServedGroup {
  return {
    group: toGroup(row),
    staleness,
    stale,
    trajectories,
    ...(curated && curated.excluded.length > 0
      ? {
          excluded: curated.excluded.map(({ id, reason, detail }) => ({
            trajectoryId: id,
            reason,
            reward: curated.rewards.get(id) ?? null,
            ...(detail ? { detail } : {}),
          })),
        }
      : {}),
  };
}

/**
 * The steps of a member as curation judges it and a lease serves it: an online CLEANER run's
 * purified view, so filters see the rows a trainer receives.
 */
function memberTrainingSteps(row: TrajectoryRow, captured: readonly Step[]): Step[] {
  return trainingSteps(toTrajectory(row), captured);
}

/** A trajectory with its trainable steps (labels applied), its labels and its current signals. */
function servedTrajectory(
  row: TrajectoryRow,
  steps: Step[],
  labels: CurrentLabel[],
  signals: ServedTrajectory['signals'],
): ServedTrajectory {
  const trajectory = toTrajectory(row);
  const purified = trainingSteps(trajectory, steps);
  return {
    trajectory,
    steps: labels.length > 0 ? purified.filter((s) => isStepTrainable(labels, s.index)) : purified,
    labels,
    signals,
  };
}

/**
 * What the next lease of this shape would make of each ready group, in order, stopping after
 * `batchSize` served groups. Changes nothing.
 */
export function* previewLease(tx: PoolTx, params: LeaseParams): Rule<PreviewGroup[]> {
  const config = yield* tx.channelConfig(params.channel);
  const maxStaleness = params.maxStaleness ?? config.max_staleness;
  const policyVersion = yield* tx.policyVersion();
  const out: PreviewGroup[] = [];
  let served = 0;
  let after = 0;
  for (;;) {
    const rows = yield* tx.readyGroups(params.channel, after, pageSize(params));
    if (rows.length === 0) break;
    for (const row of rows) {
      after = Number(row.ready_seq);
      const staleness = candidate(row, params, policyVersion);
      if (staleness === null) continue;
      const preview = yield* previewGroup(tx, row, staleness, config, maxStaleness);
      out.push(preview);
      if (preview.decision === 'serve' && ++served === params.batchSize) return out;
    }
  }
  return out;
}

function* previewGroup(
  tx: PoolTx,
  row: GroupRow,
  staleness: number,
  config: ChannelConfig,
  maxStaleness: number | null,
): Rule<PreviewGroup> {
  const base = { group: toGroup(row), staleness };
  if (maxStaleness !== null && staleness > maxStaleness && config.stale_policy === 'drop')
    return { ...base, decision: 'stale', served: [], excluded: [] };
  const members = yield* servedMembers(tx, row, config);
  if (members === null) return { ...base, decision: 'awaiting_pin', served: [], excluded: [] };
  const decoded = new Map<string, Step[]>();
  function* steps(m: TrajectoryRow): Rule<Step[]> {
    let list = decoded.get(m.id);
    if (!list) {
      list = memberTrainingSteps(m, (yield* tx.capturedSteps([m])).get(m.id) ?? []);
      decoded.set(m.id, list);
    }
    return list;
  }
  const inputs = [];
  for (const m of members)
    inputs.push({
      id: m.id,
      reward: m.reward,
      steps: needsSteps(config.curation) ? yield* steps(m) : undefined,
    });
  const decision = isNoop(config.curation)
    ? { keep: members.map((m) => m.id), excluded: [], drop: null }
    : curateGroup(inputs, config.curation);
  const excluded = decision.excluded.map((e) => ({
    trajectoryId: e.id,
    reason: e.reason,
    reward: members.find((m) => m.id === e.id)?.reward ?? null,
  }));
  if (decision.drop) return { ...base, decision: decision.drop, served: [], excluded };
  const keep = new Set(decision.keep);
  const served: PreviewGroup['served'] = [];
  const labelsOf = yield* tx.currentLabels(members.filter((m) => keep.has(m.id)).map((m) => m.id));
  for (const m of members) {
    if (!keep.has(m.id)) continue;
    const labels = labelsOf.get(m.id) ?? [];
    // Counted on the served rows: an online CLEANER run serves fewer than it captured.
    const trajectory = toTrajectory(m);
    const rows = labels.length === 0 && onlineCleaner(trajectory) === null ? null : yield* steps(m);
    const trainableSteps =
      rows === null ? m.n_steps : rows.filter((s) => isStepTrainable(labels, s.index)).length;
    served.push({ trajectory, steps: m.n_steps, trainableSteps });
  }
  return { ...base, decision: 'serve', excluded, served };
}
