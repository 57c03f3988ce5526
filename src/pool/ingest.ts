import { ConflictError, StepwiseError } from '../domain/index.js';
import type { TrajectoryRow } from '../store/rows.js';
import type { SubmitOutcome, SubmitRequest } from '../store/store.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { checkAppend, checkRetry, checkStepTarget, declaredRollouts } from './checks.js';
import { finishTrajectory, insertTrajectory } from './trajectories.js';

export interface Submitted {
  inserted: number;
  duplicates: number;
  completed: string[];
}

/** Whether an error refuses one submission (its caller's fault) rather than the whole commit. */
export const isRefusal = (error: unknown): error is StepwiseError =>
  error instanceof StepwiseError && error.status < 500;

/** Applies every submission of a commit; one refusal fails them all (the caller then retries with submitEach). */
export function* submitAll(
  tx: PoolTx,
  requests: readonly SubmitRequest[],
  now: number,
): Rule<SubmitOutcome[]> {
  const policyVersion = yield* tx.policyVersion();
  const outcomes: SubmitOutcome[] = [];
  for (const request of requests)
    outcomes.push({ ok: true, ...(yield* applySubmission(tx, request, policyVersion, now)) });
  return outcomes;
}

/** Applies each submission in a savepoint of its own: a refused one leaves no trace, the others commit. */
export function* submitEach(
  tx: PoolTx,
  requests: readonly SubmitRequest[],
  now: number,
): Rule<SubmitOutcome[]> {
  const policyVersion = yield* tx.policyVersion();
  const outcomes: SubmitOutcome[] = [];
  for (const request of requests) {
    try {
      outcomes.push({
        ok: true,
        ...(yield* tx.savepoint((inner) => applySubmission(inner, request, policyVersion, now))),
      });
    } catch (error) {
      if (!isRefusal(error)) throw error;
      outcomes.push({ ok: false, error });
    }
  }
  return outcomes;
}

/**
 * Stores one submission's steps. A step already stored is a retry (it must be the same step); a new
 * one appends to its trajectory (created, with its group, on its first step). A trajectory whose
 * last step is in completes, which may make its group ready.
 */
function* applySubmission(
  tx: PoolTx,
  request: SubmitRequest,
  policyVersion: number,
  now: number,
): Rule<Submitted> {
  const byTrajectory = new Map<string, number[]>();
  request.steps.forEach((step, i) => {
    const positions = byTrajectory.get(step.trajectoryId);
    if (positions) positions.push(i);
    else byTrajectory.set(step.trajectoryId, [i]);
  });
  let inserted = 0;
  let duplicates = 0;
  const completed: string[] = [];
  // Every trajectory of the submission is locked first, in one order, so submissions never deadlock.
  const locked = yield* tx.lockTrajectories([...byTrajectory.keys()]);
  for (const [trajectoryId, positions] of byTrajectory) {
    positions.sort((a, b) => request.steps[a]!.index - request.steps[b]!.index);
    const first = request.steps[positions[0]!]!;
    let trajectory: TrajectoryRow | undefined = locked.get(trajectoryId);
    const created = !trajectory;
    if (!trajectory) {
      const nRollouts = request.nRollouts ?? declaredRollouts(first);
      const input = {
        id: trajectoryId,
        groupId: first.groupId,
        channel: request.channel,
        nRollouts,
        metadata: {},
      };
      trajectory = yield* insertTrajectory(tx, input, now);
    } else if (trajectory.channel !== request.channel) {
      throw new ConflictError(
        `trajectory ${trajectoryId} belongs to channel '${trajectory.channel}', not '${request.channel}'`,
        'channel',
      );
    }
    let added = 0;
    let rewardSum = 0;
    let rewardCount = 0;
    let breaks = 0;
    let minVersion: number | null = null;
    for (const position of positions) {
      const step = request.steps[position]!;
      const field = `steps.${position}`;
      checkStepTarget(step, field, trajectory);
      // Only an index at or below the highest stored one can be a retry: skip the lookup otherwise.
      const prior =
        step.index <= (trajectory.max_index ?? -1) ? yield* tx.priorStep(trajectory, step.index) : undefined;
      if (prior) {
        checkRetry(prior, step, field, trajectoryId);
        duplicates++;
        continue;
      }
      checkAppend(step, field, trajectory);
      const version = step.policyVersion ?? policyVersion;
      if (yield* tx.appendStep(trajectory, step, request.channel, version, now)) breaks++;
      minVersion = minVersion === null ? version : Math.min(minVersion, version);
      trajectory.n_steps++;
      trajectory.max_index = Math.max(trajectory.max_index ?? -1, step.index);
      if (step.isLast) trajectory.last_index = step.index;
      if (step.reward !== null) {
        rewardSum += step.reward;
        rewardCount++;
      }
      added++;
    }
    if (added === 0) continue;
    inserted += added;
    trajectory.prefix_breaks += breaks;
    // The group's oldest version can only fall when this trajectory's does (group min <= trajectory min).
    const lowered = trajectory.min_policy_version === null || minVersion! < trajectory.min_policy_version;
    if (lowered) trajectory.min_policy_version = minVersion;
    if (breaks > 0) tx.log.count(request.channel, 'prefix_breaks', breaks);
    tx.log.noteSubmitted(request.channel, trajectoryId, trajectory.group_id, added, now, created);
    if (trajectory.last_index !== null && trajectory.n_steps === trajectory.last_index + 1) {
      // Completing now: its rows are written once. Every step came in this submission: its rewards
      // are known without reading them back.
      const known = trajectory.n_steps === added ? (rewardCount > 0 ? rewardSum : null) : undefined;
      yield* finishTrajectory(tx, trajectory, { status: 'complete', reward: null }, now, {
        stepRewardSum: known,
        versionLowered: lowered,
      });
      completed.push(trajectoryId);
      continue;
    }
    yield* tx.updateTrajectory(trajectory, {
      n_steps: trajectory.n_steps,
      max_index: trajectory.max_index,
      last_index: trajectory.last_index,
      prefix_breaks: trajectory.prefix_breaks,
      min_policy_version: trajectory.min_policy_version,
      touched_at: now,
    });
    if (lowered) yield* tx.lowerGroupVersion(trajectory);
  }
  yield* tx.flushSteps();
  for (const attachment of request.toolResults ?? []) yield* tx.attachToolResults(attachment);
  tx.log.count(request.channel, 'steps_produced', inserted);
  if (duplicates > 0) tx.log.count(request.channel, 'duplicate_steps', duplicates);
  return { inserted, duplicates, completed };
}
