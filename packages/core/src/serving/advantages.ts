// Group-relative advantages, computed when a batch is served (never stored: they depend on the whole group
// and on the estimator the trainer asks for). Formulas: docs/serving.md#advantages

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
