import {
  type Label,
  type LabelInput,
  NotFoundError,
  parseOrThrow,
  type Signal,
  SignalInput,
} from '../domain/index.js';
import { TRAJECTORY_LABEL, type TrajectoryRow, toLabel } from '../store/rows.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { foldLabel, labelChangedData } from './checks.js';
import { settleGroup } from './groups.js';

// Feedback on stored trajectories: curation labels (human or tool) and reward/quality signals.

/** The trajectory a feedback item names, and its step when it names one; a NotFoundError names the field. */
function* target(
  tx: PoolTx,
  field: string,
  trajectoryId: string,
  stepIndex: number | null,
  lock: boolean,
): Rule<TrajectoryRow> {
  const trajectory = yield* tx.trajectory(trajectoryId, lock);
  if (!trajectory)
    throw new NotFoundError(`${field}.trajectory_uid: trajectory ${trajectoryId} does not exist`);
  if (stepIndex !== null && !(yield* tx.stepExists(trajectory, stepIndex)))
    throw new NotFoundError(
      `${field}.step_index: step ${stepIndex} of trajectory ${trajectory.id} does not exist`,
    );
  return trajectory;
}

/**
 * Appends labels, all or none, each folded into the state in force for its trajectory or step:
 * given fields override, omitted ones stay. The trajectory's row is the lock, so concurrent patches
 * of one target fold one after the other.
 */
export function* addLabels(tx: PoolTx, labels: readonly LabelInput[], now: number): Rule<Label[]> {
  const out: Label[] = [];
  for (const [i, input] of labels.entries()) {
    const stepIndex = input.step_index ?? null;
    const trajectory = yield* target(tx, `labels.${i}`, input.trajectory_uid, stepIndex, true);
    const key = stepIndex ?? TRAJECTORY_LABEL;
    const inserted = yield* tx.insertLabel(trajectory.id, stepIndex, input, now);
    const next = foldLabel(yield* tx.currentLabel(trajectory.id, key), input, trajectory.id, key, now);
    yield* tx.setCurrentLabel(next, input.tags);
    tx.emit('label_changed', trajectory.channel, labelChangedData(trajectory.id, stepIndex, next), now);
    out.push(toLabel(inserted));
  }
  return out;
}

/**
 * Appends signals, all or none. A group held back for its channel's required signals may be ready
 * once they are in; its row is locked before the check, so of two transactions adding the last two
 * signals, the second sees the first's.
 */
export function* addSignals(tx: PoolTx, signals: readonly unknown[], now: number): Rule<Signal[]> {
  const trajectories = new Map<string, TrajectoryRow>();
  // Trajectory-level signal names written, by trajectory.
  const written = new Map<string, Set<string>>();
  const added: Signal[] = [];
  for (const [i, raw] of signals.entries()) {
    const input = parseOrThrow(SignalInput, raw, `signals.${i}`);
    const known = trajectories.get(input.trajectoryId);
    const trajectory =
      known && input.stepIndex === null
        ? known
        : yield* target(tx, `signals.${i}`, input.trajectoryId, input.stepIndex, false);
    trajectories.set(trajectory.id, trajectory);
    yield* tx.insertSignal(trajectory.id, input, now);
    added.push({ ...input, createdAt: now });
    if (input.stepIndex === null)
      written.set(trajectory.id, (written.get(trajectory.id) ?? new Set()).add(input.name));
    tx.emit(
      'signal_added',
      trajectory.channel,
      {
        trajectory_uid: trajectory.id,
        step_index: input.stepIndex,
        name: input.name,
        value: input.value,
        source: input.source,
        version: input.version,
      },
      now,
    );
  }
  for (const t of trajectories.values()) {
    const names = written.get(t.id);
    if (t.status !== 'complete' || !names) continue;
    const config = yield* tx.channelConfig(t.channel);
    const awaited = config.required_signals.some((n) => names.has(n));
    if (!awaited && !(config.reward_pin && names.has(config.reward_pin.signal))) continue;
    const group = yield* tx.group(t.channel, t.group_id);
    if (group?.state === 'collecting') yield* settleGroup(tx, group, config, now);
  }
  return added;
}
