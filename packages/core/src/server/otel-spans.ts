import { createHash, randomBytes } from 'node:crypto';
import { type Attributes, type HrTime, type SpanContext, SpanKind, SpanStatusCode } from '@opentelemetry/api';
import type { Resource } from '@opentelemetry/resources';
import type { ReadableSpan } from '@opentelemetry/sdk-trace';
import type { Trajectory } from '../domain/index.js';
import type { StoredCall } from '../gateway/call-trace.js';

/*
 * Stepwise's records as OpenTelemetry spans: a stored step is a GenAI inference span (semantic
 * conventions for generative AI client spans, `chat {model}`), a finished trajectory a span whose
 * children are its steps. Prompts and answers go out only when asked (`content`).
 */

/** A W3C Trace Context `traceparent`, parsed; null when it is not one. */
export function parseTraceparent(
  header: string | null,
): { traceId: string; spanId: string; flags: number } | null {
  if (header === null) return null;
  // version-traceid-parentid-flags; a later version may append fields after a dash.
  const m = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/.exec(header.trim());
  if (m === null) return null;
  const [, version, traceId, spanId, flags, rest] = m;
  if (version === 'ff' || (version === '00' && rest !== undefined)) return null;
  if (/^0+$/.test(traceId!) || /^0+$/.test(spanId!)) return null;
  return { traceId: traceId!, spanId: spanId!, flags: Number.parseInt(flags!, 16) };
}

/**
 * A trajectory's trace and span ids, derived from its id: its steps name it as their parent before
 * it ends, in any process that serves its calls.
 */
export function trajectorySpanContext(trajectoryId: string): SpanContext {
  const hash = createHash('sha256').update(`stepwise.trajectory:${trajectoryId}`).digest('hex');
  return { traceId: hash.slice(0, 32), spanId: hash.slice(32, 48), traceFlags: 1, isRemote: true };
}

const hrTime = (epochMs: number): HrTime => {
  const seconds = Math.floor(epochMs / 1000);
  return [seconds, Math.round((epochMs - seconds * 1000) * 1e6)];
};

/*
 * Opt-in content is bounded (a span is held in memory until sent): each text at most MAX_TEXT
 * characters, and an attribute past MAX_CONTENT keeps only the latest messages that fit.
 */
const MAX_TEXT = 4096;
const MAX_CONTENT = 32 * 1024;

const clip = (v: unknown) => (typeof v === 'string' && v.length > MAX_TEXT ? `${v.slice(0, MAX_TEXT)}…` : v);

function contentJson(messages: Part[]): string {
  const kept: string[] = [];
  let size = 2;
  for (let i = messages.length - 1; i >= 0; i--) {
    const one = JSON.stringify(messages[i]);
    size += one.length + 1;
    if (size > MAX_CONTENT) break;
    kept.push(one);
  }
  return `[${kept.reverse().join(',')}]`;
}

export interface SpanSource {
  resource: Resource;
  scope: { name: string; version?: string };
  /** Prompts and answers as gen_ai.input.messages / gen_ai.output.messages (opt-in). */
  content: boolean;
}

function span(
  source: SpanSource,
  fields: Pick<ReadableSpan, 'name' | 'kind' | 'attributes' | 'links' | 'status'> & {
    context: SpanContext;
    parent: SpanContext | undefined;
    start: number;
    end: number;
  },
): ReadableSpan {
  const start = hrTime(fields.start);
  const end = hrTime(Math.max(fields.start, fields.end));
  const ms = Math.max(0, fields.end - fields.start);
  return {
    name: fields.name,
    kind: fields.kind,
    spanContext: () => fields.context,
    parentSpanContext: fields.parent,
    startTime: start,
    endTime: end,
    duration: hrTime(ms),
    status: fields.status,
    attributes: fields.attributes,
    links: fields.links,
    events: [],
    ended: true,
    resource: source.resource,
    instrumentationScope: source.scope,
    droppedAttributesCount: 0,
    droppedEventsCount: 0,
    droppedLinksCount: 0,
  };
}

const number = (v: unknown): number | undefined =>
  typeof v === 'number' && Number.isFinite(v) ? v : undefined;

/** The span of one stored step: the agent's span is its parent when it sent one, else its trajectory's. */
export function stepSpan(source: SpanSource, call: StoredCall): ReadableSpan {
  const { step, request, origin } = call;
  const trajectory = trajectorySpanContext(step.trajectoryId);
  const agent = parseTraceparent(origin.traceparent);
  const parent: SpanContext = agent
    ? { traceId: agent.traceId, spanId: agent.spanId, traceFlags: agent.flags, isRemote: true }
    : trajectory;
  const operation = call.kind === 'chat' ? 'chat' : 'text_completion';
  const model = typeof request.model === 'string' ? request.model : undefined;
  const attributes: Attributes = {
    'gen_ai.operation.name': operation,
    'gen_ai.provider.name': call.engineKind,
    'gen_ai.conversation.id': step.trajectoryId,
    'gen_ai.usage.input_tokens': step.promptIds.length,
    'gen_ai.usage.output_tokens': step.responseIds.length,
    'stepwise.trajectory.id': step.trajectoryId,
    'stepwise.step.index': step.index,
    'stepwise.group.id': step.groupId,
    'stepwise.channel': call.channel,
    'stepwise.token_source': step.tokenSource,
  };
  const set = (key: string, value: string | number | boolean | string[] | undefined | null) => {
    if (value !== undefined && value !== null) attributes[key] = value;
  };
  set('gen_ai.request.model', model);
  const served = step.metadata.served_model;
  set('gen_ai.response.model', typeof served === 'string' ? served : undefined);
  set('gen_ai.response.id', call.responseId);
  set('gen_ai.request.max_tokens', number(request.max_tokens) ?? number(request.max_completion_tokens));
  set('gen_ai.request.temperature', number(request.temperature));
  set('gen_ai.request.top_p', number(request.top_p));
  set('gen_ai.request.top_k', number(request.top_k));
  set('gen_ai.request.seed', number(request.seed));
  set('gen_ai.request.frequency_penalty', number(request.frequency_penalty));
  set('gen_ai.request.presence_penalty', number(request.presence_penalty));
  const stop = request.stop;
  set(
    'gen_ai.request.stop_sequences',
    typeof stop === 'string'
      ? [stop]
      : Array.isArray(stop)
        ? stop.filter((s) => typeof s === 'string')
        : undefined,
  );
  set('gen_ai.request.stream', request.stream === true);
  set('gen_ai.response.finish_reasons', step.finishReason === null ? undefined : [step.finishReason]);
  if (request.stream === true && step.ttftMs !== null)
    set('gen_ai.response.time_to_first_chunk', step.ttftMs / 1000);
  set('stepwise.policy_version', step.policyVersion);
  set('stepwise.reward', step.reward);
  set('stepwise.engine.id', step.engineId);
  set('stepwise.latency_ms', step.latencyMs);
  set('stepwise.ttft_ms', step.ttftMs);
  if (source.content) {
    const input = call.kind === 'chat' ? inputMessages(request.messages) : textPrompt(request.prompt);
    if (input !== null) attributes['gen_ai.input.messages'] = contentJson(input);
    attributes['gen_ai.output.messages'] = contentJson(outputMessages(step));
  }
  return span(source, {
    name: model === undefined ? operation : `${operation} ${model}`,
    kind: SpanKind.CLIENT,
    context: { traceId: parent.traceId, spanId: randomBytes(8).toString('hex'), traceFlags: 1 },
    parent,
    start: origin.receivedAt,
    end: call.storedAt,
    attributes,
    // Under the agent's trace, the step still points at its trajectory.
    links: agent ? [{ context: trajectory }] : [],
    status: { code: SpanStatusCode.UNSET },
  });
}

/** The span of a finished trajectory: the parent of its steps that came without a traceparent. */
export function trajectorySpan(source: SpanSource, t: Trajectory): ReadableSpan {
  const attributes: Attributes = {
    'gen_ai.conversation.id': t.id,
    'stepwise.trajectory.id': t.id,
    'stepwise.group.id': t.groupId,
    'stepwise.channel': t.channel,
    'stepwise.trajectory.status': t.status,
    'stepwise.trajectory.n_steps': t.nSteps,
  };
  if (t.reward !== null) attributes['stepwise.reward'] = t.reward;
  if (t.taskId !== null) attributes['stepwise.task.id'] = t.taskId;
  return span(source, {
    name: 'stepwise.trajectory',
    kind: SpanKind.INTERNAL,
    context: { ...trajectorySpanContext(t.id), isRemote: false },
    parent: undefined,
    start: t.createdAt,
    end: t.completedAt ?? t.createdAt,
    attributes,
    links: [],
    status:
      t.status === 'infra_failed'
        ? { code: SpanStatusCode.ERROR, message: 'infra_failed' }
        : { code: SpanStatusCode.UNSET },
  });
}

// ---- opt-in content, in the semantic conventions' message shape (role and parts) ---------------

type Part = Record<string, unknown>;

function textParts(content: unknown): Part[] {
  if (typeof content === 'string') return content === '' ? [] : [{ type: 'text', content: clip(content) }];
  if (!Array.isArray(content)) return [];
  return content.flatMap((p) =>
    typeof p === 'object' && p !== null && typeof (p as Part).text === 'string'
      ? [{ type: 'text', content: clip((p as Part).text) }]
      : [],
  );
}

function inputMessages(messages: unknown): Part[] | null {
  if (!Array.isArray(messages)) return null;
  return messages.map((m: Part) => {
    const parts = textParts(m.content);
    if (m.role === 'tool')
      return {
        role: 'tool',
        parts: [{ type: 'tool_call_response', id: m.tool_call_id, response: m.content }],
      };
    if (Array.isArray(m.tool_calls))
      for (const c of m.tool_calls as Part[]) {
        const fn = (c.function ?? {}) as Part;
        parts.push({ type: 'tool_call', id: c.id, name: fn.name, arguments: clip(fn.arguments) });
      }
    return { role: m.role, parts };
  });
}

function textPrompt(prompt: unknown): Part[] | null {
  const text =
    typeof prompt === 'string'
      ? prompt
      : Array.isArray(prompt) && typeof prompt[0] === 'string'
        ? prompt[0]
        : null;
  return text === null ? null : [{ role: 'user', parts: [{ type: 'text', content: text }] }];
}

function outputMessages(step: StoredCall['step']): Part[] {
  const parts: Part[] = textParts(step.responseText ?? '');
  for (const c of (step.toolCalls ?? []) as Part[]) {
    const fn = (c.function ?? {}) as Part;
    parts.push({ type: 'tool_call', id: c.id, name: fn.name, arguments: clip(fn.arguments) });
  }
  return [{ role: 'assistant', parts, finish_reason: step.finishReason ?? 'stop' }];
}
