import { newStep, type Signal, unstoredTrajectory } from '../domain/index.js';
import { CombinationEvalError, evaluateCombination } from './combination.js';
import { type RewardsConfig, scoringFor } from './config.js';
import { NotApplicableError, type TrajectoryView } from './plugin.js';

/*
 * A reward for one sample that is not stored: Claw-R1's white-box `POST /compute_reward` sends a
 * prompt's ids, the response's ids and the dataset's fields, and reads a score back. The sample is
 * scored by the functions (and combination) its channel or task declares, exactly as a stored
 * one-step trajectory with that metadata would be, and nothing is written: computing a reward is an
 * agent's right, storing it is not (docs/security.md).
 */

export interface RewardSample {
  channel: string;
  promptIds: number[];
  responseIds: number[];
  /** The ids decoded: what rule and judge functions read. */
  promptText: string;
  responseText: string;
  /** The dataset's fields: the metadata that `expected_key` paths and task ids are read from. */
  metadata: Record<string, unknown>;
}

export interface SampleReward {
  reward_score: number;
  /** Each function's value (trajectory-level; a step function's value for the one step). */
  reward_extra_info: Record<string, number>;
}

const SAMPLE_ID = 'sample';

export async function scoreSample(
  config: RewardsConfig,
  sample: RewardSample,
  signal: AbortSignal,
): Promise<SampleReward> {
  const trajectory = unstoredTrajectory({
    id: SAMPLE_ID,
    groupId: SAMPLE_ID,
    channel: sample.channel,
    taskId: typeof sample.metadata.task_id === 'string' ? sample.metadata.task_id : null,
    metadata: sample.metadata,
    nSteps: 1,
  });
  const scoring = scoringFor(config, trajectory);
  const functions = (scoring?.functions ?? []).filter((f) => f.handler !== null);
  if (!scoring || (functions.length === 0 && !scoring.combination))
    throw new NotApplicableError(`no reward function is configured for channel ${sample.channel}`);
  const step = {
    ...newStep({
      trajectoryId: SAMPLE_ID,
      groupId: SAMPLE_ID,
      index: 0,
      promptIds: sample.promptIds,
      responseIds: sample.responseIds,
    }),
    channel: sample.channel,
    policyVersion: 0,
    isLast: true,
    messages: [{ role: 'user', content: sample.promptText }],
    responseText: sample.responseText,
    createdAt: 0,
  };
  const view: TrajectoryView = { trajectory, steps: [step], signals: [] };
  const signals: Signal[] = [];
  const values: Record<string, number> = {};
  for (const fn of functions) {
    // A group function compares rollouts of one prompt; a lone sample has none to compare.
    if (fn.plugin.target === 'group') continue;
    const scores = await fn.handler!([view], { signal });
    const score = scores.find((s) => s.stepIndex === null) ?? scores.find((s) => s.stepIndex === 0);
    if (!score) continue;
    values[fn.name] = score.value;
    signals.push({
      trajectoryId: SAMPLE_ID,
      stepIndex: null,
      name: fn.name,
      value: score.value,
      source: fn.plugin.source,
      version: fn.version,
      details: {},
      createdAt: 0,
    });
  }
  let reward: number | null = null;
  const rule = scoring.combination;
  if (rule) {
    try {
      const evaluation = evaluateCombination(rule.combination, signals);
      if (!evaluation.ok)
        throw new NotApplicableError(
          `the reward of ${scoring.origin} needs ${evaluation.missing.join(', ')}, which a lone sample does not have`,
        );
      reward = evaluation.value;
    } catch (error) {
      if (error instanceof CombinationEvalError) throw new NotApplicableError(error.message);
      throw error;
    }
  } else {
    const names = Object.keys(values);
    if (names.length !== 1)
      throw new NotApplicableError(
        `${scoring.origin} has ${names.length} reward functions that score a lone sample and no combination: declare one to make a single reward`,
      );
    reward = values[names[0]!]!;
  }
  return { reward_score: reward, reward_extra_info: values };
}
