import type { EngineVersionSpan } from '../../engines/capture.js';
import type { Engine, RoutedReply } from '../../engines/router.js';
import { UpstreamError, type UpstreamReply } from '../../engines/upstream.js';
import type { CallContext } from '../call-context.js';
import { isObject } from '../call-request.js';
import {
  budgetSpent,
  chatLogprobEntries,
  MAX_CONTINUATIONS,
  parseMessage,
  type SpliceDeps,
  sendContinuation,
  spansOf,
} from './continuation.js';

/*
 * A whole (not streamed) answer that a weight switch cut: the engine's partial answer and its
 * continuations become the one answer the engine would have given, its ids, log-probs and text
 * joined, the message parsed again from the whole text, and each token's weights version in
 * `weight_version_spans` (which the step's capture reads).
 */

type Json = Record<string, unknown>;

const ABORT = Buffer.from('"abort"');

/** What the parts of a spliced answer add up to. */
interface Parts {
  ids: number[];
  spans: EngineVersionSpan[];
  /** Chat log-prob entries, or a completion's legacy log-probs. */
  chatLogprobs: unknown[];
  legacy: { text_offset: number[]; token_logprobs: unknown[]; tokens: unknown[]; top_logprobs: unknown[] };
  text: string;
  finish: unknown;
  stopReason: unknown;
  engine: Engine;
}

export const idsOf = (v: unknown): number[] | null =>
  Array.isArray(v) && v.every((x) => typeof x === 'number')
    ? (v as number[])
    : v instanceof Uint32Array
      ? [...v]
      : null;

/** `reply` with its answer spliced when a switch cut it (read whole: `bytes()` or `text()`). */
export function splicedWhole(
  ctx: CallContext,
  routed: RoutedReply,
  version: number,
  deps: SpliceDeps,
): UpstreamReply {
  const inner = routed.reply;
  let spliced: Promise<Buffer> | null = null;
  const bytes = () => {
    spliced ??= splice(ctx, routed.engine, inner, version, deps);
    return spliced;
  };
  return {
    status: inner.status,
    contentType: inner.contentType,
    body: {
      async *[Symbol.asyncIterator]() {
        yield await bytes();
      },
    },
    text: async () => (await bytes()).toString('utf8'),
    bytes,
    discard: () => inner.discard(),
  };
}

async function splice(
  ctx: CallContext,
  engine: Engine,
  inner: UpstreamReply,
  version: number,
  deps: SpliceDeps,
): Promise<Buffer> {
  const first = await inner.bytes();
  if (first.indexOf(ABORT) === -1) return first;
  let answer: Json;
  try {
    answer = JSON.parse(first.toString('utf8')) as Json;
  } catch {
    return first;
  }
  const choice = Array.isArray(answer.choices) ? answer.choices[0] : null;
  if (!isObject(choice) || choice.finish_reason !== 'abort') return first;
  const promptIds = idsOf(answer.prompt_token_ids) ?? idsOf(choice.prompt_token_ids);
  const soFar = idsOf(choice.token_ids);
  // Without the ids nothing can be continued exactly: the abort stands, as the engine gave it.
  if (!promptIds || !soFar) return first;
  const logprobs = isObject(choice.logprobs) ? choice.logprobs : null;
  const parts: Parts = {
    ids: [...soFar],
    spans: spansOf(choice.weight_version_spans, soFar.length, version),
    chatLogprobs: Array.isArray(logprobs?.content) ? [...logprobs.content] : [],
    legacy: {
      text_offset: [...((logprobs?.text_offset as number[]) ?? [])],
      token_logprobs: [...((logprobs?.token_logprobs as unknown[]) ?? [])],
      tokens: [...((logprobs?.tokens as unknown[]) ?? [])],
      top_logprobs: [...((logprobs?.top_logprobs as unknown[]) ?? [])],
    },
    text: typeof choice.text === 'string' ? choice.text : '',
    finish: 'abort',
    stopReason: null,
    engine,
  };
  await continueParts(ctx, deps, promptIds, parts);
  await rebuild(ctx, deps, answer, choice, parts, promptIds.length);
  return Buffer.from(JSON.stringify(answer));
}

/** Continues until an answer ends other than by a switch's abort. */
async function continueParts(
  ctx: CallContext,
  deps: SpliceDeps,
  promptIds: number[],
  parts: Parts,
): Promise<void> {
  for (let n = 0; parts.finish === 'abort'; n++) {
    if (n >= MAX_CONTINUATIONS)
      throw new UpstreamError(
        `a partial rollout was cut ${n} times by weight switches; giving up`,
        502,
        true,
      );
    if (budgetSpent(ctx, parts.engine, promptIds, parts.ids.length)) {
      parts.finish = 'length';
      return;
    }
    const routed = await sendContinuation(ctx, deps, promptIds, parts.ids, false);
    let cont: unknown;
    try {
      cont = JSON.parse(await routed.reply.text());
    } finally {
      routed.done();
    }
    // Read after the answer: the continuation ran on weights resumed under this version or later.
    const after = await deps.version();
    const choice = isObject(cont) && Array.isArray(cont.choices) ? cont.choices[0] : null;
    const more = isObject(choice) ? idsOf(choice.token_ids) : null;
    if (!isObject(choice) || !more)
      throw new UpstreamError(
        `engine ${routed.engine.id} continued a partial rollout without token ids`,
        502,
        true,
      );
    parts.ids.push(...more);
    parts.spans.push(...spansOf(choice.weight_version_spans, more.length, after));
    parts.chatLogprobs.push(...chatLogprobEntries(choice.logprobs));
    appendLegacy(parts, choice);
    parts.text += typeof choice.text === 'string' ? choice.text : '';
    parts.finish = choice.finish_reason;
    parts.stopReason = choice.stop_reason ?? null;
    parts.engine = routed.engine;
  }
}

function appendLegacy(parts: Parts, choice: Json): void {
  const lp = isObject(choice.logprobs) ? choice.logprobs : null;
  if (!lp) return;
  const shift = [...parts.text].length;
  for (const o of (lp.text_offset as number[]) ?? []) parts.legacy.text_offset.push(o + shift);
  parts.legacy.token_logprobs.push(...((lp.token_logprobs as unknown[]) ?? []));
  parts.legacy.tokens.push(...((lp.tokens as unknown[]) ?? []));
  parts.legacy.top_logprobs.push(...((lp.top_logprobs as unknown[]) ?? []));
}

/** The answer the engine would have given uncut, over the first answer's envelope. */
async function rebuild(
  ctx: CallContext,
  deps: SpliceDeps,
  answer: Json,
  choice: Json,
  parts: Parts,
  promptLength: number,
): Promise<void> {
  choice.token_ids = parts.ids;
  choice.weight_version_spans = parts.spans;
  choice.stop_reason = parts.stopReason;
  // By the answer's shape: token continuity may ask the engine for a text completion of a chat.
  if (isObject(choice.message)) {
    const message = parseMessage(await deps.decode(parts.ids, parts.engine), parts.engine, ctx);
    const previous = isObject(choice.message) ? choice.message : {};
    choice.message = {
      ...previous,
      content: message.content,
      tool_calls: message.toolCalls,
      ...(message.reasoning !== undefined || 'reasoning_content' in previous
        ? { reasoning_content: message.reasoning ?? null }
        : {}),
    };
    choice.finish_reason =
      parts.finish === 'stop' && message.toolCalls.length > 0 ? 'tool_calls' : parts.finish;
    if (isObject(choice.logprobs)) choice.logprobs = { content: parts.chatLogprobs };
  } else {
    choice.text = parts.text;
    choice.finish_reason = parts.finish;
    if (isObject(choice.logprobs)) choice.logprobs = parts.legacy;
  }
  answer.usage = {
    ...(isObject(answer.usage) ? answer.usage : {}),
    prompt_tokens: promptLength,
    completion_tokens: parts.ids.length,
    total_tokens: promptLength + parts.ids.length,
  };
}
