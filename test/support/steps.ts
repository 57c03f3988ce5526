import { type NewStep, newStep } from '../../src/domain/index.js';

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
