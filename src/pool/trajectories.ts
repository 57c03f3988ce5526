import { ConflictError, NotFoundError } from '../domain/index.js';
import type { TrajectoryRow } from '../store/rows.js';
import type { CompleteInput } from '../store/store.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { settleGroup } from './groups.js';

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
      trajectory.reward = input.reward;
      yield* tx.setTrajectoryReward(trajectory, input.reward);
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
