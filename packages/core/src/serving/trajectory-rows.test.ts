import { describe, expect, it } from 'vitest';
import { newStep, type Step } from '../domain/index.js';
import { stitchTrajectory } from './trajectory-rows.js';

/** A served step: the stored fields a lease hands to serving. */
function served(index: number, prompt: number[], response: number[], extra: Partial<Step> = {}): Step {
  return {
    ...newStep({ trajectoryId: 't', groupId: 'g', index, promptIds: prompt, responseIds: response }),
    channel: 'train',
    policyVersion: 0,
    createdAt: 0,
    ...extra,
  };
}

const plain = { id: 't', guided: false };

describe('stitchTrajectory', () => {
  it('a gap in step indices (an untrainable step left out) starts a new row even where tokens extend', () => {
    const rows = stitchTrajectory(plain, [
      served(0, [1], [2]),
      // Step 1 was left out; step 2's prompt contains its response (5), which must not become context.
      served(2, [1, 2, 4, 5, 6], [7]),
    ]);
    expect(rows.map((r) => [r.firstStep, r.lastStep, r.tokens, Array.from(r.lossMask)])).toEqual([
      [0, 0, [1, 2], [0, 1]],
      [2, 2, [1, 2, 4, 5, 6, 7], [0, 0, 0, 0, 0, 1]],
    ]);
  });

  it('orders steps by index and takes the oldest policy version and the sum of the rewards', () => {
    const rows = stitchTrajectory(plain, [
      served(1, [1, 2, 3], [4], { policyVersion: 5, reward: 0.5 }),
      served(0, [1], [2], { policyVersion: 3, reward: 0.25 }),
    ]);
    expect(rows).toHaveLength(1);
    expect([rows[0]!.tokens, rows[0]!.policyVersion, rows[0]!.reward]).toEqual([[1, 2, 3, 4], 3, 0.75]);
  });

  it("stitches a guided trajectory's hint-free training prompts, not the hinted ones", () => {
    const guided = { id: 't', guided: true };
    const rows = stitchTrajectory(guided, [
      served(0, [1, 90, 2], [3], { trainingPromptIds: [1, 2] }),
      served(1, [1, 90, 2, 3, 4], [5], { trainingPromptIds: [1, 2, 3, 4] }),
    ]);
    expect(rows.map((r) => [r.tokens, Array.from(r.lossMask), r.promptLength])).toEqual([
      [[1, 2, 3, 4, 5], [0, 0, 1, 0, 1], 2],
    ]);
  });

  it('a prompt equal to the previous prompt + response adds no context tokens; an empty response adds none', () => {
    const rows = stitchTrajectory(plain, [
      served(0, [1], [2]),
      served(1, [1, 2], []),
      served(2, [1, 2, 3], [4]),
    ]);
    expect(rows).toHaveLength(1);
    expect(rows[0]!.spans.map((s) => [s.promptStart, s.responseStart, s.responseEnd])).toEqual([
      [0, 1, 2],
      [2, 2, 2],
      [2, 3, 4],
    ]);
    expect(rows[0]!.reward).toBeNull();
  });
});
