import type { EngineVersionSpan } from '../../engines/capture.js';
import type { Engine, RoutedReply } from '../../engines/router.js';
import { UpstreamError } from '../../engines/upstream.js';
import type { ModelAdapter } from '../../text/model-adapter.js';
import { qwen3Adapter } from '../../text/model-adapter.js';
import type { CallContext } from '../call-context.js';
import { isObject } from '../call-request.js';
import { SAMPLING } from '../continuity.js';

/*
 * A partial rollout's continuation: an engine paused with `abort` answers a running call with the
 * tokens made so far and finish_reason "abort"; the gateway asks for the rest as a text completion
 * of the prompt's ids and those tokens, exact token for token (AReaL's and slime's way), once its
 * own switch is over. The agent gets one ordinary answer (whole.ts, stream.ts).
 */

type Json = Record<string, unknown>;

/** How many times one call may be cut by a switch and continued before it fails. */
export const MAX_CONTINUATIONS = 16;

export interface SpliceDeps {
  /** Resolves once this gateway's weight switch (if any) stops holding calls. */
  settled(): Promise<void>;
  /** The policy version in force now. */
  version(): Promise<number>;
  /** The decoded text of generated ids (the engine's model; special tokens skipped, as vLLM). */
  decode(ids: number[], engine: Engine): Promise<string>;
}

/**
 * What a continuation keeps from the agent's request: the sampling fields a chat shares with
 * `/v1/completions` (token continuity's list), and how its text is decoded. `min_tokens` is
 * counted down apart.
 */
const KEPT = [
  ...SAMPLING.filter((key) => key !== 'min_tokens'),
  'skip_special_tokens',
  'include_stop_str_in_output',
] as const;

/** The request's token budget: what it asked for, or what the engine's context leaves. */
function budget(ctx: CallContext, engine: Engine, promptLength: number): number | null {
  const r = ctx.request as Json;
  const asked = ctx.kind === 'chat' ? (r.max_completion_tokens ?? r.max_tokens) : r.max_tokens;
  if (typeof asked === 'number') return asked;
  // A text completion's default is 16 tokens; a chat's is the rest of the context.
  if (ctx.kind === 'text') return 16;
  const context = ctx.router.maxModelLen(engine.id);
  return context === null ? null : context - promptLength;
}

/** The completion request that continues `soFar` after `promptIds` on `engine`. */
export function continuationBody(
  ctx: CallContext,
  engine: Engine,
  promptIds: readonly number[],
  soFar: readonly number[],
  stream: boolean,
): string {
  const r = ctx.request as Json;
  const served = ctx.router.models(engine.id);
  const total = budget(ctx, engine, promptIds.length);
  const body: Json = {
    model: served[0] ?? r.model,
    prompt: [...promptIds, ...soFar],
    return_token_ids: true,
    logprobs:
      ctx.kind === 'chat' ? (typeof r.top_logprobs === 'number' ? r.top_logprobs : 0) : (r.logprobs ?? 0),
    ...(total === null ? {} : { max_tokens: Math.max(1, total - soFar.length) }),
    ...(typeof r.min_tokens === 'number' ? { min_tokens: Math.max(0, r.min_tokens - soFar.length) } : {}),
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  };
  for (const key of KEPT) if (r[key] !== undefined && r[key] !== null) body[key] = r[key];
  return JSON.stringify(body);
}

/** Whether nothing is left to generate: the budget was spent exactly when the cut came. */
export function budgetSpent(
  ctx: CallContext,
  engine: Engine,
  promptIds: readonly number[],
  soFar: number,
): boolean {
  const total = budget(ctx, engine, promptIds.length);
  return total !== null && soFar >= total;
}

/** Sends the continuation once this gateway's switch is over; the reply is the engine's. */
export async function sendContinuation(
  ctx: CallContext,
  deps: SpliceDeps,
  promptIds: readonly number[],
  soFar: readonly number[],
  stream: boolean,
): Promise<RoutedReply> {
  await deps.settled();
  const routed = await ctx.router.send(
    ctx.session.id,
    'POST',
    '/v1/completions',
    null,
    ctx.signal,
    (engine) => continuationBody(ctx, engine, promptIds, soFar, stream),
  );
  if (routed.reply.status !== 200) {
    const text = await routed.reply.text().catch(() => '');
    routed.done();
    throw new UpstreamError(
      `engine ${routed.engine.id} refused the continuation of a partial rollout (${routed.reply.status}): ${text.slice(0, 300)}`,
      502,
      true,
    );
  }
  return routed;
}

/** vLLM's legacy completion log-probs as the chat format's entries (for a chat's spliced answer). */
export function chatLogprobEntries(legacy: unknown): Json[] {
  if (!isObject(legacy) || !Array.isArray(legacy.token_logprobs)) return [];
  const tokens = Array.isArray(legacy.tokens) ? legacy.tokens : [];
  const tops = Array.isArray(legacy.top_logprobs) ? legacy.top_logprobs : [];
  return legacy.token_logprobs.map((logprob, i) => {
    const token = typeof tokens[i] === 'string' ? (tokens[i] as string) : '';
    const top = isObject(tops[i]) ? Object.entries(tops[i] as Json) : [];
    return {
      token,
      logprob,
      bytes: [...Buffer.from(token, 'utf8')],
      top_logprobs: top.map(([t, lp]) => ({ token: t, logprob: lp, bytes: [...Buffer.from(t, 'utf8')] })),
    };
  });
}

/**
 * The spans of `count` ids as the engine reported them (`weight_version_spans`), its null versions
 * (weights it was never told the version of) being `fallback`; `[[fallback, count]]` without any.
 */
export function spansOf(reported: unknown, count: number, fallback: number): EngineVersionSpan[] {
  if (count === 0) return [];
  if (!Array.isArray(reported)) return [[fallback, count]];
  const spans = reported.filter(
    (s): s is EngineVersionSpan => Array.isArray(s) && s.length === 2 && typeof s[1] === 'number',
  );
  if (spans.reduce((n, [, c]) => n + c, 0) !== count) return [[fallback, count]];
  return spans.map(([v, c]) => [v ?? fallback, c]);
}

/** The model's adapter for parsing a spliced chat's text (Qwen3's for an engine without a folder). */
export function adapterOf(engine: Engine): ModelAdapter {
  return engine.adapter ?? qwen3Adapter();
}

/**
 * A spliced chat's text as the message vLLM's parsers make of it: content, reasoning, tool calls
 * (only when the request offered tools).
 */
export function parseMessage(
  text: string,
  engine: Engine,
  ctx: CallContext,
): { content: string | null; reasoning: string | undefined; toolCalls: Json[] } {
  const adapter = adapterOf(engine);
  const chat = ctx.chat;
  const tools =
    chat !== null && Array.isArray(chat.tools) && chat.tools.length > 0 && chat.tool_choice !== 'none';
  const parsed = adapter.parse(text, { newToolCallId: () => adapter.newToolCallId() });
  if (!tools) {
    // Without tools the text stays content, less a reasoning block the family writes inline.
    const close = adapter.thinking?.close;
    const at = close !== undefined && parsed.reasoning !== undefined ? text.indexOf(close) : -1;
    const content = at === -1 ? text : text.slice(at + close!.length).replace(/^\n+/, '');
    return { content: content === '' ? null : content, reasoning: parsed.reasoning, toolCalls: [] };
  }
  return {
    content: parsed.content,
    reasoning: parsed.reasoning,
    toolCalls: parsed.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { ...c.function } })),
  };
}
