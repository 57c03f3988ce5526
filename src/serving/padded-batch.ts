import { StepwiseError } from '../domain/index.js';
import type { LeasedBatch } from '../store/store.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import type { NpyArray } from './npz.js';
import { isOffPolicy, trainingPrompt } from './off-policy.js';
import { type RowKind, stitchTrajectory } from './trajectory-rows.js';

/*
 * verl's padded layout: one row per step, the prompt left-padded to P and the response right-padded
 * to R, with the masks, positions, scores and logprobs verl's PPO update reads (docs/serving.md).
 */

export type OverlongPolicy = 'reject' | 'truncate' | 'drop';

export interface PaddedOptions {
  promptLength?: number;
  responseLength?: number;
  overlong: OverlongPolicy;
  padTokenId: number;
  advantage?: AdvantageEstimator;
  /** `trajectory`: stitched rows (trajectory-rows.ts) split as verl's multi-turn agent loop does */
  rows?: RowKind;
}

export interface PaddedBatch {
  arrays: Record<string, NpyArray>;
  rows: number;
  truncated: number;
  dropped: number;
  promptLength: number;
  responseLength: number;
}

interface Row {
  group: number;
  trajectory: number;
  step: number;
  /** The last step the row covers (= step for step rows). */
  lastStep: number;
  version: number;
  prompt: number[];
  /** A guided step's prompt without the hint; the prompt itself for every other step. */
  training: number[];
  offPolicy: boolean;
  response: number[];
  logprobs: ArrayLike<number> | null;
  /** Loss mask over `response`; null: every response token is trained on (a step row). */
  mask: Uint8Array | null;
  /** Per step: its response's offsets in `response` [start, end) and its reward, which goes on its
   * last response token (the last one kept when truncation cuts it). */
  scores: { start: number; end: number; reward: number }[];
  outcome: number;
  advantage: number;
}

/** A step longer than the batch's widths, under `overlong: reject` (422: the request was valid). */
export class OverlongError extends StepwiseError {
  override readonly name = 'OverlongError';
  constructor(message: string, field: 'prompt_length' | 'response_length') {
    super(message, 422, 'overlong_step', field);
  }
}

export function batchToPadded(batch: LeasedBatch, options: PaddedOptions): PaddedBatch {
  const rows: Row[] = [];
  const groupIds: string[] = [];
  const trajectoryUids: string[] = [];
  for (const served of batch.groups) {
    const g = groupIds.push(served.group.id) - 1;
    const rewards = served.trajectories.map((t) => t.trajectory.reward);
    const { advantages, outcomes } = groupAdvantages(rewards, options.advantage ?? 'grpo');
    served.trajectories.forEach((t, i) => {
      const ti = trajectoryUids.push(t.trajectory.id) - 1;
      const offPolicy = isOffPolicy(t.trajectory);
      const advantage = options.advantage ? advantages[i]! : 0;
      if (options.rows === 'trajectory') {
        // verl's multi-turn split: the first prompt, then everything after it as the "response" with
        // its loss mask; the sequence is already the training view (hint-free prompts).
        for (const row of stitchTrajectory(t.trajectory, t.steps)) {
          const prompt = row.tokens.slice(0, row.promptLength);
          const p = row.promptLength;
          rows.push({
            group: g,
            trajectory: ti,
            step: row.firstStep,
            lastStep: row.lastStep,
            version: row.policyVersion,
            prompt,
            training: prompt,
            offPolicy,
            response: row.tokens.slice(p),
            logprobs: row.hasLogprobs ? row.logprobs.subarray(p) : null,
            mask: row.lossMask.subarray(p),
            scores: row.spans
              .filter((s) => s.responseEnd > s.responseStart)
              .map((s) => ({ start: s.responseStart - p, end: s.responseEnd - p, reward: s.reward ?? 0 })),
            outcome: outcomes[i]!,
            advantage,
          });
        }
        return;
      }
      for (const step of t.steps) {
        const rl = step.responseIds.length;
        rows.push({
          group: g,
          trajectory: ti,
          step: step.index,
          lastStep: step.index,
          version: step.policyVersion,
          prompt: step.promptIds,
          training: trainingPrompt(t.trajectory, step),
          offPolicy,
          response: step.responseIds,
          logprobs: step.responseLogprobs,
          mask: null,
          scores: rl > 0 ? [{ start: 0, end: rl, reward: step.reward ?? 0 }] : [],
          outcome: outcomes[i]!,
          advantage,
        });
      }
    });
  }
  let longestPrompt = 0;
  let longestResponse = 0;
  for (const r of rows) {
    longestPrompt = Math.max(longestPrompt, r.prompt.length, r.training.length);
    longestResponse = Math.max(longestResponse, r.response.length);
  }
  const P = options.promptLength ?? longestPrompt;
  const R = options.responseLength ?? longestResponse;
  let truncated = 0;
  let dropped = 0;
  const kept: (Row & { cut: boolean })[] = [];
  for (const r of rows) {
    const over =
      Math.max(r.prompt.length, r.training.length) > P
        ? 'prompt_length'
        : r.response.length > R
          ? 'response_length'
          : null;
    if (over === null) kept.push({ ...r, cut: false });
    else if (options.overlong === 'reject') {
      const length =
        over === 'prompt_length' ? Math.max(r.prompt.length, r.training.length) : r.response.length;
      const which = r.lastStep === r.step ? `step ${r.step}` : `the row of steps ${r.step}-${r.lastStep}`;
      throw new OverlongError(
        `${over}: ${which} of trajectory ${trajectoryUids[r.trajectory]} has ${length} ${over === 'prompt_length' ? 'prompt' : 'response'} tokens, more than ${over === 'prompt_length' ? P : R} (ask for overlong "truncate" or "drop", or a larger ${over})`,
        over,
      );
    } else if (options.overlong === 'drop') dropped++;
    else {
      truncated++;
      kept.push({
        ...r,
        cut: true,
        prompt: r.prompt.length > P ? r.prompt.slice(r.prompt.length - P) : r.prompt,
        training: r.training.length > P ? r.training.slice(r.training.length - P) : r.training,
        response: r.response.slice(0, R),
        logprobs: r.logprobs ? Array.prototype.slice.call(r.logprobs, 0, R) : null,
        mask: r.mask ? r.mask.subarray(0, R) : null,
      });
    }
  }
  const B = kept.length;
  const L = P + R;
  const inputIds = new Int32Array(B * L).fill(options.padTokenId);
  const attention = new Uint8Array(B * L);
  const positions = new Int32Array(B * L);
  const prompts = new Int32Array(B * P);
  const trainingPrompts = new Int32Array(B * P).fill(options.padTokenId);
  const trainingPromptLengths = new Int32Array(B);
  const offPolicy = new Uint8Array(B);
  const responses = new Int32Array(B * R);
  const responseMask = new Uint8Array(B * R);
  const scores = new Float32Array(B * R);
  const logprobs = new Float32Array(B * R);
  const advantages = new Float32Array(B * R);
  const promptLengths = new Int32Array(B);
  const responseLengths = new Int32Array(B);
  const cut = new Uint8Array(B);
  const hasLogprobs = new Uint8Array(B);
  const groupIndex = new Int32Array(B);
  const trajectoryIndex = new Int32Array(B);
  const stepIndex = new Int32Array(B);
  const lastStep = new Int32Array(B);
  const versions = new Int32Array(B);
  const outcomes = new Float32Array(B);
  kept.forEach((r, b) => {
    const row = b * L;
    const pl = r.prompt.length;
    const rl = r.response.length;
    const start = P - pl; // left padding
    inputIds.set(r.prompt, row + start);
    inputIds.set(r.response, row + P);
    attention.fill(1, row + start, row + P + rl);
    if (r.mask) {
      responseMask.set(r.mask, b * R);
      for (let j = 0; j < rl; j++) if (r.mask[j]) advantages[b * R + j] = r.advantage;
    } else {
      responseMask.fill(1, b * R, b * R + rl);
      advantages.fill(r.advantage, b * R, b * R + rl);
    }
    if (r.logprobs)
      logprobs.set(
        r.logprobs.length > rl ? Array.prototype.slice.call(r.logprobs, 0, rl) : r.logprobs,
        b * R,
      );
    // verl's position ids: clip(cumsum(mask) - 1, 0). Real tokens count 0, 1, 2, ... from the first
    // prompt token; left padding reads 0, right padding repeats the last position.
    const last = Math.max(0, pl + rl - 1);
    for (let j = 0; j < pl + rl; j++) positions[row + start + j] = j;
    positions.fill(last, row + P + rl, row + L);
    prompts.set(inputIds.subarray(row, row + P), b * P);
    trainingPrompts.set(r.training, b * P + P - r.training.length);
    trainingPromptLengths[b] = r.training.length;
    offPolicy[b] = r.offPolicy ? 1 : 0;
    responses.set(inputIds.subarray(row + P, row + L), b * R);
    // A truncated row loses the rewards of steps cut off entirely (the row is flagged).
    for (const { start, end, reward } of r.scores)
      if (start < rl) scores[b * R + Math.min(end, rl) - 1] = reward;
    promptLengths[b] = pl;
    responseLengths[b] = rl;
    cut[b] = r.cut ? 1 : 0;
    hasLogprobs[b] = r.logprobs ? 1 : 0;
    groupIndex[b] = r.group;
    trajectoryIndex[b] = r.trajectory;
    stepIndex[b] = r.step;
    lastStep[b] = r.lastStep;
    versions[b] = r.version;
    outcomes[b] = r.outcome;
  });
  const arrays: Record<string, NpyArray> = {
    input_ids: { dtype: '<i4', shape: [B, L], data: inputIds },
    attention_mask: { dtype: '|u1', shape: [B, L], data: attention },
    position_ids: { dtype: '<i4', shape: [B, L], data: positions },
    prompts: { dtype: '<i4', shape: [B, P], data: prompts },
    responses: { dtype: '<i4', shape: [B, R], data: responses },
    response_mask: { dtype: '|u1', shape: [B, R], data: responseMask },
    rm_scores: { dtype: '<f4', shape: [B, R], data: scores },
    rollout_log_probs: { dtype: '<f4', shape: [B, R], data: logprobs },
  };
  if (options.advantage) arrays.advantages = { dtype: '<f4', shape: [B, R], data: advantages };
  Object.assign(arrays, {
    prompt_lengths: { dtype: '<i4', shape: [B], data: promptLengths },
    response_lengths: { dtype: '<i4', shape: [B], data: responseLengths },
    truncated: { dtype: '|u1', shape: [B], data: cut },
    has_log_probs: { dtype: '|u1', shape: [B], data: hasLogprobs },
    // ActGuide-RL's training view (left-padded like `prompts`) and the off-policy mask.
    training_prompts: { dtype: '<i4', shape: [B, P], data: trainingPrompts },
    training_prompt_lengths: { dtype: '<i4', shape: [B], data: trainingPromptLengths },
    off_policy: { dtype: '|u1', shape: [B], data: offPolicy },
    group_index: { dtype: '<i4', shape: [B], data: groupIndex },
    trajectory_index: { dtype: '<i4', shape: [B], data: trajectoryIndex },
    ...(options.rows === 'trajectory'
      ? {
          first_step: { dtype: '<i4', shape: [B], data: stepIndex },
          last_step: { dtype: '<i4', shape: [B], data: lastStep },
        }
      : { step_index: { dtype: '<i4', shape: [B], data: stepIndex } }),
    policy_version: { dtype: '<i4', shape: [B], data: versions },
    trajectory_rewards: { dtype: '<f4', shape: [B], data: outcomes },
    group_ids: { dtype: '<U', shape: [groupIds.length], data: groupIds },
    trajectory_uids: { dtype: '<U', shape: [trajectoryUids.length], data: trajectoryUids },
  } satisfies Record<string, NpyArray>);
  return { arrays, rows: B, truncated, dropped, promptLength: P, responseLength: R };
}
