import type { StepWireInput } from '../../packages/core/src/domain/index.js';
import { type NewStep, newStep } from '../../packages/core/src/domain/index.js';

export function makeStep(
  trajectoryId: string,
  groupId: string,
  index: number,
  promptIds: number[],
  responseIds: number[],
  extra: Partial<NewStep> = {},
): NewStep {
  return newStep({ trajectoryId, groupId, index, promptIds, responseIds, ...extra });
}

/** A finished episode of `n` steps whose prompts extend each other; the last step carries `reward`. */
export function episode(trajectoryId: string, groupId: string, n: number, reward = 1, seed = 1): NewStep[] {
  const steps: NewStep[] = [];
  let history = [seed, seed + 1, seed + 2];
  for (let i = 0; i < n; i++) {
    const prompt = history.concat([1000 + i, 2000 + seed]);
    const response = [3000 + i, 4000 + seed];
    steps.push(
      makeStep(trajectoryId, groupId, i, prompt, response, {
        isLast: i === n - 1,
        reward: i === n - 1 ? reward : 0,
      }),
    );
    history = prompt.concat(response);
  }
  return steps;
}

/** A trajectory of `n` steps in the wire form of `/v1/steps`, each prompt extending the last; reward on the last. */
export function wireEpisode(trajectory: string, prompt: string, n: number, reward = 1): StepWireInput[] {
  const steps: StepWireInput[] = [];
  let history = [11, 12, 13];
  for (let i = 0; i < n; i++) {
    const prompt_ids = history.concat([100 + i]);
    const response_ids = [200 + i, 300 + i];
    steps.push({
      trajectory_uid: trajectory,
      prompt_uid: prompt,
      step_index: i,
      prompt_ids,
      response_ids,
      rollout_log_probs: [-0.5, -0.25],
      reward: i === n - 1 ? reward : 0,
      is_last: i === n - 1,
    });
    history = prompt_ids.concat(response_ids);
  }
  return steps;
}
