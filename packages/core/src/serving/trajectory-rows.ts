import type { Step, Trajectory } from '../domain/index.js';
import { trainingPrompt } from './off-policy.js';
import { maskedPrefix, type PartialRollouts, responseVersions } from './versions.js';

/*
 * `rows: "trajectory"` (docs/serving.md#trajectory-rows): a trajectory's steps stitched into one
 * token sequence with a loss mask, the layout of verl's and SkyRL's multi-turn agent loops. A step
 * whose prompt does not extend the previous step's prompt + response (a prefix break: history
 * rewritten or dropped) starts a new row, so every row is a sequence the policy actually saw.
 */

export const ROW_KINDS = ['step', 'trajectory'] as const;
export type RowKind = (typeof ROW_KINDS)[number];

/** Where one step sits in its stitched row. */
export interface StepSpan {
  stepIndex: number;
  /** Offsets into the row's tokens: its new prompt tokens start at `promptStart`, its response at `responseStart`. */
  promptStart: number;
  responseStart: number;
  responseEnd: number;
  reward: number | null;
}

export interface TrajectoryRow {
  firstStep: number;
  lastStep: number;
  /** The first step's (training) prompt, then each step's new prompt tokens and its response. */
  tokens: number[];
  /** 1 on response tokens (the policy's), 0 on prompt tokens (system, user, tool, environment) and
   * on response tokens `partial_rollouts: "mask"` leaves out. */
  lossMask: Uint8Array;
  /** The engine's logprob on each response token, 0 where the mask is 0. */
  logprobs: Float32Array;
  /** The policy version of each token: a response token's own, its step's policyVersion on a prompt token. */
  versions: Int32Array;
  /** Every covered step came with rollout logprobs (else the trainer recomputes them). */
  hasLogprobs: boolean;
  /** Tokens before the first response token: the first step's prompt. */
  promptLength: number;
  spans: StepSpan[];
  /** The sum of the covered steps' rewards; null when none of them has one. */
  reward: number | null;
  /** The oldest policy version among the covered steps (what staleness is measured against). */
  policyVersion: number;
}

function extendsRow(tokens: readonly number[], prompt: readonly number[]): boolean {
  if (prompt.length < tokens.length) return false;
  for (let i = 0; i < tokens.length; i++) if (prompt[i] !== tokens[i]) return false;
  return true;
}

/**
 * Stitches one trajectory's served steps (in index order). Prompts are compared in the trainer's
 * view (a guided step's hint-free training prompt); a gap in step indices (an untrainable step left
 * out) also starts a new row, since the missing response must not be trained on as context.
 */
export function stitchTrajectory(
  trajectory: Pick<Trajectory, 'id' | 'guided'>,
  steps: readonly Step[],
  partialRollouts: PartialRollouts = 'train',
): TrajectoryRow[] {
  const rows: TrajectoryRow[] = [];
  let tokens: number[] = [];
  let mask: number[] = [];
  let logprobs: number[] = [];
  let versions: number[] = [];
  let spans: StepSpan[] = [];
  let current: { first: number; last: number; hasLogprobs: boolean; version: number; prompt: number } | null =
    null;
  const close = () => {
    if (!current) return;
    const rewards = spans.map((s) => s.reward).filter((r): r is number => r !== null);
    rows.push({
      firstStep: current.first,
      lastStep: current.last,
      tokens,
      lossMask: Uint8Array.from(mask),
      logprobs: Float32Array.from(logprobs),
      versions: Int32Array.from(versions),
      hasLogprobs: current.hasLogprobs,
      promptLength: current.prompt,
      spans,
      reward: rewards.length === 0 ? null : rewards.reduce((a, b) => a + b, 0),
      policyVersion: current.version,
    });
  };
  // Served steps come in key order; a step stored late could sit out of index order.
  const ordered = steps.every((s, i) => i === 0 || steps[i - 1]!.index < s.index)
    ? steps
    : [...steps].sort((a, b) => a.index - b.index);
  for (const step of ordered) {
    const prompt = trainingPrompt(trajectory, step);
    const continues = current !== null && step.index === current.last + 1 && extendsRow(tokens, prompt);
    if (!continues) {
      close();
      tokens = [];
      mask = [];
      logprobs = [];
      versions = [];
      spans = [];
      current = {
        first: step.index,
        last: step.index,
        hasLogprobs: true,
        version: step.policyVersion,
        prompt: prompt.length,
      };
    }
    const row = current!;
    row.last = step.index;
    row.hasLogprobs &&= step.responseLogprobs !== null;
    row.version = Math.min(row.version, step.policyVersion);
    const promptStart = tokens.length;
    for (let i = promptStart; i < prompt.length; i++) {
      tokens.push(prompt[i]!);
      mask.push(0);
      logprobs.push(0);
      versions.push(step.policyVersion);
    }
    const responseStart = tokens.length;
    const lp = step.responseLogprobs;
    const produced = responseVersions(step);
    const masked = maskedPrefix(step, partialRollouts);
    for (const [k, id] of step.responseIds.entries()) {
      tokens.push(id);
      // A masked token reads like context: loss mask 0, logprob 0 (null in json).
      mask.push(k < masked ? 0 : 1);
      logprobs.push(k < masked ? 0 : (lp?.[k] ?? 0));
      versions.push(produced[k]!);
    }
    spans.push({
      stepIndex: step.index,
      promptStart,
      responseStart,
      responseEnd: tokens.length,
      reward: step.reward,
    });
  }
  close();
  return rows;
}
