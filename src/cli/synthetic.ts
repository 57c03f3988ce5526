import type { StepWireInput } from '@stepwise/core/domain/index.js';

export { seededRandom } from '@stepwise/core/util/random.js';

export interface SyntheticTrajectoryOptions {
  trajectoryUid: string;
  promptUid: string;
  steps: number;
  systemTokens: number;
  observationTokens: number;
  responseTokens: number;
  /** Probability that a step rewrites its context (drops the tail of the previous sequence). */
  breakProbability?: number;
  policyVersion?: number;
  withLogprobs?: boolean;
  random: () => number;
}

/**
 * The steps of one multi-turn episode as a white-box agent would submit them: each prompt extends
 * the previous prompt + response with a fresh observation, like a chat template does.
 */
export function syntheticTrajectory(o: SyntheticTrajectoryOptions): StepWireInput[] {
  const token = () => Math.floor(o.random() * 151_000);
  const tokens = (n: number) => Array.from({ length: n }, token);
  let history = tokens(o.systemTokens);
  const steps: StepWireInput[] = [];
  for (let i = 0; i < o.steps; i++) {
    const prompt = history.concat(tokens(o.observationTokens));
    const response = tokens(o.responseTokens);
    const last = i === o.steps - 1;
    steps.push({
      trajectory_uid: o.trajectoryUid,
      prompt_uid: o.promptUid,
      step_index: i,
      prompt_ids: prompt,
      response_ids: response,
      reward: last ? (o.random() < 0.5 ? 1 : 0) : 0,
      policy_version: o.policyVersion,
      is_last: last,
      rollout_log_probs: o.withLogprobs ? response.map(() => -o.random() * 3) : undefined,
      finish_reason: last ? 'stop' : 'tool_calls',
    });
    history = prompt.concat(response);
    if (o.breakProbability && o.random() < o.breakProbability) {
      // The agent rewrote its context: the next prompt shares only part of this sequence.
      history = history.slice(0, Math.max(0, history.length - o.observationTokens));
    }
  }
  return steps;
}
