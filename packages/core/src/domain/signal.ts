import { z } from 'zod';
import { ClientId } from './ids.js';
import { JsonObject, StoredJsonObject } from './json.js';
import { MAX_STEP_INDEX } from './step.js';

/**
 * Who produced a signal. `agent`: declared by the agent under its own base_url; `user`: read by the
 * gateway from the user turns an online session's agent sends (implicit feedback), so the agent's
 * harness could write them. Neither satisfies required_signals or a bare name in a rewards
 * combination: a combination counts them only where it names their source (docs/security.md).
 */
export const SignalSource = z.enum(['rule', 'verifier', 'judge', 'rm', 'human', 'env', 'agent', 'user']);
export type SignalSource = z.infer<typeof SignalSource>;

/** Sources that are the agent's word: counted only where a combination names them. */
export const AGENT_WORD_SOURCES: readonly SignalSource[] = ['agent', 'user'];

/** A reward or quality score attached to a step or a trajectory (used by the rewards issue). */
export const Signal = z.object({
  trajectoryId: z.string(),
  stepIndex: z.number().int().min(0).nullable(),
  name: z.string().min(1).max(128),
  value: z.number().finite(),
  source: SignalSource,
  version: z.string().max(64).default('1'),
  details: JsonObject.default({}),
  createdAt: z.number(),
});
export type Signal = z.infer<typeof Signal>;

/** A signal as written: the store stamps `createdAt`; `version` and `details` have defaults. */
export const SignalInput = Signal.omit({ createdAt: true });
export type SignalInput = z.input<typeof SignalInput>;

/**
 * Signals are append-only: a newer signal with the same key supersedes an older one for "current"
 * purposes, and the older one stays as history.
 */
export function signalKey(s: Pick<Signal, 'stepIndex' | 'name' | 'source'>): string {
  return `${s.stepIndex ?? -1}\u0000${s.source}\u0000${s.name}`;
}

/** The latest signal per (step, name, source), in the order of the given (oldest-first) history. */
export function currentSignals<T extends Pick<Signal, 'stepIndex' | 'name' | 'source'>>(history: T[]): T[] {
  const latest = new Map<string, T>();
  for (const s of history) latest.set(signalKey(s), s);
  const keep = new Set(latest.values());
  return history.filter((s) => keep.has(s));
}

const SignalFields = {
  step_index: z
    .number()
    .int('must be an integer')
    .min(0, 'must be >= 0')
    .max(MAX_STEP_INDEX)
    .nullable()
    .optional(),
  name: z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters'),
  value: z.number('must be a finite number').finite('must be a finite number'),
  source: SignalSource,
  version: z.string().min(1, 'must not be empty').max(64, 'must be at most 64 characters').optional(),
  details: StoredJsonObject.optional(),
};

/** One signal in `POST /v1/signals`. */
export const SignalWire = z.strictObject({ trajectory_uid: ClientId, ...SignalFields });
export type SignalWire = z.infer<typeof SignalWire>;

export const SignalsBody = z.strictObject({
  signals: z
    .array(SignalWire)
    .min(1, 'must hold at least one signal')
    .max(10_000, 'at most 10000 signals per call'),
});

/**
 * One signal posted under a trajectory's base_url: the base_url names the trajectory; a
 * `trajectory_uid`, when sent, must be that one.
 */
export const TrajectorySignalWire = z.strictObject({
  trajectory_uid: ClientId.optional(),
  ...SignalFields,
  // The agent's own word: `agent` unless its channel trusts agents (trust_agent_reward).
  source: SignalSource.optional(),
});

export const TrajectorySignalsBody = z.strictObject({
  signals: z
    .array(TrajectorySignalWire)
    .min(1, 'must hold at least one signal')
    .max(10_000, 'at most 10000 signals per call'),
});

export function signalFromWire(wire: Omit<SignalWire, 'trajectory_uid'>, trajectoryId: string): SignalInput {
  return {
    trajectoryId,
    stepIndex: wire.step_index ?? null,
    name: wire.name,
    value: wire.value,
    source: wire.source,
    ...(wire.version === undefined ? {} : { version: wire.version }),
    ...(wire.details === undefined ? {} : { details: wire.details }),
  };
}
