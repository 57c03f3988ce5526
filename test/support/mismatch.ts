import { expect } from 'vitest';
import { callJson } from './http.js';

/* Steps with an engine and version, a lease, and a trainer's mismatch report, over HTTP. */

export interface Rollout {
  uid: string;
  engine: string | null;
  /** One step per entry: its policy version. */
  versions: number[];
  /** The engine's log-probs of each step's two response tokens (default -0.25, -0.5). */
  logprobs?: number[][];
}

/** One group of rollouts, each step a prompt and two response tokens, the last step rewarded. */
export async function submitGroup(
  url: string,
  channel: string,
  group: string,
  rollouts: Rollout[],
): Promise<void> {
  const steps = rollouts.flatMap((r, t) =>
    r.versions.map((version, i) => ({
      trajectory_uid: r.uid,
      prompt_uid: group,
      step_index: i,
      prompt_ids: [100 + t, 200 + i, 300],
      response_ids: [400 + 10 * t + i, 500 + 10 * t + i],
      rollout_log_probs: r.logprobs?.[i] ?? [-0.25, -0.5],
      policy_version: version,
      engine_id: r.engine,
      is_last: i === r.versions.length - 1,
      reward: i === r.versions.length - 1 ? t : null,
    })),
  );
  const { status, json } = await callJson('POST', `${url}/v1/steps`, {
    steps,
    channel,
    n_rollouts: rollouts.length,
  });
  expect(status, JSON.stringify(json)).toBe(200);
}

export async function lease(url: string, channel: string): Promise<{ id: string; groups: string[] }> {
  const { status, json } = await callJson('POST', `${url}/v1/batches/lease`, { channel, batch_size: 1 });
  expect(status, JSON.stringify(json)).toBe(200);
  return { id: json.lease_id, groups: json.groups.map((g: { group_id: string }) => g.group_id) };
}

export interface Report {
  trajectory_uid: string;
  step_index: number;
  tokens: number;
  k1: number;
  k3: number;
  max_abs_diff: number;
  masked_fraction: number;
}
export const step = (
  uid: string,
  index: number,
  tokens: number,
  k1: number,
  k3: number,
  max: number,
  masked: number,
) =>
  ({
    trajectory_uid: uid,
    step_index: index,
    tokens,
    k1,
    k3,
    max_abs_diff: max,
    masked_fraction: masked,
  }) as Report;

export const report = (url: string, leaseId: string, steps: unknown) =>
  callJson('POST', `${url}/v1/batches/${leaseId}/mismatch`, { steps });
