import type { Step, Trajectory } from '../domain/index.js';

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
