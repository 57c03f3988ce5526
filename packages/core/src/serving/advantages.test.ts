import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { GRPO_EPS, groupAdvantages } from './advantages.js';

describe('group advantages', () => {
  it('GRPO: one success in eight gives +2.475 and -0.354 (unbiased std)', () => {
    const { advantages } = groupAdvantages([1, 0, 0, 0, 0, 0, 0, 0], 'grpo');
    expect(advantages[0]).toBeCloseTo(2.4749, 3);
    for (const a of advantages.slice(1)) expect(a).toBeCloseTo(-0.3536, 3);
  });

  it('GRPO: a group where every rollout scored the same has no signal', () => {
    expect(groupAdvantages([1, 1, 1, 1], 'grpo').advantages).toEqual([0, 0, 0, 0]);
  });

  it('Dr.GRPO subtracts the mean only; RLOO the mean of the others', () => {
    expect(groupAdvantages([1, 0, 0, 1], 'drgrpo').advantages).toEqual([0.5, -0.5, -0.5, 0.5]);
    const rloo = groupAdvantages([3, 0, 0], 'rloo').advantages;
    expect(rloo[0]).toBeCloseTo(3, 12); // 3 - mean(0, 0)
    expect(rloo[1]).toBeCloseTo(-1.5, 12); // 0 - mean(3, 0)
  });

  it('a lone trajectory has no baseline; a missing reward reads as 0 and is counted', () => {
    expect(groupAdvantages([5], 'grpo').advantages).toEqual([0]);
    const g = groupAdvantages([null, 1], 'drgrpo');
    expect(g).toEqual({ advantages: [-0.5, 0.5], outcomes: [0, 1], missingRewards: 1 });
  });

  it('advantages sum to zero and GRPO ones have unit (unbiased) spread unless all rewards agree', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ min: -10, max: 10, noNaN: true }), { minLength: 2, maxLength: 16 }),
        (rewards) => {
          for (const estimator of ['grpo', 'drgrpo', 'rloo'] as const) {
            const sum = groupAdvantages(rewards, estimator).advantages.reduce((a, b) => a + b, 0);
            expect(Math.abs(sum)).toBeLessThan(1e-6 * rewards.length * 20);
          }
          const a = groupAdvantages(rewards, 'grpo').advantages;
          const mean = rewards.reduce((x, y) => x + y, 0) / rewards.length;
          const std = Math.sqrt(rewards.reduce((s, r) => s + (r - mean) ** 2, 0) / (rewards.length - 1));
          const spread = Math.sqrt(a.reduce((s, x) => s + x * x, 0) / (a.length - 1));
          if (std > 1e-3) expect(spread).toBeCloseTo(std / (std + GRPO_EPS), 4);
        },
      ),
    );
  });
});
