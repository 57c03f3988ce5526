/*
 * Group-relative advantages, computed when a batch is served (never stored: they depend on the
 * whole group and on the estimator the trainer asks for).
 *
 * Each trajectory's outcome is its reward: the sum of its step rewards unless `complete_trajectory`
 * set one (a trajectory with neither counts as 0, and is reported). Within a prompt group:
 * - `grpo`   (Claw-R1, DeepSeekMath): (r - mean) / (std + eps), std unbiased (n - 1), eps 1e-6;
 * - `drgrpo` (Dr. GRPO): r - mean, no division by std;
 * - `rloo`   (leave-one-out): r - mean of the other trajectories = n / (n - 1) * (r - mean).
 * A group of one trajectory has no baseline: its advantage is 0. The trajectory's advantage is
 * broadcast to every step and every response token; step-level rewards stay beside it.
 */

export const ADVANTAGE_ESTIMATORS = ['grpo', 'drgrpo', 'rloo'] as const;
export type AdvantageEstimator = (typeof ADVANTAGE_ESTIMATORS)[number];

export const GRPO_EPS = 1e-6;

export interface GroupAdvantages {
  /** One per trajectory, in input order. */
  advantages: number[];
  /** The outcomes they were computed from (null rewards read as 0). */
  outcomes: number[];
  /** Trajectories whose reward was null. */
  missingRewards: number;
}

/** Advantages of one group's trajectories from their rewards (null: no reward, read as 0). */
export function groupAdvantages(
  rewards: readonly (number | null)[],
  estimator: AdvantageEstimator,
): GroupAdvantages {
  const n = rewards.length;
  let missingRewards = 0;
  const outcomes = rewards.map((r) => {
    if (r === null) missingRewards++;
    return r ?? 0;
  });
  if (n < 2) return { advantages: outcomes.map(() => 0), outcomes, missingRewards };
  let sum = 0;
  for (const r of outcomes) sum += r;
  const mean = sum / n;
  let advantages: number[];
  if (estimator === 'grpo') {
    let squares = 0;
    for (const r of outcomes) squares += (r - mean) ** 2;
    const std = Math.sqrt(squares / (n - 1));
    advantages = outcomes.map((r) => (r - mean) / (std + GRPO_EPS));
  } else if (estimator === 'drgrpo') {
    advantages = outcomes.map((r) => r - mean);
  } else {
    advantages = outcomes.map((r) => r - (sum - r) / (n - 1));
  }
  return { advantages, outcomes, missingRewards };
}
