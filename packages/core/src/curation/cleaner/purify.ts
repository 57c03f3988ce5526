import type { JsonObject } from '../../domain/json.js';
import type { ToolResult } from '../../domain/step.js';
import { type Random, seededRandom } from '../../util/random.js';
import { toolCallStart } from './graft.js';
import {
  type ChatToolCall,
  type CleanerReport,
  chatTurn,
  cleanerMetadata,
  purifiedStepIndices,
  type RepairRecord,
  repairedAssistantMessage,
} from './report.js';
import {
  type CleanerOptions,
  finishSaar,
  initialSaarState,
  onAbandoned,
  onRegenerated,
  onToolResults,
  type RepairMode,
  type SaarState,
  type ToolAttempt,
} from './saar.js';

// Offline CLEANER: SAAR replayed over a stored trajectory into a new message list, the steps untouched.
// The turns after a repair saw the errors, so the result is for SFT-style use or re-scoring.
// docs/cleaner.md#offline-purifying-stored-trajectories

/** The fields of a stored step the purification reads (a domain `Step` has them all). */
export interface PurifiableStep {
  trajectoryId?: string;
  index: number;
  messages: readonly JsonObject[] | null;
  responseText: string | null;
  toolCalls: readonly JsonObject[] | null;
  toolResults: readonly ToolResult[] | null;
  /** The captured response ids: with `decode`, the similarity reads their tool-call segment. */
  responseIds?: readonly number[];
}

export interface PurifyOptions extends CleanerOptions {
  /** The p draw (default: seeded by the trajectory id, so a re-run purifies the same way). */
  random?: Random;
  /**
   * The model's tokenizer (special tokens kept): the similarity then compares the decoded ids from
   * each response's `<tool_call>` token to its end, as the authors do, instead of rebuilt calls.
   */
  decode?: (ids: readonly number[]) => string;
  /** The id `decode`'s model opens a tool call with (default: Qwen3's `<tool_call>`). */
  toolCallTokenId?: number;
}

/** One rollback, with where it happened in the original conversation. */
export interface OfflineRepair extends RepairRecord {
  /** Index, in the original conversation, of the assistant message whose turn was repaired. */
  messageIndex: number;
  /** Original messages (the failed assistant turn and its tool results) rolled out by this repair. */
  removedMessages: number;
}

/** The metadata of a derived trajectory made from a purified one. */
export interface PurifiedDerivation {
  derived_from: string | null;
  purified_offline: true;
  /** `shallow` or `deep` when every repair was one kind, else `mixed`. */
  mode: RepairMode | 'mixed';
  /** sim(K, K') of each repair, in order. */
  similarity: number[];
  removed_error_types: Record<string, number>;
  purified_step_indices: number[];
  cleaner: JsonObject;
}

export interface PurifiedTrajectory {
  /** The purified conversation (deep copies: the originals are never shared or changed). */
  messages: JsonObject[];
  repairs: OfflineRepair[];
  report: CleanerReport;
  /** Whether any turn was rolled out. */
  changed: boolean;
  /** Metadata for a derived trajectory; null when nothing changed. */
  derivation: PurifiedDerivation | null;
}

type Segment =
  | { kind: 'turn'; at: number; assistant: JsonObject; calls: ChatToolCall[]; tools: JsonObject[] }
  | { kind: 'message'; at: number; message: JsonObject };

/** An id as harnesses rewrite it (`call_1` → `call1`): compare letters and digits, one case. */
const normalizedId = (id: string) => id.replace(/[^0-9a-z]/gi, '').toLowerCase();

function toolCallsOf(message: JsonObject): ChatToolCall[] {
  const raw = message.tool_calls;
  if (!Array.isArray(raw)) return [];
  const calls: ChatToolCall[] = [];
  raw.forEach((c, position) => {
    if (typeof c !== 'object' || c === null) return;
    const fn = (c as { function?: { name?: unknown; arguments?: unknown } }).function;
    if (!fn || typeof fn.name !== 'string') return;
    const id = (c as { id?: unknown }).id;
    calls.push({
      id: typeof id === 'string' ? id : `#${position}`,
      type: 'function',
      function: {
        name: fn.name,
        arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      },
    });
  });
  return calls;
}

function segmentsOf(conversation: readonly JsonObject[]): Segment[] {
  const segments: Segment[] = [];
  for (let i = 0; i < conversation.length; i++) {
    const message = conversation[i]!;
    const calls = message.role === 'assistant' ? toolCallsOf(message) : [];
    if (calls.length === 0) {
      segments.push({ kind: 'message', at: i, message });
      continue;
    }
    const at = i;
    const tools: JsonObject[] = [];
    while (conversation[i + 1]?.role === 'tool') tools.push(conversation[++i]!);
    segments.push({ kind: 'turn', at, assistant: message, calls, tools });
  }
  return segments;
}

/** The conversation as the last step saw it, with the step's own answer appended. */
function conversationOf(steps: readonly PurifiableStep[]): JsonObject[] {
  const last = [...steps].filter((s) => s.messages !== null).sort((a, b) => b.index - a.index)[0];
  if (!last) return [];
  const answer: JsonObject = { role: 'assistant', content: last.responseText };
  if (last.toolCalls && last.toolCalls.length > 0) answer.tool_calls = structuredClone(last.toolCalls);
  return [...structuredClone(last.messages as JsonObject[]), answer];
}

/** Arguments compared as JSON values when they parse (serializers differ in whitespace). */
function sameArguments(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return JSON.stringify(JSON.parse(a)) === JSON.stringify(JSON.parse(b));
  } catch {
    return false;
  }
}

/** Whether `message` is the answer `step` captured: the same calls, or the same text when it made none. */
function answeredBy(step: PurifiableStep, message: JsonObject): boolean {
  const calls = toolCallsOf(message);
  const captured = toolCallsOf({ role: 'assistant', tool_calls: step.toolCalls ?? [] });
  if (calls.length !== captured.length) return false;
  if (calls.length === 0) return (message.content ?? '') === (step.responseText ?? '');
  return calls.every(
    (c, i) =>
      c.function.name === captured[i]!.function.name &&
      sameArguments(c.function.arguments, captured[i]!.function.arguments),
  );
}

/**
 * The step behind each assistant message of the conversation, matched in order by what it answered
 * (ids are no key: some engines reuse one id for a whole episode). Steps whose answers are not in
 * the conversation (the agent rewrote its history) are skipped.
 */
function stepsOfAssistants(conversation: readonly JsonObject[], steps: readonly PurifiableStep[]) {
  const ordered = [...steps].sort((a, b) => a.index - b.index);
  const found = new Map<number, PurifiableStep>();
  let from = 0;
  conversation.forEach((message, at) => {
    if (message.role !== 'assistant') return;
    for (let k = from; k < ordered.length; k++) {
      if (answeredBy(ordered[k]!, message)) {
        found.set(at, ordered[k]!);
        from = k + 1;
        return;
      }
    }
  });
  return found;
}

/** How each call of a turn went, by the results the gateway attached to its step (matched by id, else position). */
function attemptsOf(step: PurifiableStep | undefined, tools: readonly JsonObject[]): ToolAttempt[] {
  const results = step?.toolResults ?? [];
  return tools.map((t, position) => {
    const id = typeof t.tool_call_id === 'string' ? normalizedId(t.tool_call_id) : null;
    const r =
      results.find(
        (x) => id !== null && x.tool_call_id !== undefined && normalizedId(x.tool_call_id) === id,
      ) ?? results[position];
    // A result the gateway never saw counts as a success: only flagged failures are rolled back.
    return { ok: !r?.error, errorType: r?.error ? (r.error_type ?? 'error') : null };
  });
}

/** A step's decoded call segment, when its ids and a tokenizer are at hand. */
function decodedCalls(
  step: PurifiableStep | undefined,
  decode: PurifyOptions['decode'],
  markerId: number | undefined,
): { callText?: string } {
  if (!decode || !step?.responseIds) return {};
  const at = toolCallStart(step.responseIds, markerId);
  return at === null ? {} : { callText: decode(step.responseIds.slice(at)) };
}

export function purifyTrajectory(
  steps: readonly PurifiableStep[],
  options: PurifyOptions = {},
): PurifiedTrajectory {
  const trajectoryId = steps.find((s) => s.trajectoryId !== undefined)?.trajectoryId ?? null;
  const { random, decode: _decode, toolCallTokenId: _marker, ...cleanerOptions } = options;
  let state: SaarState = initialSaarState(
    cleanerOptions,
    random ?? seededRandom('cleaner-offline', trajectoryId ?? ''),
  );
  const conversation = conversationOf(steps);
  const stepAt = stepsOfAssistants(conversation, steps);
  const segments = segmentsOf(conversation);
  const out: JsonObject[] = [];
  const repairs: OfflineRepair[] = [];
  for (let k = 0; k < segments.length; k++) {
    const seg = segments[k]!;
    if (seg.kind === 'message' || seg.tools.length === 0) {
      out.push(
        seg.kind === 'message' ? seg.message : seg.assistant,
        ...(seg.kind === 'turn' ? seg.tools : []),
      );
      continue;
    }
    // The turn as it now stands in the context (repaired in place while its retries fail).
    let assistant = seg.assistant;
    let calls = seg.calls;
    let tools = seg.tools;
    let step = stepAt.get(seg.at);
    for (;;) {
      if (tools.length === 0) {
        // A repaired turn whose calls were never answered (the conversation ends there).
        state = onAbandoned(state);
        break;
      }
      const decided = onToolResults(state, attemptsOf(step, tools));
      state = decided.state;
      if (decided.decision.kind !== 'rollback') break;
      const next = segments[k + 1];
      const nextAssistant = next?.kind === 'turn' ? next.assistant : next?.message;
      if (!next || nextAssistant?.role !== 'assistant') {
        state = onAbandoned(state);
        break;
      }
      const nextCalls = next.kind === 'turn' ? next.calls : [];
      const nextStep = stepAt.get(next.at);
      const regen = onRegenerated(
        state,
        {
          ...chatTurn(assistant.content, calls),
          ...decodedCalls(step, options.decode, options.toolCallTokenId),
        },
        {
          ...chatTurn(nextAssistant.content, nextCalls),
          ...decodedCalls(nextStep, options.decode, options.toolCallTokenId),
        },
      );
      state = regen.state;
      if (regen.decision.kind === 'keep_error') break;
      repairs.push({
        failedStep: step?.index ?? null,
        retryStep: nextStep?.index ?? null,
        similarity: regen.decision.similarity,
        mode: regen.decision.mode,
        errorTypes: regen.decision.removedErrorTypes,
        messageIndex: seg.at,
        removedMessages: 1 + tools.length,
      });
      assistant = repairedAssistantMessage(assistant, nextAssistant, regen.decision.mode);
      calls = nextCalls;
      tools = (next as Extract<Segment, { kind: 'turn' }>).tools;
      step = nextStep;
      k++;
    }
    out.push(assistant, ...tools);
  }
  const report: CleanerReport = { options: state.options, metrics: finishSaar(state), repairs };
  return {
    messages: out,
    repairs,
    report,
    changed: repairs.length > 0,
    derivation: repairs.length === 0 ? null : derivationOf(trajectoryId, report),
  };
}

function derivationOf(trajectoryId: string | null, report: CleanerReport): PurifiedDerivation {
  const modes = new Set(report.repairs.map((r) => r.mode));
  return {
    derived_from: trajectoryId,
    purified_offline: true,
    mode: modes.size === 1 ? [...modes][0]! : 'mixed',
    similarity: report.repairs.map((r) => r.similarity),
    removed_error_types: { ...report.metrics.removedErrorTypes },
    purified_step_indices: purifiedStepIndices(report.repairs),
    cleaner: cleanerMetadata(report),
  };
}
