import { StepwiseError } from '../domain/index.js';
import type { LeasedBatch } from '../pool/types.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import type { NpyArray } from './npz.js';
import { isOffPolicy, trainingPrompt } from './off-policy.js';
import { type RowKind, stitchTrajectory } from './trajectory-rows.js';
import { type PartialRollouts, responseLossMask, responseVersions } from './versions.js';

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
  /** The channel's setting: `mask` zeroes the loss mask before a step's last weight switch. */
  partialRollouts?: PartialRollouts;
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
  /** The policy version of each token of `response`. */
  versions: ArrayLike<number>;
  /** Loss mask over `response`; null: every response token is trained on. */
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
  const { rows, groupIds, trajectoryUids } = collectRows(batch, options);
  let longestPrompt = 0;
  let longestResponse = 0;
  for (const r of rows) {
    longestPrompt = Math.max(longestPrompt, r.prompt.length, r.training.length);
    longestResponse = Math.max(longestResponse, r.response.length);
  }
  const P = options.promptLength ?? longestPrompt;
  const R = options.responseLength ?? longestResponse;
  const { kept, truncated, dropped } = fitRows(rows, P, R, options.overlong, trajectoryUids);
  const arrays = layOut(kept, P, R, options);
  Object.assign(arrays, {
    group_ids: { dtype: '<U', shape: [groupIds.length], data: groupIds },
    trajectory_uids: { dtype: '<U', shape: [trajectoryUids.length], data: trajectoryUids },
  } satisfies Record<string, NpyArray>);
  return { arrays, rows: kept.length, truncated, dropped, promptLength: P, responseLength: R };
}

/** The batch's rows before padding: one per step, or per stitched sequence with `rows: "trajectory"`. */
function collectRows(
  batch: LeasedBatch,
  options: PaddedOptions,
): { rows: Row[]; groupIds: string[]; trajectoryUids: string[] } {
  const rows: Row[] = [];
  const groupIds: string[] = [];
  const trajectoryUids: string[] = [];
  const mode = options.partialRollouts ?? 'train';
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
        for (const row of stitchTrajectory(t.trajectory, t.steps, mode)) {
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
            versions: row.versions.subarray(p),
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
          versions: responseVersions(step),
          mask: responseLossMask(step, mode),
          scores: rl > 0 ? [{ start: 0, end: rl, reward: step.reward ?? 0 }] : [],
          outcome: outcomes[i]!,
          advantage,
        });
      }
    });
  }
  return { rows, groupIds, trajectoryUids };
}

/** Applies `overlong` to the rows wider than P or R: throws, drops or truncates them. */
function fitRows(
  rows: Row[],
  P: number,
  R: number,
  overlong: OverlongPolicy,
  trajectoryUids: readonly string[],
): { kept: (Row & { cut: boolean })[]; truncated: number; dropped: number } {
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
    else if (overlong === 'reject') {
      const length =
        over === 'prompt_length' ? Math.max(r.prompt.length, r.training.length) : r.response.length;
      const which = r.lastStep === r.step ? `step ${r.step}` : `the row of steps ${r.step}-${r.lastStep}`;
      throw new OverlongError(
        `${over}: ${which} of trajectory ${trajectoryUids[r.trajectory]} has ${length} ${over === 'prompt_length' ? 'prompt' : 'response'} tokens, more than ${over === 'prompt_length' ? P : R} (ask for overlong "truncate" or "drop", or a larger ${over})`,
        over,
      );
    } else if (overlong === 'drop') dropped++;
    else {
      truncated++;
      kept.push({
        ...r,
        cut: true,
        prompt: r.prompt.length > P ? r.prompt.slice(r.prompt.length - P) : r.prompt,
        training: r.training.length > P ? r.training.slice(r.training.length - P) : r.training,
        response: r.response.slice(0, R),
        logprobs: r.logprobs ? Array.prototype.slice.call(r.logprobs, 0, R) : null,
        versions: Array.prototype.slice.call(r.versions, 0, R),
        mask: r.mask ? r.mask.subarray(0, R) : null,
      });
    }
  }
  return { kept, truncated, dropped };
}

/** The padded members (every one but the id lists), row by row. */
function layOut(
  kept: readonly (Row & { cut: boolean })[],
  P: number,
  R: number,
  options: PaddedOptions,
): Record<string, NpyArray> {
  const B = kept.length;
  const L = P + R;
  const a = newMembers(B, P, R, options.padTokenId);
  for (const [b, r] of kept.entries()) fillRow(a, r, b, P, R);
  const arrays: Record<string, NpyArray> = {
    input_ids: { dtype: '<i4', shape: [B, L], data: a.inputIds },
    attention_mask: { dtype: '|u1', shape: [B, L], data: a.attention },
    position_ids: { dtype: '<i4', shape: [B, L], data: a.positions },
    prompts: { dtype: '<i4', shape: [B, P], data: a.prompts },
    responses: { dtype: '<i4', shape: [B, R], data: a.responses },
    response_mask: { dtype: '|u1', shape: [B, R], data: a.responseMask },
    rm_scores: { dtype: '<f4', shape: [B, R], data: a.scores },
    rollout_log_probs: { dtype: '<f4', shape: [B, R], data: a.logprobs },
    response_versions: { dtype: '<i4', shape: [B, R], data: a.versions },
  };
  if (options.advantage) arrays.advantages = { dtype: '<f4', shape: [B, R], data: a.advantages };
  Object.assign(arrays, {
    prompt_lengths: { dtype: '<i4', shape: [B], data: a.promptLengths },
    response_lengths: { dtype: '<i4', shape: [B], data: a.responseLengths },
    truncated: { dtype: '|u1', shape: [B], data: a.cut },
    has_log_probs: { dtype: '|u1', shape: [B], data: a.hasLogprobs },
    // ActGuide-RL's training view (left-padded like `prompts`) and the off-policy mask.
    training_prompts: { dtype: '<i4', shape: [B, P], data: a.trainingPrompts },
    training_prompt_lengths: { dtype: '<i4', shape: [B], data: a.trainingPromptLengths },
    off_policy: { dtype: '|u1', shape: [B], data: a.offPolicy },
    group_index: { dtype: '<i4', shape: [B], data: a.groupIndex },
    trajectory_index: { dtype: '<i4', shape: [B], data: a.trajectoryIndex },
    ...(options.rows === 'trajectory'
      ? {
          first_step: { dtype: '<i4', shape: [B], data: a.stepIndex },
          last_step: { dtype: '<i4', shape: [B], data: a.lastStep },
        }
      : { step_index: { dtype: '<i4', shape: [B], data: a.stepIndex } }),
    policy_version: { dtype: '<i4', shape: [B], data: a.rowVersions },
    trajectory_rewards: { dtype: '<f4', shape: [B], data: a.outcomes },
  } satisfies Record<string, NpyArray>);
  return arrays;
}

/** The members' buffers, zeroed (ids filled with the pad id), for B rows of widths P and R. */
function newMembers(B: number, P: number, R: number, pad: number) {
  const L = P + R;
  return {
    inputIds: new Int32Array(B * L).fill(pad),
    attention: new Uint8Array(B * L),
    positions: new Int32Array(B * L),
    prompts: new Int32Array(B * P),
    trainingPrompts: new Int32Array(B * P).fill(pad),
    trainingPromptLengths: new Int32Array(B),
    offPolicy: new Uint8Array(B),
    responses: new Int32Array(B * R),
    responseMask: new Uint8Array(B * R),
    scores: new Float32Array(B * R),
    logprobs: new Float32Array(B * R),
    versions: new Int32Array(B * R),
    advantages: new Float32Array(B * R),
    promptLengths: new Int32Array(B),
    responseLengths: new Int32Array(B),
    cut: new Uint8Array(B),
    hasLogprobs: new Uint8Array(B),
    groupIndex: new Int32Array(B),
    trajectoryIndex: new Int32Array(B),
    stepIndex: new Int32Array(B),
    lastStep: new Int32Array(B),
    rowVersions: new Int32Array(B),
    outcomes: new Float32Array(B),
  };
}
type Members = ReturnType<typeof newMembers>;

/** Writes row b into the members. */
function fillRow(a: Members, r: Row & { cut: boolean }, b: number, P: number, R: number): void {
  const L = P + R;
  const row = b * L;
  const pl = r.prompt.length;
  const rl = r.response.length;
  const start = P - pl; // left padding
  a.inputIds.set(r.prompt, row + start);
  a.inputIds.set(r.response, row + P);
  a.attention.fill(1, row + start, row + P + rl);
  if (r.mask) {
    a.responseMask.set(r.mask, b * R);
    for (let j = 0; j < rl; j++) if (r.mask[j]) a.advantages[b * R + j] = r.advantage;
  } else {
    a.responseMask.fill(1, b * R, b * R + rl);
    a.advantages.fill(r.advantage, b * R, b * R + rl);
  }
  if (r.logprobs)
    a.logprobs.set(
      r.logprobs.length > rl ? Array.prototype.slice.call(r.logprobs, 0, rl) : r.logprobs,
      b * R,
    );
  a.versions.set(r.versions, b * R);
  // verl's position ids: clip(cumsum(mask) - 1, 0). Real tokens count 0, 1, 2, ... from the first
  // prompt token; left padding reads 0, right padding repeats the last position.
  const last = Math.max(0, pl + rl - 1);
  for (let j = 0; j < pl + rl; j++) a.positions![row + start + j] = j;
  a.positions.fill(last, row + P + rl, row + L);
  a.prompts.set(a.inputIds.subarray(row, row + P), b * P);
  a.trainingPrompts.set(r.training, b * P + P - r.training.length);
  a.trainingPromptLengths![b] = r.training.length;
  a.offPolicy![b] = r.offPolicy ? 1 : 0;
  a.responses.set(a.inputIds.subarray(row + P, row + L), b * R);
  // A truncated row loses the rewards of steps cut off entirely (the row is flagged).
  for (const { start, end, reward } of r.scores)
    if (start < rl) a.scores![b * R + Math.min(end, rl) - 1] = reward;
  a.promptLengths![b] = pl;
  a.responseLengths![b] = rl;
  a.cut![b] = r.cut ? 1 : 0;
  a.hasLogprobs![b] = r.logprobs ? 1 : 0;
  a.groupIndex![b] = r.group;
  a.trajectoryIndex![b] = r.trajectory;
  a.stepIndex![b] = r.step;
  a.lastStep![b] = r.lastStep;
  a.rowVersions![b] = r.version;
  a.outcomes![b] = r.outcome;
}
