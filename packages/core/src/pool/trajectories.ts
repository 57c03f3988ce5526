import {
  ConflictError,
  MAX_METADATA_BYTES,
  NotFoundError,
  tooBigMessage,
  ValidationError,
} from '../domain/index.js';
import type { GroupRow, TrajectoryRow } from '../store/rows.js';
import type { CallFailure, CompleteInput, CreateTrajectoryInput, Refusal } from '../store/store.js';
import { done, type PoolTx, type Rule } from '../store/tx.js';
import { admitGroup } from './admission.js';
import { callFailedData, checkMovable, newTrajectoryRow, refusalData } from './checks.js';
import { settleGroup } from './groups.js';

/**
 * A new member joined `group` (created by it, or not). A group sized only now may already have
 * every rollout; one no longer collecting takes the member late (it is never served with it).
 */
function* joined(
  tx: PoolTx,
  group: GroupRow,
  created: boolean,
  nRollouts: number | null,
  now: number,
): Rule<boolean> {
  if (created) {
    tx.log.count(group.channel, 'groups_created');
    return true;
  }
  if (nRollouts !== null && group.expected === nRollouts)
    yield* settleGroup(tx, group, yield* tx.channelConfig(group.channel), now);
  if (group.state === 'collecting') return true;
  tx.log.count(group.channel, 'late_trajectories');
  return false;
}

/** Inserts a trajectory into its group (created on first use); returns its row. */
export function* insertTrajectory(
  tx: PoolTx,
  input: CreateTrajectoryInput,
  now: number,
): Rule<TrajectoryRow> {
  const row = newTrajectoryRow(input, now);
  const size = input.nRollouts ?? (yield* tx.channelConfig(input.channel)).n_rollouts;
  const { group, created } = yield* tx.insertTrajectory(row, { nRollouts: input.nRollouts, size }, now);
  const collecting = yield* joined(tx, group, created, input.nRollouts, now);
  if (collecting && input.holdForGuidance != null)
    yield* tx.updateGroup(group, { guidance_hold: input.holdForGuidance });
  tx.log.count(input.channel, 'trajectories_created');
  return row;
}

/** Creates a trajectory; its id, and with `newGroup` its group, must be new. */
export function* createTrajectory(
  tx: PoolTx,
  input: CreateTrajectoryInput,
  now: number,
): Rule<TrajectoryRow> {
  if (yield* tx.trajectory(input.id))
    throw new ConflictError(`trajectory ${input.id} already exists`, 'trajectory_uid');
  const group = yield* tx.group(input.channel, input.groupId);
  if (input.newGroup && group)
    throw new ConflictError(`group ${input.groupId} already exists in channel ${input.channel}`, 'group_id');
  // A rollout about to start a new group waits for the channel's staleness budget (steps already
  // generated and submitted are never refused for it: that would waste them).
  if (!group) yield* admitGroup(tx, input.channel, now);
  const row = yield* insertTrajectory(tx, input, now);
  tx.emit('trajectory_created', input.channel, { trajectory_uid: input.id, group_id: input.groupId }, now);
  return row;
}

function* openTrajectory(tx: PoolTx, id: string): Rule<TrajectoryRow> {
  const trajectory = yield* tx.trajectory(id);
  if (!trajectory) throw new NotFoundError(`trajectory ${id} does not exist`);
  if (trajectory.status !== 'open')
    throw new ConflictError(`trajectory ${id} is already ${trajectory.status}`, 'trajectory_uid');
  return trajectory;
}

/** Merges keys into an open trajectory's metadata. */
export function* mergeMetadata(
  tx: PoolTx,
  id: string,
  metadata: Record<string, unknown>,
  now: number,
): Rule<TrajectoryRow> {
  const trajectory = yield* openTrajectory(tx, id);
  const merged = JSON.stringify({ ...JSON.parse(trajectory.metadata), ...metadata });
  // Merges must not grow metadata past the cap a single body is held to (one stored before the cap grows on).
  const bytes = Buffer.byteLength(merged);
  if (bytes > MAX_METADATA_BYTES && Buffer.byteLength(trajectory.metadata) <= MAX_METADATA_BYTES)
    throw new ValidationError(`metadata: merged, ${tooBigMessage(bytes)}`, 'metadata');
  yield* tx.updateTrajectory(trajectory, {
    metadata: merged,
    touched_at: now,
  });
  return trajectory;
}

/**
 * Moves an open trajectory with no steps, alone in its group, into another group and/or channel.
 * Its old group, which held only it, is removed; the target group is joined or created.
 */
export function* moveTrajectory(
  tx: PoolTx,
  id: string,
  target: { groupId: string; channel: string },
  now: number,
): Rule<TrajectoryRow> {
  const trajectory = yield* openTrajectory(tx, id);
  if (trajectory.group_id === target.groupId && trajectory.channel === target.channel) return trajectory;
  const old = yield* tx.group(trajectory.channel, trajectory.group_id);
  checkMovable(trajectory, old?.n_trajectories ?? 0);
  if (old) yield* tx.deleteGroup(old);
  const sameChannel = trajectory.channel === target.channel;
  const nRollouts = sameChannel ? (old?.expected ?? null) : null;
  const size = nRollouts ?? (yield* tx.channelConfig(target.channel)).n_rollouts;
  const { group, created } = yield* tx.joinGroup(target.channel, target.groupId, { nRollouts, size }, now);
  yield* joined(tx, group, created, nRollouts, now);
  if (!sameChannel) {
    tx.log.count(trajectory.channel, 'trajectories_created', -1);
    tx.log.count(target.channel, 'trajectories_created');
  }
  const from = { group_id: trajectory.group_id, channel: trajectory.channel };
  yield* tx.updateTrajectory(trajectory, {
    group_id: target.groupId,
    channel: target.channel,
    touched_at: now,
  });
  tx.emit(
    'trajectory_created',
    target.channel,
    { trajectory_uid: id, group_id: target.groupId, moved_from: from },
    now,
  );
  return trajectory;
}

/** An LLM call that failed before a step was stored: counted and logged on its channel. */
export function* recordCallFailure(tx: PoolTx, failure: CallFailure, now: number): Rule<void> {
  yield* tx.ensureChannel(failure.channel, now);
  tx.log.count(failure.channel, `calls_${failure.kind}`);
  tx.emit('call_failed', failure.channel, callFailedData(failure), now);
}

/** A request refused for its key's reach: logged, so an operator sees what an agent tried. */
export function recordRefusal(tx: PoolTx, refusal: Refusal, now: number): Rule<void> {
  tx.emit('access_refused', refusal.channel, refusalData(refusal), now);
  return done(undefined);
}

/** How a trajectory came to finish, beyond its status (counted and reported). */
export interface FinishOptions {
  /** The sum of its step rewards when every step came in this transaction (undefined: read them). */
  stepRewardSum?: number | null;
  /** Its oldest policy version fell in this transaction. */
  versionLowered?: boolean;
  reason?: 'idle';
}

/**
 * Closes a trajectory. Only rollouts that finish while their group collects belong to it (they are
 * counted, and may settle it); later ones are never served.
 */
export function* finishTrajectory(
  tx: PoolTx,
  trajectory: TrajectoryRow,
  input: CompleteInput,
  now: number,
  options: FinishOptions = {},
): Rule<void> {
  const { stepRewardSum, versionLowered = false, reason } = options;
  let reward = input.reward ?? stepRewardSum ?? null;
  if (reward === null && stepRewardSum === undefined) reward = yield* tx.stepRewardSum(trajectory);
  trajectory.status = input.status;
  trajectory.reward = reward;
  trajectory.completed_at = now;
  const group = yield* tx.finishTrajectoryRow(trajectory, versionLowered);
  tx.log.count(trajectory.channel, `trajectories_${input.status}`);
  if (reason) tx.log.count(trajectory.channel, `trajectories_${reason}_${input.status}`);
  tx.log.forgetTails.add(trajectory.id);
  tx.log.tails.delete(trajectory.id);
  tx.emit(
    'trajectory_completed',
    trajectory.channel,
    {
      trajectory_uid: trajectory.id,
      group_id: trajectory.group_id,
      status: input.status,
      reward,
      ...(reason ? { reason } : {}),
    },
    now,
  );
  if (!group) {
    if (versionLowered) yield* tx.lowerGroupVersion(trajectory);
    tx.log.count(trajectory.channel, 'late_trajectories_finished');
    return;
  }
  yield* settleGroup(tx, group, yield* tx.channelConfig(group.channel), now);
}

/**
 * Completes or aborts a trajectory. A retry is answered with the trajectory as it is; the
 * environment's reward may still follow the last step, until the group is handed out.
 */
export function* completeTrajectory(
  tx: PoolTx,
  id: string,
  input: CompleteInput,
  now: number,
): Rule<TrajectoryRow> {
  const trajectory = yield* tx.trajectory(id);
  if (!trajectory) throw new NotFoundError(`trajectory ${id} does not exist`);
  if (trajectory.status === 'open') {
    yield* finishTrajectory(tx, trajectory, input, now);
    return trajectory;
  }
  const sameReward = input.reward === null || input.reward === trajectory.reward;
  if (trajectory.status === input.status && sameReward) return trajectory;
  if (trajectory.status === 'complete' && input.status === 'complete' && input.reward !== null) {
    const group = yield* tx.group(trajectory.channel, trajectory.group_id);
    if (
      group &&
      (group.state === 'collecting' || group.state === 'ready' || group.state === 'pending_guidance')
    ) {
      yield* tx.updateTrajectory(trajectory, { reward: input.reward });
      tx.emit(
        'trajectory_completed',
        trajectory.channel,
        {
          trajectory_uid: id,
          group_id: trajectory.group_id,
          status: 'complete',
          reward: input.reward,
          update: true,
        },
        now,
      );
      return trajectory;
    }
  }
  throw new ConflictError(`trajectory ${id} is already ${trajectory.status}`, 'status');
}

/** Closes open trajectories idle past their channel's idle_timeout_ms as aborted. */
export function* abortIdle(tx: PoolTx, now: number): Rule<number> {
  let aborted = 0;
  for (const channel of yield* tx.channelNames()) {
    const { idle_timeout_ms: ttl } = yield* tx.channelConfig(channel);
    if (ttl === null) continue;
    for (const trajectory of yield* tx.idleTrajectories(channel, now - ttl)) {
      yield* finishTrajectory(tx, trajectory, { status: 'aborted', reward: null }, now, { reason: 'idle' });
      aborted++;
    }
  }
  return aborted;
}
