import { z } from 'zod';
import { ClientId } from './ids.js';
import { MAX_PROMPT_TOKENS, MAX_STEP_INDEX } from './step.js';

/*
 * Rollout-vs-trainer mismatch (docs/trainers.md#mismatch-telemetry): after its proximal pass a
 * trainer reports, per step of a leased batch, how far its recomputed log-probs π are from the
 * engine's behaviour log-probs μ. Both estimators are of KL(μ ‖ π), the tokens being samples of μ.
 */

/** Steps one `POST /v1/batches/{id}/mismatch` may carry (the client splits bigger batches). */
export const MAX_MISMATCH_STEPS = 10_000;

export const MismatchStepWire = z.strictObject({
  trajectory_uid: ClientId,
  step_index: z.number().int('must be an integer').min(0, 'must be >= 0').max(MAX_STEP_INDEX),
  /** Response tokens measured (those with a behaviour log-prob). */
  tokens: z.number().int('must be an integer').min(1, 'must be >= 1').max(MAX_PROMPT_TOKENS),
  /** mean(log μ − log π) over the step's measured tokens. */
  k1: z.number().finite(),
  /** mean((r − 1) − log r), r = π / μ: never negative. */
  k3: z.number().finite().min(0, 'must be >= 0'),
  max_abs_diff: z.number().finite().min(0, 'must be >= 0'),
  /** Fraction of the measured tokens the trainer's rollout correction masked out of the loss. */
  masked_fraction: z.number().min(0, 'must be >= 0').max(1, 'must be <= 1'),
});
export type MismatchStepWire = z.infer<typeof MismatchStepWire>;

export const MismatchBody = z.strictObject({
  steps: z
    .array(MismatchStepWire)
    .min(1, 'must hold at least one step')
    .max(MAX_MISMATCH_STEPS, `at most ${MAX_MISMATCH_STEPS} steps per call`),
});

export interface MismatchReport {
  trajectoryId: string;
  stepIndex: number;
  tokens: number;
  k1: number;
  k3: number;
  maxAbsDiff: number;
  maskedFraction: number;
}

export function mismatchFromWire(wire: MismatchStepWire): MismatchReport {
  return {
    trajectoryId: wire.trajectory_uid,
    stepIndex: wire.step_index,
    tokens: wire.tokens,
    k1: wire.k1,
    k3: wire.k3,
    maxAbsDiff: wire.max_abs_diff,
    maskedFraction: wire.masked_fraction,
  };
}

/** Reports over some steps: k1 and k3 token-weighted, the largest |Δ log p|, the mean masked fraction per step. */
export interface MismatchTally {
  steps: number;
  tokens: number;
  k1: number;
  k3: number;
  maxAbsDiff: number;
  maskedFraction: number;
}

/** One lease's reports (of one engine), at the time the batch was leased. */
export interface MismatchLease extends MismatchTally {
  leaseId: string;
  at: number;
}

export interface MismatchVersion extends MismatchTally {
  /** The stored steps' `policy_version` (a partial rollout's first, oldest token's). */
  policyVersion: number;
}

export interface EngineMismatch extends MismatchTally {
  /** The engine that generated the steps (`engine_id` of the stored step; null: none recorded). */
  engineId: string | null;
  leases: number;
  /** Its latest leases, oldest first. */
  recent: MismatchLease[];
  /** k3 over the leases before its latest, token-weighted; null when it has one lease. */
  baselineK3: number | null;
  /** The latest lease's k3 is over `jumpFactor` × baselineK3 and over `jumpFloor`. */
  jump: boolean;
  versions: MismatchVersion[];
}

export interface MismatchStats {
  jumpFactor: number;
  jumpFloor: number;
  engines: EngineMismatch[];
  versions: MismatchVersion[];
}

/** An engine's mismatch "jumps" when its latest lease's k3 is this many times its earlier mean... */
export const MISMATCH_JUMP_FACTOR = 3;
/** ...and above this: near-exact engines (k3 ~1e-9) would otherwise jump on rounding noise. */
export const MISMATCH_JUMP_FLOOR = 1e-3;
