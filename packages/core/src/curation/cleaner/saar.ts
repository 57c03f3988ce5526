import { z } from 'zod';
import { parseOrThrow } from '../../domain/errors.js';
import { toTemplateJson } from '../../text/tool-calls.js';
import type { Random } from '../../util/random.js';
import { sequenceRatio } from './sequence-matcher.js';

// CLEANER's Similarity-Aware Adaptive Rollback (SAAR, arXiv 2601.15141) as a pure state machine
// (docs/cleaner.md#the-rules): it only decides, so the same rules drive the online agent loop and the
// offline replay (purify.ts).

export const CleanerOptions = z.strictObject({
  /** Chance that rollback is on for a trajectory, drawn once at its start (default 1). */
  p: z.number().min(0, 'must be >= 0').max(1, 'must be <= 1').optional(),
  /** Rollbacks of one turn before its error is left in the context with a note (default 3). */
  maxRetries: z.number().int('must be an integer').min(0, 'must be >= 0').optional(),
  /** Tool attempts in a trajectory after which rollback turns off (default 30). */
  maxAttempts: z.number().int('must be an integer').min(0, 'must be >= 0').optional(),
  /** Similarity at or above which a repair is shallow (default 0.5). */
  threshold: z.number().min(0, 'must be >= 0').max(1, 'must be <= 1').optional(),
});
export type CleanerOptions = z.infer<typeof CleanerOptions>;
export type ResolvedCleanerOptions = Required<CleanerOptions>;

export const CLEANER_DEFAULTS: Readonly<ResolvedCleanerOptions> = {
  p: 1,
  maxRetries: 3,
  maxAttempts: 30,
  threshold: 0.5,
};

/** Checks the options (a ValidationError names the bad field) and fills in the defaults. */
export function resolveCleanerOptions(options: CleanerOptions = {}): ResolvedCleanerOptions {
  const parsed = parseOrThrow(CleanerOptions, options, 'cleaner');
  return {
    p: parsed.p ?? CLEANER_DEFAULTS.p,
    maxRetries: parsed.maxRetries ?? CLEANER_DEFAULTS.maxRetries,
    maxAttempts: parsed.maxAttempts ?? CLEANER_DEFAULTS.maxAttempts,
    threshold: parsed.threshold ?? CLEANER_DEFAULTS.threshold,
  };
}

/** One tool call as the model wrote it: its name and its arguments as JSON text. */
export interface SaarToolCall {
  name: string;
  arguments: string;
}

/** An assistant turn: reasoning P and tool calls K (empty: the model answered instead). */
export interface SaarTurn<C extends SaarToolCall = SaarToolCall> {
  reasoning: string | null;
  calls: readonly C[];
  /**
   * The response's tool-call text as its ids decode, from the `<tool_call>` token to the end (what
   * the authors compare); absent: rebuilt from `calls` (`responseCallText`).
   */
  callText?: string;
}

/** What executing one tool call gave: success or failure, and the failure's kind. */
export interface ToolAttempt {
  ok: boolean;
  errorType?: string | null;
}

export type RepairMode = 'shallow' | 'deep';

/**
 * The text the similarity compares: the turn's tool calls as a Qwen3/Hermes model writes them
 * (`<tool_call>\n{"name": <name>, "arguments": <args>}\n</tool_call>`, one block per call joined by
 * "\n", object arguments in the template's `tojson` form, other arguments verbatim) — the decoded
 * tool-call tokens the authors compare, rebuilt from the parsed call so every engine is measured alike.
 */
export function toolCallText(calls: readonly SaarToolCall[]): string {
  return calls
    .map(
      (c) =>
        `<tool_call>\n{"name": ${JSON.stringify(c.name)}, "arguments": ${argumentsText(c)}}\n</tool_call>`,
    )
    .join('\n');
}

function argumentsText(call: SaarToolCall): string {
  try {
    const parsed: unknown = JSON.parse(call.arguments);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      return toTemplateJson(parsed);
  } catch {
    // Not JSON: compared as written.
  }
  return call.arguments;
}

/** Qwen3's end of turn: the engine's response ids end with it, so the decoded call segment does too. */
export const QWEN_EOS_TEXT = '<|im_end|>';

/**
 * A turn's call segment as its response ids decode with special tokens kept: the calls as the model
 * writes them, then the EOS that ended the response (the authors decode `response_ids[boundary:]`).
 */
export function responseCallText(calls: readonly SaarToolCall[]): string {
  return `${toolCallText(calls)}${QWEN_EOS_TEXT}`;
}

/** sim(K, K'): difflib's ratio of the two turns' decoded tool-call segments. */
export function callSimilarity(previous: SaarTurn, regenerated: SaarTurn): number {
  return sequenceRatio(
    previous.callText ?? responseCallText(previous.calls),
    regenerated.callText ?? responseCallText(regenerated.calls),
  );
}

/** The note the model reads once a turn has used up its rollbacks (attached when n >= 2). */
export const retryNote = (n: number) =>
  `Note: This approach has been attempted ${n} times with the same type of error. Consider trying a different algorithm, method, or approach to solve this problem.`;

/** A tool result with the retry note appended, as the authors append it. */
export const withRetryNote = (content: string, n: number) => `${content}\n\n${retryNote(n)}`;

/** Why rollback is off for the rest of a trajectory. */
export type RollbackOffReason = 'p' | 'no_tool_call' | 'max_retries' | 'max_attempts';

export interface CleanerMetrics {
  /** Turns whose failure started a rollback. */
  rollbacksTriggered: number;
  /** Of those, turns whose regenerated calls then succeeded. */
  recovered: number;
  /** Of those, turns that ended with the error still in the context. */
  failed: number;
  /** Rollbacks that kept P and took K' (sim >= threshold)... */
  shallow: number;
  /** ...and those that took the whole regenerated turn. */
  deep: number;
  /** Error types of the attempts rolled out of the context, with counts. */
  removedErrorTypes: Record<string, number>;
  /** Tool attempts (a turn's calls executed once: a first try or a retry). */
  attempts: number;
  /** Whether rollback is on at the end (and why not). */
  enabled: boolean;
  disabledBy: RollbackOffReason | null;
}

export interface SaarState {
  readonly options: ResolvedCleanerOptions;
  readonly enabled: boolean;
  readonly disabledBy: RollbackOffReason | null;
  readonly attempts: number;
  /**
   * `idle`: the next tool results are a new turn's. `regenerating`: a rollback was decided, the model
   * owes T'. `retrying`: the turn was repaired, the next tool results are its retry.
   */
  readonly phase: 'idle' | 'regenerating' | 'retrying';
  /** The turn under repair: rollbacks so far and the error types of its failed attempt. */
  readonly retries: number;
  readonly pendingErrors: readonly string[];
  readonly metrics: Omit<CleanerMetrics, 'attempts' | 'enabled' | 'disabledBy'>;
}

/** A fresh trajectory: rollback is on with probability p, drawn once from `random`. */
export function initialSaarState(options: CleanerOptions | undefined, random: Random): SaarState {
  const resolved = resolveCleanerOptions(options);
  // random() is in [0, 1): p = 1 always rolls back, p = 0 never does.
  const enabled = random() < resolved.p;
  return {
    options: resolved,
    enabled,
    disabledBy: enabled ? null : 'p',
    attempts: 0,
    phase: 'idle',
    retries: 0,
    pendingErrors: [],
    metrics: { rollbacksTriggered: 0, recovered: 0, failed: 0, shallow: 0, deep: 0, removedErrorTypes: {} },
  };
}

export type ToolResultsDecision =
  /** The results go into the context as they are (`recovered`: a repaired turn's retry succeeded). */
  | { kind: 'keep'; recovered: boolean }
  /** Show the error to the model and regenerate the turn (this is its `retry`-th rollback). */
  | { kind: 'rollback'; retry: number; errorTypes: string[] }
  /** The turn used up its rollbacks: its error stays, with `note` appended when there is one. */
  | { kind: 'give_up'; retries: number; note: string | null };

export type RegenerationDecision<C extends SaarToolCall = SaarToolCall> =
  /** The failed turn and its error leave the context; `turn` takes its place and its calls run next. */
  | { kind: 'replace'; mode: RepairMode; similarity: number; turn: SaarTurn<C>; removedErrorTypes: string[] }
  /** T' has no tool call: rollback is off from here, the error stays and T' follows it. */
  | { kind: 'keep_error' };

const closeChain = (state: SaarState, outcome: 'recovered' | 'failed'): SaarState['metrics'] => ({
  ...state.metrics,
  [outcome]: state.metrics[outcome] + 1,
});

const disabled = (state: SaarState, reason: RollbackOffReason) =>
  state.enabled ? { enabled: false, disabledBy: reason } : {};

/** The calls of a turn ran (a first try, or the retry of a repaired turn): what happens to the results. */
export function onToolResults(
  state: SaarState,
  attempts: readonly ToolAttempt[],
): { state: SaarState; decision: ToolResultsDecision } {
  if (state.phase === 'regenerating')
    throw new Error('SAAR: tool results arrived while a regeneration was owed (call onRegenerated first)');
  const retrying = state.phase === 'retrying';
  const attemptsSoFar = state.attempts + 1;
  let next: SaarState = { ...state, attempts: attemptsSoFar };
  // A safeguard against loops: past maxAttempts tool attempts nothing rolls back any more.
  if (attemptsSoFar > state.options.maxAttempts) next = { ...next, ...disabled(next, 'max_attempts') };
  const errorTypes = attempts.filter((a) => !a.ok).map((a) => a.errorType ?? 'unknown_error');
  const idle = { phase: 'idle' as const, retries: 0, pendingErrors: [] };
  if (errorTypes.length === 0) {
    const metrics = retrying ? closeChain(next, 'recovered') : next.metrics;
    return { state: { ...next, ...idle, metrics }, decision: { kind: 'keep', recovered: retrying } };
  }
  if (!next.enabled) {
    if (!retrying) return { state: { ...next, ...idle }, decision: { kind: 'keep', recovered: false } };
    // The attempt cap turned rollback off mid-chain: as in the authors' loop the repaired turn gives
    // up like one out of retries, its last error stays and the note is appended from N >= 2.
    const n = next.retries;
    return {
      state: { ...next, ...idle, metrics: closeChain(next, 'failed') },
      decision: { kind: 'give_up', retries: n, note: n >= 2 ? retryNote(n) : null },
    };
  }
  const retries = retrying ? next.retries : 0;
  const metrics =
    retries === 0
      ? { ...next.metrics, rollbacksTriggered: next.metrics.rollbacksTriggered + 1 }
      : next.metrics;
  if (retries >= next.options.maxRetries) {
    // As in the authors' loop, a turn that used up its rollbacks turns rollback off for the trajectory.
    return {
      state: {
        ...next,
        ...idle,
        ...disabled(next, 'max_retries'),
        metrics: { ...metrics, failed: metrics.failed + 1 },
      },
      decision: { kind: 'give_up', retries, note: retries >= 2 ? retryNote(retries) : null },
    };
  }
  return {
    state: { ...next, phase: 'regenerating', retries: retries + 1, pendingErrors: errorTypes, metrics },
    decision: { kind: 'rollback', retry: retries + 1, errorTypes },
  };
}

/** The model regenerated the failed turn `previous` as `regenerated` (T'). */
export function onRegenerated<C extends SaarToolCall>(
  state: SaarState,
  previous: SaarTurn<C>,
  regenerated: SaarTurn<C>,
): { state: SaarState; decision: RegenerationDecision<C> } {
  if (state.phase !== 'regenerating')
    throw new Error('SAAR: a regeneration arrived that no rollback asked for');
  if (regenerated.calls.length === 0) {
    return {
      state: {
        ...state,
        ...disabled(state, 'no_tool_call'),
        phase: 'idle',
        retries: 0,
        pendingErrors: [],
        metrics: closeChain(state, 'failed'),
      },
      decision: { kind: 'keep_error' },
    };
  }
  const similarity = callSimilarity(previous, regenerated);
  const mode: RepairMode = similarity >= state.options.threshold ? 'shallow' : 'deep';
  const removed = { ...state.metrics.removedErrorTypes };
  for (const t of state.pendingErrors) removed[t] = (removed[t] ?? 0) + 1;
  return {
    state: {
      ...state,
      phase: 'retrying',
      pendingErrors: [],
      metrics: { ...state.metrics, [mode]: state.metrics[mode] + 1, removedErrorTypes: removed },
    },
    decision: {
      kind: 'replace',
      mode,
      similarity,
      turn: mode === 'shallow' ? { reasoning: previous.reasoning, calls: regenerated.calls } : regenerated,
      removedErrorTypes: [...state.pendingErrors],
    },
  };
}

/**
 * The turn under repair will never get its regeneration or its retry's results (offline: the
 * conversation ends, or a user speaks, right after the error; online: the turn budget ran out): its
 * error stays and the rollback counts as failed.
 */
export function onAbandoned(state: SaarState): SaarState {
  if (state.phase === 'idle') return state;
  return { ...state, phase: 'idle', retries: 0, pendingErrors: [], metrics: closeChain(state, 'failed') };
}

/** The trajectory ended: a turn still under repair counts as failed. */
export function finishSaar(state: SaarState): CleanerMetrics {
  const open = state.phase !== 'idle';
  return {
    ...state.metrics,
    removedErrorTypes: { ...state.metrics.removedErrorTypes },
    failed: state.metrics.failed + (open ? 1 : 0),
    attempts: state.attempts,
    enabled: state.enabled,
    disabledBy: state.disabledBy,
  };
}

/** The state machine behind one mutable handle, for a loop that owns one trajectory. */
export class SaarSession {
  private current: SaarState;

  constructor(options: CleanerOptions | undefined, random: Random) {
    this.current = initialSaarState(options, random);
  }

  get state(): SaarState {
    return this.current;
  }

  toolResults(attempts: readonly ToolAttempt[]): ToolResultsDecision {
    const { state, decision } = onToolResults(this.current, attempts);
    this.current = state;
    return decision;
  }

  regenerated<C extends SaarToolCall>(
    previous: SaarTurn<C>,
    regenerated: SaarTurn<C>,
  ): RegenerationDecision<C> {
    const { state, decision } = onRegenerated(this.current, previous, regenerated);
    this.current = state;
    return decision;
  }

  abandon(): void {
    this.current = onAbandoned(this.current);
  }

  finish(): CleanerMetrics {
    return finishSaar(this.current);
  }
}
