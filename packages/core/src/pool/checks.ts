import { ConflictError, type LabelInput, type NewStep, ValidationError } from '../domain/index.js';
import type { LabelCurrentRow, PriorStep, TrajectoryRow } from '../store/rows.js';
import { STEP_KEY_SPAN, stepFingerprint } from '../store/step-codec.js';
import type { CallFailure, CreateTrajectoryInput, Refusal } from '../store/types.js';

// The pool's checks on what a rule is asked to store, and the rows and event data it writes: pure
// functions the rules in this folder call, whichever store runs them.

/** A submission's group size when it names none: the first step's metadata may declare it. */
export function declaredRollouts(step: NewStep): number | null {
  const declared = step.metadata.n_rollouts;
  return Number.isInteger(declared) && (declared as number) >= 1 && (declared as number) <= 4096
    ? (declared as number)
    : null;
}

/** Refuses a step that cannot join its trajectory (index out of range, another prompt). */
export function checkStepTarget(step: NewStep, field: string, trajectory: TrajectoryRow): void {
  if (step.index >= STEP_KEY_SPAN) {
    throw new ValidationError(`${field}.step_index: must be below ${STEP_KEY_SPAN}`, `${field}.step_index`);
  }
  if (step.groupId !== trajectory.group_id) {
    throw new ConflictError(
      `${field}.prompt_uid: trajectory ${trajectory.id} belongs to prompt '${trajectory.group_id}', not '${step.groupId}'`,
      `${field}.prompt_uid`,
    );
  }
}

/** A retried step must equal the stored one; refuses one that differs. */
export function checkRetry(prior: PriorStep, step: NewStep, field: string, trajectoryId: string): void {
  const same =
    prior.content_hash === stepFingerprint(step) &&
    prior.prompt_len === step.promptIds.length &&
    prior.response_len === step.responseIds.length &&
    prior.is_last === (step.isLast ? 1 : 0) &&
    prior.reward === step.reward;
  if (!same) {
    throw new ConflictError(
      `${field}: step ${step.index} of trajectory ${trajectoryId} was already stored with different tokens, is_last or reward`,
      field,
    );
  }
}

/** Refuses a new step for a finished trajectory or beyond its last step. */
export function checkAppend(step: NewStep, field: string, trajectory: TrajectoryRow): void {
  if (trajectory.status !== 'open') {
    throw new ConflictError(`${field}: trajectory ${trajectory.id} is already ${trajectory.status}`, field);
  }
  const lastIndex = trajectory.last_index;
  if (
    (lastIndex !== null && step.index > lastIndex) ||
    (step.isLast && (trajectory.max_index ?? -1) > step.index)
  ) {
    throw new ConflictError(
      `${field}.step_index: step ${step.index} lies beyond the trajectory's last step`,
      field,
    );
  }
}

/** A new trajectory's row before it is inserted (seq assigned by the database). */
export function newTrajectoryRow(input: CreateTrajectoryInput, now: number): TrajectoryRow {
  return {
    seq: 0,
    id: input.id,
    channel: input.channel,
    group_id: input.groupId,
    // Gym runs name the task in the metadata; the column makes it a filter.
    task_id: input.taskId ?? (typeof input.metadata.task_id === 'string' ? input.metadata.task_id : null),
    status: 'open',
    reward: null,
    metadata: JSON.stringify(input.metadata),
    n_steps: 0,
    max_index: null,
    last_index: null,
    prefix_breaks: 0,
    min_policy_version: null,
    created_at: now,
    touched_at: now,
    completed_at: null,
    guided: input.guided ? 1 : 0,
    guidance_k: input.guidanceK ?? null,
    probe: input.probe ? 1 : 0,
    derived_from: input.derivedFrom ?? null,
    derivation: input.derivation ? JSON.stringify(input.derivation) : null,
  };
}

/** The current label a patch leaves (given fields override, omitted ones stay). */
export function foldLabel(
  prev: LabelCurrentRow | undefined,
  input: LabelInput,
  trajectoryId: string,
  key: number,
  now: number,
): LabelCurrentRow {
  return {
    trajectory_id: trajectoryId,
    step_index: key,
    quality: input.quality !== undefined ? input.quality : (prev?.quality ?? null),
    trainable:
      input.trainable !== undefined
        ? input.trainable === null
          ? null
          : input.trainable
            ? 1
            : 0
        : (prev?.trainable ?? null),
    tags: input.tags !== undefined ? JSON.stringify(input.tags) : (prev?.tags ?? '[]'),
    note: input.note !== undefined ? input.note : (prev?.note ?? null),
    updated_at: now,
  };
}

/** The event of a label change. */
export function labelChangedData(trajectoryId: string, stepIndex: number | null, next: LabelCurrentRow) {
  return {
    trajectory_uid: trajectoryId,
    step_index: stepIndex,
    quality: next.quality,
    trainable: next.trainable === null ? null : next.trainable === 1,
    tags: JSON.parse(next.tags),
  };
}

/** The event of a refused agent request. */
export function refusalData(refusal: Refusal): Record<string, unknown> {
  return {
    trajectory_uid: refusal.trajectoryId,
    by: refusal.by,
    attempts: refusal.attempts,
    count: refusal.count,
    reason: refusal.reason,
  };
}

/** The event of a failed LLM call. */
export function callFailedData(failure: CallFailure): Record<string, unknown> {
  return {
    trajectory_uid: failure.trajectoryId,
    group_id: failure.groupId,
    kind: failure.kind,
    engine_id: failure.engineId,
    status: failure.status,
    message: failure.message,
    ...(failure.partial
      ? {
          prompt_tokens: failure.partial.promptTokens,
          response_ids: failure.partial.responseIds,
          response_text: failure.partial.responseText,
        }
      : {}),
  };
}

/** A trajectory may change group or channel only before its first step, and only out of a group of its own. */
export function checkMovable(
  trajectory: Pick<TrajectoryRow, 'id' | 'n_steps' | 'group_id'>,
  groupSize: number,
): void {
  if (trajectory.n_steps > 0)
    throw new ConflictError(
      `trajectory ${trajectory.id} has steps already: its group and channel are fixed from its first step on`,
      'prompt_uid',
    );
  if (groupSize > 1)
    throw new ConflictError(
      `trajectory ${trajectory.id} shares group ${trajectory.group_id} with other rollouts: it cannot leave it`,
      'prompt_uid',
    );
}
