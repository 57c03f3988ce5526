import { z } from 'zod';
import {
  parseOrThrow,
  type Signal,
  type SignalSource,
  type Step,
  StepwiseError,
  type Trajectory,
} from '../domain/index.js';

/*
 * The reward-plugin contract: a manifest (what the plugin is, the JSON Schema of its parameters, what
 * it scores) and a handler built from validated parameters. A handler is given the trajectories it
 * scores with their steps and current signals, and answers one score per target. It never answers a
 * made-up score: when it cannot score (endpoint down, unparseable verdict, nothing to score) it
 * throws, and the job records a failure instead of a value.
 */

export const RewardTarget = z.enum(['step', 'trajectory', 'group']);
export type RewardTarget = z.infer<typeof RewardTarget>;

export interface RewardManifest {
  name: string;
  /** The plugin's own version (its code); a function's signal version is derived from it and its params. */
  version: string;
  description: string;
  /** JSON Schema (2020-12) of the parameters, derived from the zod schema that validates them. */
  parameters: Record<string, unknown>;
  /** `step`: one score per step; `trajectory`: one per trajectory; `group`: one per trajectory, judged together. */
  target: RewardTarget;
  /** The `source` the plugin's signals carry. */
  source: SignalSource;
}

/** One trajectory as a handler sees it: its steps (index order) and its current signals. */
export interface TrajectoryView {
  trajectory: Trajectory;
  steps: Step[];
  signals: Signal[];
}

export interface RewardContext {
  /** Aborted when the job times out or the workers stop; pass it to every request. */
  signal: AbortSignal;
}

export interface RewardScore {
  trajectoryId: string;
  /** null: the whole trajectory. */
  stepIndex: number | null;
  value: number;
  details?: Record<string, unknown>;
}

/** Scores one trajectory (`step`, `trajectory` targets) or a whole group (`group`). */
export type RewardHandler = (input: TrajectoryView[], context: RewardContext) => Promise<RewardScore[]>;

export interface RewardPlugin<P = unknown> {
  manifest: RewardManifest;
  params: z.ZodType<P>;
  /** The handler for validated params; null when the plugin computes nothing (human feedback). */
  create(params: P): RewardHandler | null;
}

/** Builds a plugin whose manifest's `parameters` is the JSON Schema of its zod params. */
export function definePlugin<P>(
  manifest: Omit<RewardManifest, 'parameters'>,
  params: z.ZodType<P>,
  create: (params: P) => RewardHandler | null,
): RewardPlugin<P> {
  const parameters = z.toJSONSchema(params, { io: 'input', unrepresentable: 'any' }) as Record<
    string,
    unknown
  >;
  return { manifest: { ...manifest, parameters }, params, create };
}

/** Validates a function's params against its plugin; the error names the field (`<prefix>.<field>`). */
export function validateParams<P>(plugin: RewardPlugin<P>, params: unknown, prefix = 'params'): P {
  return parseOrThrow(plugin.params, params, prefix);
}

/**
 * A reward function could not produce a score. `isRetryable`: trying again may work (a timeout, a
 * refused connection, a garbled verdict); otherwise the job fails at once.
 */
export class RewardError extends StepwiseError {
  override readonly name: string = 'RewardError';
  constructor(message: string, isRetryable: boolean, code = 'reward_failed', status = 502) {
    super(message, status, code, undefined, isRetryable);
  }
}

/** The function does not apply to this trajectory (no task, no workspace, no text): never retried. */
export class NotApplicableError extends RewardError {
  override readonly name = 'NotApplicableError';
  constructor(message: string) {
    super(message, false, 'not_applicable', 422);
  }
}

/** The job ran past its time limit. */
export class RewardTimeoutError extends RewardError {
  override readonly name = 'RewardTimeoutError';
  constructor(ms: number) {
    super(`timed out after ${ms} ms`, true, 'timeout', 504);
  }
}

/** Whether an error thrown by a handler is worth another attempt (unknown errors are). */
export function isRetryable(error: unknown): boolean {
  if (error instanceof StepwiseError) return error.isRetryable;
  return true;
}

export function errorMessage(error: unknown): string {
  if (error instanceof Error) {
    const cause = (error as { cause?: unknown }).cause;
    const why = cause instanceof Error && cause.message && !error.message.includes(cause.message);
    return why ? `${error.message} (${cause.message})` : error.message;
  }
  return String(error);
}
