import { ConflictError, type NewStep, StepwiseError } from '../domain/index.js';
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
    const existing = locked.get(trajectoryId);
    const trajectory = yield* trajectoryOf(tx, request, first, existing, now);
    const appended = yield* appendSteps(tx, request, trajectory, positions, policyVersion, now);
    duplicates += appended.duplicates;
    if (appended.added === 0) continue;
    inserted += appended.added;
    if (yield* settleTrajectory(tx, request.channel, trajectory, appended, !existing, now))
      completed.push(trajectoryId);
  }
  yield* tx.flushSteps();
  for (const attachment of request.toolResults ?? []) yield* tx.attachToolResults(attachment);
  tx.log.count(request.channel, 'steps_produced', inserted);
  if (duplicates > 0) tx.log.count(request.channel, 'duplicate_steps', duplicates);
  return { inserted, duplicates, completed };
}

/** The trajectory a submission's steps go to: the stored one (of the same channel), or a new one. */
function* trajectoryOf(
  tx: PoolTx,
  request: SubmitRequest,
  first: NewStep,
  existing: TrajectoryRow | undefined,
  now: number,
): Rule<TrajectoryRow> {
  if (!existing) {
    const input = {
      id: first.trajectoryId,
      groupId: first.groupId,
      channel: request.channel,
      nRollouts: request.nRollouts ?? declaredRollouts(first),
      metadata: {},
    };
    return yield* insertTrajectory(tx, input, now);
  }
  if (existing.channel !== request.channel)
    throw new ConflictError(
      `trajectory ${existing.id} belongs to channel '${existing.channel}', not '${request.channel}'`,
      'channel',
    );
  return existing;
}

/** What appending one trajectory's steps did. */
interface Appended {
  added: number;
  duplicates: number;
  rewardSum: number;
  rewardCount: number;
  breaks: number;
  minVersion: number | null;
}

/** Appends the steps at `positions` (in index order) to `trajectory`; a retried step is only checked. */
function* appendSteps(
  tx: PoolTx,
  request: SubmitRequest,
  trajectory: TrajectoryRow,
  positions: number[],
  policyVersion: number,
  now: number,
): Rule<Appended> {
  const a: Appended = { added: 0, duplicates: 0, rewardSum: 0, rewardCount: 0, breaks: 0, minVersion: null };
  for (const position of positions) {
    const step = request.steps[position]!;
    const field = `steps.${position}`;
    checkStepTarget(step, field, trajectory);
    // Only an index at or below the highest stored one can be a retry: skip the lookup otherwise.
    const prior =
      step.index <= (trajectory.max_index ?? -1) ? yield* tx.priorStep(trajectory, step.index) : undefined;
    if (prior) {
      checkRetry(prior, step, field, trajectory.id);
      a.duplicates++;
      continue;
    }
    checkAppend(step, field, trajectory);
    const version = step.policyVersion ?? policyVersion;
    if (yield* tx.appendStep(trajectory, step, request.channel, version, now)) a.breaks++;
    a.minVersion = a.minVersion === null ? version : Math.min(a.minVersion, version);
    trajectory.n_steps++;
    trajectory.max_index = Math.max(trajectory.max_index ?? -1, step.index);
    if (step.isLast) trajectory.last_index = step.index;
    if (step.reward !== null) {
      a.rewardSum += step.reward;
      a.rewardCount++;
    }
    a.added++;
  }
  return a;
}

/** Writes a trajectory's new counts after its steps, completing it when its last step came; whether it completed. */
function* settleTrajectory(
  tx: PoolTx,
  channel: string,
  trajectory: TrajectoryRow,
  a: Appended,
  created: boolean,
  now: number,
): Rule<boolean> {
  trajectory.prefix_breaks += a.breaks;
  // The group's oldest version can only fall when this trajectory's does (group min <= trajectory min).
  const lowered = trajectory.min_policy_version === null || a.minVersion! < trajectory.min_policy_version;
  if (lowered) trajectory.min_policy_version = a.minVersion;
  if (a.breaks > 0) tx.log.count(channel, 'prefix_breaks', a.breaks);
  tx.log.noteSubmitted(channel, trajectory.id, trajectory.group_id, a.added, now, created);
  if (trajectory.last_index !== null && trajectory.n_steps === trajectory.last_index + 1) {
    // Completing now: its rows are written once. Every step came in this submission: its rewards
    // are known without reading them back.
    const known = trajectory.n_steps === a.added ? (a.rewardCount > 0 ? a.rewardSum : null) : undefined;
    yield* finishTrajectory(tx, trajectory, { status: 'complete', reward: null }, now, {
      stepRewardSum: known,
      versionLowered: lowered,
    });
    return true;
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
  return false;
}
