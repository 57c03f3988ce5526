import { z } from 'zod';
import { parseOrThrow } from '../../domain/errors.js';

/*
 * ActGuide-RL's guidance scheduler: which prompt groups get guidance (the hard ones: no rollout did
 * better than the threshold) and how many reference actions their hint reveals. `adaptive` finds the
 * smallest k at which a rollout succeeds by binary search over probe rollouts, assuming success is
 * monotone in k (more of the plan never hurts); the other strategies fix k without probing.
 */

export const GUIDE_STRATEGIES = ['adaptive', 'fixed_k', 'fixed_ratio', 'all'] as const;
export type GuideStrategy = (typeof GUIDE_STRATEGIES)[number];

export const GuidanceConfig = z
  .strictObject({
    strategy: z.enum(GUIDE_STRATEGIES).default('adaptive'),
    /** `fixed_k`: the hint reveals min(k, actions) actions. */
    k: z.number().int('must be an integer').min(0, 'must be >= 0').optional(),
    /** `fixed_ratio`: the hint reveals ceil(ratio × actions) actions. */
    ratio: z.number().gt(0, 'must be > 0').max(1, 'must be <= 1').optional(),
    /** `adaptive`: probe levels tried at most (each costs `probeRollouts` rollouts). */
    maxProbeSteps: z.number().int('must be an integer').min(0, 'must be >= 0').max(64).default(5),
    /** `adaptive`: rollouts per probed level (run by the caller's probe). */
    probeRollouts: z.number().int('must be an integer').min(1, 'must be >= 1').max(4096).default(2),
    /** `adaptive`: added to the level found (more guidance for safety, or less), then clamped. */
    kOffset: z.number().int('must be an integer').min(-4096).max(4096).default(0),
    /** A reward above this is a success; a group with none is hard. */
    threshold: z.number().finite().default(0),
  })
  .superRefine((c, ctx) => {
    if (c.strategy === 'fixed_k' && c.k === undefined)
      ctx.addIssue({ code: 'custom', path: ['k'], message: 'the fixed_k strategy needs k' });
    if (c.strategy === 'fixed_ratio' && c.ratio === undefined)
      ctx.addIssue({ code: 'custom', path: ['ratio'], message: 'the fixed_ratio strategy needs ratio' });
  });
export type GuidanceConfig = z.infer<typeof GuidanceConfig>;
export type GuidanceConfigInput = z.input<typeof GuidanceConfig>;

/** A group is hard when it has rewards and none is above the threshold (no GRPO signal to learn from). */
export function isHardGroup(rewards: readonly number[], threshold = 0): boolean {
  return rewards.length > 0 && rewards.every((r) => r <= threshold);
}

/** One probed level: the hint revealed `k` actions and the probe rollouts scored `rewards`. */
export interface GuidanceProbe {
  k: number;
  rewards: number[];
}

export interface GuidanceChoice {
  k: number;
  strategy: GuideStrategy;
  probes: GuidanceProbe[];
}

/** Runs rollouts with the first k actions as hint and returns their rewards. */
export type GuidanceProbeFn = (k: number) => Promise<readonly number[]>;

/**
 * ceil(n × ratio), as the paper's code, except that a product within 1e-9 of an integer counts as that
 * integer: 10 × 0.3 is 3.0000000000000004 in floating point, and a ratio of 0.3 means 3 of 10.
 */
export function fixedRatioK(n: number, ratio: number): number {
  return Math.max(0, Math.min(n, Math.ceil(n * ratio - 1e-9)));
}

/**
 * How many of `actions` the hint reveals. `adaptive`: lo = 0, hi = n; while lo < hi and probes are
 * left, probe mid = ⌊(lo + hi) / 2⌋ and set hi = mid when any probe reward beats the threshold, else
 * lo = mid + 1; k = clamp(lo + kOffset, 0, n). A search settles within ⌊log2 n⌋ + 1 probes. When
 * every probe fails, lo reaches n after ⌊log2(n + 1)⌋ probes, so k = n for n ≤ 2^(maxProbeSteps+1) − 2
 * (62 with the default 5); a longer plan runs out of probes at lo < n, as the paper's searcher does.
 */
export async function chooseGuidanceK(
  actions: readonly unknown[],
  probe: GuidanceProbeFn,
  options: GuidanceConfigInput = {},
): Promise<GuidanceChoice> {
  const config = parseOrThrow(GuidanceConfig, options, 'guidance');
  const n = actions.length;
  const strategy = config.strategy;
  if (strategy === 'all') return { k: n, strategy, probes: [] };
  if (strategy === 'fixed_k') return { k: Math.min(config.k!, n), strategy, probes: [] };
  if (strategy === 'fixed_ratio') return { k: fixedRatioK(n, config.ratio!), strategy, probes: [] };
  const probes: GuidanceProbe[] = [];
  let lo = 0;
  let hi = n;
  for (let step = 0; step < config.maxProbeSteps && lo < hi; step++) {
    const mid = Math.floor((lo + hi) / 2);
    const rewards = [...(await probe(mid))];
    probes.push({ k: mid, rewards });
    if (rewards.some((r) => r > config.threshold)) hi = mid;
    else lo = mid + 1;
  }
  return { k: Math.max(0, Math.min(lo + config.kOffset, n)), strategy, probes };
}
