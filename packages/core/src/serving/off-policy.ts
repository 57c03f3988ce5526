import type { Step, Trajectory } from '../domain/index.js';
import type { LeasedBatch } from '../pool/types.js';

/*
 * What a trainer must know to weigh a trajectory it did not sample itself. A guided rollout
 * (ActGuide-RL) was generated with a hint in its prompt: its steps carry the prompt without the hint
 * as `training_prompt_ids`, and the trainer computes the prompt-swap importance ratio. An offline
 * purified trajectory (CLEANER) has a context the model never saw as one sequence: it comes without
 * rollout logprobs, which the trainer recomputes.
 */

/** The trajectory was not sampled by the policy from the prompt it is trained on. */
export function isOffPolicy(t: Pick<Trajectory, 'guided' | 'derivation'>): boolean {
  return t.guided || t.derivation?.purified_offline === true;
}

/** Some step has no rollout logprobs (retokenized, purified offline, or submitted without them). */
export function needsLogprobRecompute(steps: readonly Pick<Step, 'responseLogprobs'>[]): boolean {
  return steps.some((s) => s.responseLogprobs === null);
}

/**
 * A guided step with no hint-free training prompt (the gateway's chat template did not reproduce the
 * engine's ids: metadata `training_prompt_unavailable`). Trained on its hinted prompt it would teach
 * the unguided policy to act as if the hint were there, so it is never served as a training row.
 */
export function isUntrainable(t: Pick<Trajectory, 'guided'>, s: Pick<Step, 'trainingPromptIds'>): boolean {
  return t.guided && s.trainingPromptIds === null;
}

/**
 * The batch without its untrainable steps (their trajectories stay, with their rewards: a group's
 * baseline still counts them), and how many were left out: a lease reports the count.
 */
export function withoutUntrainableSteps(batch: LeasedBatch): { batch: LeasedBatch; untrainable: number } {
  let untrainable = 0;
  const groups = batch.groups.map((g) => ({
    ...g,
    trajectories: g.trajectories.map((t) => {
      const steps = t.steps.filter((s) => !isUntrainable(t.trajectory, s));
      untrainable += t.steps.length - steps.length;
      return steps.length === t.steps.length ? t : { ...t, steps };
    }),
  }));
  return { batch: untrainable === 0 ? batch : { ...batch, groups }, untrainable };
}

/**
 * The prompt a step is trained on: the hint-free one of a guided step, the sampled one otherwise. An
 * untrainable step is an error here: the lease leaves it out first (never a silent hinted prompt).
 */
export function trainingPrompt(
  t: Pick<Trajectory, 'id' | 'guided'>,
  s: Pick<Step, 'index' | 'promptIds' | 'trainingPromptIds'>,
): number[] {
  if (s.trainingPromptIds !== null) return s.trainingPromptIds;
  if (t.guided)
    throw new Error(
      `step ${s.index} of guided trajectory ${t.id} has no training prompt: it is not servable`,
    );
  return s.promptIds;
}
