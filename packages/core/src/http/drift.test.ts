import { describe, expect, it } from 'vitest';
import { driftReport } from './drift.js';

const step = (
  index: number,
  promptIds: number[],
  responseIds: number[],
  metadata: Record<string, unknown>,
) => ({
  index,
  promptIds,
  responseIds,
  metadata: metadata as never,
});

describe('driftReport', () => {
  it('counts breaks and the tokens prefilled again, per model, by hand', () => {
    const q = { served_model: 'Qwen/Qwen3-8B' };
    const report = driftReport([
      [
        // 1 2 3 | 4 5: the next prompt keeps 1 2 3 4 and drops 5: a break, 1 token again.
        step(0, [1, 2, 3], [4, 5], { ...q, token_continuity: 'first_step' }),
        step(1, [1, 2, 3, 4, 9, 9], [7], { ...q, token_continuity: 'history_rewritten' }),
        // Extends 1 2 3 4 9 9 7 exactly: no break.
        step(2, [1, 2, 3, 4, 9, 9, 7, 8], [6], { ...q, token_continuity: 'continued' }),
        // Rewrites from the second token: 8 of the previous 9 tokens (8 prompt, 1 response) not shared.
        step(3, [1, 5], [2], { ...q, token_continuity: 'continued' }),
      ],
      [
        step(0, [1], [2], { model: 'gpt-agent-name' }),
        // Index 2 after 0 (a failed call between): not compared.
        step(2, [7], [8], { model: 'gpt-agent-name' }),
      ],
      [step(0, [5, 5], [5], q)],
    ]);
    expect(report).toEqual([
      {
        model: 'Qwen/Qwen3-8B',
        trajectories: 2,
        steps: 5,
        prefix_breaks: 2,
        reprefilled_tokens: 1 + 8,
        continuity: { first_step: 1, history_rewritten: 1, continued: 2 },
      },
      {
        model: 'gpt-agent-name',
        trajectories: 1,
        steps: 2,
        prefix_breaks: 0,
        reprefilled_tokens: 0,
        continuity: {},
      },
    ]);
  });
});
