import type { ChannelConfig, Step } from '../domain/index.js';

/*
 * Partial rollouts (docs/datapool.md#partial-rollouts): a generation that spanned a weight switch
 * has response tokens of several policy versions (`versionSpans`). Every format serves the version
 * of each token; a channel with `partial_rollouts: "mask"` leaves the tokens before the step's last
 * switch out of the loss, as slime's --mask-offpolicy-in-partial-rollout does.
 */

export type PartialRollouts = ChannelConfig['partial_rollouts'];

type Versioned = Pick<Step, 'responseIds' | 'versionSpans' | 'policyVersion'>;

/** The policy version of each response token: the spans expanded, or policyVersion throughout. */
export function responseVersions(step: Versioned): Int32Array {
  const n = step.responseIds.length;
  const out = new Int32Array(n).fill(step.policyVersion);
  if (!step.versionSpans) return out;
  let at = 0;
  for (const [version, count] of step.versionSpans) {
    // Ingest checks that the counts cover the response; a short list leaves the rest the last run's.
    out.fill(version, Math.min(at, n));
    at += count;
  }
  return out;
}

/** How many leading response tokens `mode` leaves out of the loss: all spans but the last under `mask`. */
export function maskedPrefix(step: Versioned, mode: PartialRollouts): number {
  const spans = step.versionSpans;
  if (mode !== 'mask' || !spans || spans.length < 2) return 0;
  let n = 0;
  for (let i = 0; i < spans.length - 1; i++) n += spans[i]![1];
  return Math.min(n, step.responseIds.length);
}

/** The loss mask over a step's response: null when every token is trained on. */
export function responseLossMask(step: Versioned, mode: PartialRollouts): Uint8Array | null {
  const masked = maskedPrefix(step, mode);
  if (masked === 0) return null;
  return new Uint8Array(step.responseIds.length).fill(1, masked);
}
