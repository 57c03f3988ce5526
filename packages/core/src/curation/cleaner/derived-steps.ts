import {
  type JsonObject,
  type NewStep,
  newStep,
  type Step,
  type ToolResult,
  type Trajectory,
} from '../../domain/index.js';
import { retokenizeChat } from '../../engines/retokenize.js';
import { type ChatMessageInput, type ChatTokenizer, tokenizeChat } from '../../text/index.js';
import { type ModelOfStep, type onlineCleaner, type TrainingView, trainingView } from './graft.js';
import type { purifyTrajectory } from './purify.js';
import type { CleanerMetrics } from './saar.js';

// The steps of a derived (purified) trajectory, and what purification reads off the original steps:
// re-rendered from purified messages, grafted from an online run's repairs, or copied.

const isSame = (a: readonly number[], b: readonly number[]) =>
  a.length === b.length && a.every((x, i) => x === b[i]);

function enableThinking(step: Step): boolean | undefined {
  const kwargs = step.metadata.chat_template_kwargs;
  if (typeof kwargs !== 'object' || kwargs === null || Array.isArray(kwargs)) return undefined;
  const v = (kwargs as Record<string, unknown>).enable_thinking;
  return typeof v === 'boolean' ? v : undefined;
}

/** The template reproduces what the engine saw for the first step: re-rendered ids can be trusted. */
function templateReproduces(step: Step, tokenizer: ChatTokenizer): boolean {
  if (!step.messages) return false;
  const thinking = enableThinking(step);
  const ids = tokenizeChat(
    {
      messages: step.messages as unknown as ChatMessageInput[],
      tools: (step.tools as never) ?? null,
      addGenerationPrompt: true,
      ...(thinking !== undefined ? { enableThinking: thinking } : {}),
    },
    tokenizer,
  );
  return isSame(ids, step.promptIds);
}

/** Tool results in a conversation that the original steps flagged as failures. */
export function failedToolMessages(messages: readonly JsonObject[], flagged: ReadonlySet<string>): number {
  return messages.filter((m) => m.role === 'tool' && flagged.has(toolKey(m))).length;
}

const toolKey = (m: JsonObject) =>
  `${String(m.tool_call_id ?? '').replace(/[^0-9a-z]/gi, '')}\u0000${String(m.content ?? '')}`;

/** The steps of a purified conversation: one per assistant message, re-rendered with the template. */
function purifiedSteps(
  source: Trajectory,
  derivedId: string,
  original: readonly Step[],
  messages: readonly JsonObject[],
  tokenizer: ChatTokenizer,
): NewStep[] {
  const first = original[0]!;
  const tools = first.tools;
  const thinking = enableThinking(first);
  const results = new Map<string, ToolResult>();
  for (const s of original)
    for (const r of s.toolResults ?? [])
      results.set(`${(r.tool_call_id ?? '').replace(/[^0-9a-z]/gi, '')}\u0000${r.content}`, r);
  const version = Math.max(...original.map((s) => s.policyVersion));
  const steps: NewStep[] = [];
  messages.forEach((m, at) => {
    if (m.role !== 'assistant') return;
    const calls = Array.isArray(m.tool_calls) ? (m.tool_calls as JsonObject[]) : [];
    const content = typeof m.content === 'string' ? m.content : '';
    const { promptIds, responseIds } = retokenizeChat(
      {
        messages: messages.slice(0, at) as unknown as ChatMessageInput[],
        tools: (tools as never) ?? null,
        ...(thinking !== undefined ? { enableThinking: thinking } : {}),
      },
      {
        promptIds: null,
        responseIds: null,
        logprobs: null,
        content,
        reasoning: typeof m.reasoning_content === 'string' ? m.reasoning_content : null,
        toolCalls: calls as never,
        finishReason: calls.length > 0 ? 'tool_calls' : 'stop',
        usage: null,
        model: null,
        idsIncomplete: false,
        versionSpans: null,
      },
      tokenizer,
    );
    const answers: ToolResult[] = [];
    for (let j = at + 1; messages[j]?.role === 'tool'; j++) {
      const t = messages[j]!;
      const known = results.get(toolKey(t));
      answers.push(
        known ?? {
          ...(typeof t.tool_call_id === 'string' ? { tool_call_id: t.tool_call_id } : {}),
          content: String(t.content ?? ''),
          error: false,
        },
      );
    }
    steps.push(
      newStep({
        trajectoryId: derivedId,
        groupId: source.groupId,
        index: steps.length,
        promptIds,
        responseIds,
        policyVersion: version,
        tokenSource: 'retokenized',
        finishReason: calls.length > 0 ? 'tool_calls' : 'stop',
        messages: messages.slice(0, at) as JsonObject[],
        tools,
        responseText: content,
        toolCalls: calls.length > 0 ? calls : null,
        toolResults: answers.length > 0 ? answers : null,
        metadata: { purified_offline: true },
        engineId: first.engineId,
      }),
    );
  });
  if (steps.length > 0) steps[steps.length - 1]!.isLast = true;
  return steps;
}

/** The summed metrics of an online run's record (`metadata.cleaner`, report.ts's snake_case). */
export function onlineMetrics(
  record: unknown,
): Pick<
  CleanerMetrics,
  'rollbacksTriggered' | 'recovered' | 'failed' | 'shallow' | 'deep' | 'removedErrorTypes'
> {
  const r = (typeof record === 'object' && record !== null ? record : {}) as Record<string, unknown>;
  const n = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : 0);
  const types = r.removed_error_types;
  return {
    rollbacksTriggered: n(r.rollbacks_triggered),
    recovered: n(r.recovered),
    failed: n(r.failed),
    shallow: n(r.shallow),
    deep: n(r.deep),
    removedErrorTypes:
      typeof types === 'object' && types !== null && !Array.isArray(types)
        ? Object.fromEntries(Object.entries(types).map(([k, v]) => [k, n(v)]))
        : {},
  };
}

/** The last served row's context and the tool results that answered it. */
export function servedContext(steps: readonly Step[]): JsonObject[] {
  const last = steps.at(-1);
  if (!last) return [];
  return [
    ...((last.messages ?? []) as JsonObject[]),
    ...(last.toolResults ?? []).map((t) => ({
      role: 'tool',
      tool_call_id: t.tool_call_id ?? '',
      content: t.content,
    })),
  ];
}

/** Steps served in order under the derived id, numbered afresh (grafts took some indices out). */
function reindexed(derivedId: string, served: readonly Step[]): NewStep[] {
  const steps = served.map(({ channel: _c, createdAt: _t, ...s }, index) => ({
    ...s,
    trajectoryId: derivedId,
    index,
    isLast: false,
  }));
  if (steps.length > 0) steps[steps.length - 1]!.isLast = true;
  return steps;
}

export const modeOf = (modes: readonly string[]) => {
  const set = new Set(modes);
  return set.size === 1 ? (modes[0] as 'shallow' | 'deep') : 'mixed';
};

/** A trajectory's steps verbatim under the derived id (nothing rolled back). */
function copiedSteps(derivedId: string, original: readonly Step[]): NewStep[] {
  return original.map(({ channel: _c, createdAt: _t, ...s }) => ({ ...s, trajectoryId: derivedId }));
}

/** What purification reads and writes of a pool (the DataPool's operations). */
/**
 * The derived trajectory's steps: grafted from an online run's repairs, rebuilt from an offline
 * purification's messages, or copied; null when the model's template does not reproduce the prompt.
 */
export function derivedSteps(
  source: Trajectory,
  derivedId: string,
  original: Step[],
  c: {
    online: ReturnType<typeof onlineCleaner>;
    result: ReturnType<typeof purifyTrajectory>;
    tokenizer: ChatTokenizer;
    modelOf: ModelOfStep | undefined;
  },
): { steps: NewStep[]; grafted: TrainingView | null } | null {
  const { online, result, tokenizer } = c;
  if (online) {
    // Rolled back online: the captured calls are purified already, at the token level (graft.ts).
    const grafted = trainingView(original, online.repairs, {
      abandonedSteps: online.abandonedSteps,
      toolCallTokenId: online.toolCallTokenId ?? undefined,
      ...(c.modelOf ? { modelOf: c.modelOf } : {}),
    });
    return { steps: reindexed(derivedId, grafted.steps), grafted };
  }
  if (!result.changed) return { steps: copiedSteps(derivedId, original), grafted: null };
  if (!templateReproduces(original[0]!, tokenizer)) return null;
  return { steps: purifiedSteps(source, derivedId, original, result.messages, tokenizer), grafted: null };
}
