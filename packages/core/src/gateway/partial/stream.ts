import type { Engine, RoutedReply } from '../../engines/router.js';
import { UpstreamError, type UpstreamReply } from '../../engines/upstream.js';
import { SseDecoder } from '../../text/index.js';
import type { CallContext } from '../call-context.js';
import { isObject } from '../call-request.js';
import {
  adapterOf,
  budgetSpent,
  chatLogprobEntries,
  MAX_CONTINUATIONS,
  parseMessage,
  type SpliceDeps,
  sendContinuation,
  spansOf,
} from './continuation.js';
import { idsOf } from './whole.js';

/*
 * A streamed answer that a weight switch cut: the engine's events go to the agent as they come;
 * at the one that finishes with "abort", the gateway streams the continuation in the same protocol
 * (a chat's chunks rebuilt from the completion's), each chunk with its ids and weights versions,
 * then one finishing chunk (a chat's tool calls parsed from the whole text, as vLLM's parser would
 * have sent them) and the usage of the whole answer. The agent sees one ordinary stream.
 */

type Json = Record<string, unknown>;

export function splicedStream(
  ctx: CallContext,
  routed: RoutedReply,
  version: number,
  deps: SpliceDeps,
): UpstreamReply {
  const inner = routed.reply;
  return {
    status: inner.status,
    contentType: inner.contentType,
    body: { [Symbol.asyncIterator]: () => passThrough(ctx, routed, version, deps) },
    text: () => inner.text(),
    bytes: () => inner.bytes(),
    discard: () => inner.discard(),
  };
}

const encoder = new TextEncoder();
const frame = (data: unknown) => `data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`;

/** A finishing "abort" event whose ids can be continued; null for any other event. */
function abortOf(data: string): Json | null {
  if (!data.includes('"abort"')) return null;
  try {
    const chunk = JSON.parse(data) as unknown;
    const choice = isObject(chunk) && Array.isArray(chunk.choices) ? chunk.choices[0] : null;
    return isObject(choice) && choice.finish_reason === 'abort' ? (chunk as Json) : null;
  } catch {
    return null;
  }
}

async function* passThrough(
  ctx: CallContext,
  routed: RoutedReply,
  version: number,
  deps: SpliceDeps,
): AsyncGenerator<Uint8Array> {
  const decoder = new SseDecoder();
  // The events so far, read again only if a switch cuts the answer.
  const seen: string[] = [];
  const iterator = routed.reply.body[Symbol.asyncIterator]();
  for (let ended = false; !ended; ) {
    const next = await iterator.next();
    ended = next.done === true;
    let out = '';
    for (const event of ended ? decoder.end() : decoder.push(next.value!)) {
      const cut = event.data === '[DONE]' ? null : abortOf(event.data);
      if (cut) {
        const state = replay(seen, cut);
        if (state) {
          if (out !== '') yield encoder.encode(out);
          routed.reply.discard();
          for await (const text of continueStream(ctx, deps, state, routed.engine, version))
            yield encoder.encode(text);
          return;
        }
      }
      seen.push(event.data);
      out += frame(event.data);
    }
    if (out !== '') yield encoder.encode(out);
  }
}

/** What the agent was sent before the cut, read back from the events. */
interface Sent {
  envelope: Json;
  promptIds: number[];
  ids: number[];
  content: string;
  reasoning: string;
  calls: Map<number, { name: string; args: string }>;
  /** The cut chunk itself, to send on without its finish. */
  cut: Json;
}

function replay(seen: string[], cut: Json): Sent | null {
  const sent: Sent = {
    envelope: {},
    promptIds: [],
    ids: [],
    content: '',
    reasoning: '',
    calls: new Map(),
    cut,
  };
  let prompt: number[] | null = null;
  for (const data of [...seen.map((d) => JSON.parse(d) as unknown), cut]) {
    if (!isObject(data)) continue;
    prompt ??= idsOf(data.prompt_token_ids);
    const choice = Array.isArray(data.choices) ? data.choices[0] : null;
    if (!isObject(choice)) continue;
    prompt ??= idsOf(choice.prompt_token_ids);
    sent.envelope = { id: data.id, object: data.object, created: data.created, model: data.model };
    const ids = idsOf(choice.token_ids);
    const delta = isObject(choice.delta) ? choice.delta : null;
    const carries = delta?.content || delta?.tool_calls || delta?.reasoning_content || choice.text;
    if (ids === null && carries) return null; // tokens without ids: no exact continuation
    sent.ids.push(...(ids ?? []));
    if (typeof delta?.content === 'string') sent.content += delta.content;
    if (typeof choice.text === 'string') sent.content += choice.text;
    const reasoning = delta?.reasoning_content ?? delta?.reasoning;
    if (typeof reasoning === 'string') sent.reasoning += reasoning;
    for (const [i, c] of (Array.isArray(delta?.tool_calls) ? delta.tool_calls : []).entries()) {
      if (!isObject(c)) continue;
      const index = typeof c.index === 'number' ? c.index : i;
      const fn = isObject(c.function) ? c.function : {};
      const call = sent.calls.get(index) ?? { name: '', args: '' };
      if (typeof fn.name === 'string') call.name += fn.name;
      if (typeof fn.arguments === 'string') call.args += fn.arguments;
      sent.calls.set(index, call);
    }
  }
  if (prompt === null) return null;
  sent.promptIds = prompt;
  return sent;
}

/** How much of a prefix of `marker` the text ends with (held back: the marker may be arriving). */
function partialMarker(text: string, marker: string): number {
  for (let k = Math.min(marker.length - 1, text.length); k > 0; k--)
    if (marker.startsWith(text.slice(-k))) return k;
  return 0;
}

/** Splits a chat continuation's text into what may go out as reasoning and as content so far. */
class ChatText {
  private sentReasoning = 0;
  private sentContent = 0;
  private readonly inReasoning: boolean;
  private readonly holdAll: boolean;
  private readonly opener: string | null;
  private readonly close: string | null;

  constructor(ctx: CallContext, engine: Engine, sent: Sent, prefixText: string) {
    const adapter = adapterOf(engine);
    const chat = ctx.chat;
    const tools =
      chat !== null && Array.isArray(chat.tools) && chat.tools.length > 0 && chat.tool_choice !== 'none';
    this.opener = tools ? adapter.toolCallOpen : null;
    this.close = adapter.thinking?.close ?? null;
    this.inReasoning =
      this.close !== null && sent.reasoning !== '' && sent.content === '' && sent.calls.size === 0;
    this.holdAll = sent.calls.size > 0 || (this.opener !== null && prefixText.includes(this.opener));
  }

  /**
   * The deltas `text` (all of the continuation so far) adds to what went out; `end` once it is all
   * there, saying whether the whole text holds tool calls (content stops where they start).
   */
  deltas(text: string, end?: { calls: boolean }): { reasoning: string; content: string } {
    const final = end !== undefined;
    let reasoning = '';
    let content = text;
    if (this.inReasoning && this.close !== null) {
      const at = text.indexOf(this.close);
      if (at === -1) {
        reasoning = final ? text : text.slice(0, text.length - partialMarker(text, this.close));
        content = '';
      } else {
        reasoning = text.slice(0, at);
        content = text.slice(at + this.close.length).replace(/^\n+/, '');
      }
    }
    if (this.holdAll) content = '';
    else if (this.opener !== null && !(end && !end.calls)) {
      const at = content.indexOf(this.opener);
      if (at >= 0) content = content.slice(0, at);
      else if (!final) content = content.slice(0, content.length - partialMarker(content, this.opener));
    }
    // A trailing U+FFFD may be half a character: it waits for the next token.
    if (!final && content.endsWith('\uFFFD')) content = content.slice(0, -1);
    const out = {
      reasoning: reasoning.length > this.sentReasoning ? reasoning.slice(this.sentReasoning) : '',
      content: content.length > this.sentContent ? content.slice(this.sentContent) : '',
    };
    this.sentReasoning = Math.max(this.sentReasoning, reasoning.length);
    this.sentContent = Math.max(this.sentContent, content.length);
    return out;
  }
}

async function* continueStream(
  ctx: CallContext,
  deps: SpliceDeps,
  sent: Sent,
  engine: Engine,
  version: number,
): AsyncGenerator<string> {
  const cutChoice = (sent.cut.choices as Json[])[0]!;
  // By the answer's shape: token continuity may ask the engine for a text completion of a chat.
  const chat = sent.envelope.object === 'chat.completion.chunk';
  const cutIds = idsOf(cutChoice.token_ids) ?? [];
  // The cut chunk's own tokens go on, without its finish.
  if (cutIds.length > 0 || isObject(cutChoice.delta) || typeof cutChoice.text === 'string') {
    const { stop_reason: _, ...rest } = cutChoice;
    yield frame({
      ...sent.cut,
      choices: [
        {
          ...rest,
          finish_reason: null,
          weight_version_spans: spansOf(cutChoice.weight_version_spans, cutIds.length, version),
        },
      ],
    });
  }
  const prefixText = chat ? await deps.decode(sent.ids, engine) : '';
  const split = chat ? new ChatText(ctx, engine, sent, prefixText) : null;
  const textOffset = [...sent.content].length;
  let text = '';
  let finish: unknown = 'abort';
  let stopReason: unknown = null;
  for (let n = 0; finish === 'abort'; n++) {
    if (n >= MAX_CONTINUATIONS)
      throw new UpstreamError(
        `a partial rollout was cut ${n} times by weight switches; giving up`,
        502,
        true,
      );
    if (budgetSpent(ctx, engine, sent.promptIds, sent.ids.length)) {
      finish = 'length';
      break;
    }
    const routed = await sendContinuation(ctx, deps, sent.promptIds, sent.ids, true);
    engine = routed.engine;
    let after: number | null = null;
    try {
      const decoder = new SseDecoder();
      for await (const bytes of routed.reply.body) {
        for (const event of decoder.push(bytes)) {
          if (event.data === '[DONE]') continue;
          const chunk = JSON.parse(event.data) as unknown;
          const choice = isObject(chunk) && Array.isArray(chunk.choices) ? chunk.choices[0] : null;
          if (!isObject(choice)) continue;
          after ??= await deps.version();
          const more = idsOf(choice.token_ids) ?? [];
          sent.ids.push(...more);
          const piece = typeof choice.text === 'string' ? choice.text : '';
          const offset = [...text].length + textOffset;
          text += piece;
          if (choice.finish_reason != null) {
            finish = choice.finish_reason;
            stopReason = choice.stop_reason ?? null;
          }
          const spans = spansOf(choice.weight_version_spans, more.length, after);
          if (more.length === 0 && piece === '') continue;
          yield frame(
            chat
              ? chatChunk(sent.envelope, split!.deltas(text), more, spans, choice.logprobs)
              : textChunk(sent.envelope, piece, more, spans, choice.logprobs, offset),
          );
        }
      }
    } finally {
      routed.done();
    }
  }
  yield* finishStream(ctx, sent, engine, chat, { prefixText, text, split, finish, stopReason });
}

function chatChunk(
  envelope: Json,
  deltas: { reasoning: string; content: string },
  ids: number[],
  spans: unknown,
  logprobs: unknown,
): Json {
  const delta: Json = {};
  if (deltas.reasoning !== '') delta.reasoning_content = deltas.reasoning;
  if (deltas.content !== '') delta.content = deltas.content;
  return {
    ...envelope,
    choices: [
      {
        index: 0,
        delta,
        logprobs: isObject(logprobs) ? { content: chatLogprobEntries(logprobs) } : null,
        finish_reason: null,
        token_ids: ids,
        weight_version_spans: spans,
      },
    ],
  };
}

function textChunk(
  envelope: Json,
  text: string,
  ids: number[],
  spans: unknown,
  logprobs: unknown,
  offset: number,
): Json {
  const lp = isObject(logprobs)
    ? { ...logprobs, text_offset: ((logprobs.text_offset as number[]) ?? []).map((o) => o + offset) }
    : null;
  return {
    ...envelope,
    choices: [
      {
        index: 0,
        text,
        logprobs: lp,
        finish_reason: null,
        stop_reason: null,
        token_ids: ids,
        weight_version_spans: spans,
      },
    ],
  };
}

/** The finishing chunk (a chat's rest of content and its tool calls), the whole answer's usage, [DONE]. */
async function* finishStream(
  ctx: CallContext,
  sent: Sent,
  engine: Engine,
  chat: boolean,
  end: { prefixText: string; text: string; split: ChatText | null; finish: unknown; stopReason: unknown },
): AsyncGenerator<string> {
  let finish = end.finish;
  if (chat) {
    const message = parseMessage(end.prefixText + end.text, engine, ctx);
    const last = end.split!.deltas(end.text, { calls: message.toolCalls.length > 0 });
    const delta: Json = {};
    if (last.reasoning !== '') delta.reasoning_content = last.reasoning;
    if (last.content !== '') delta.content = last.content;
    // Calls whose start went out before the cut get the rest of their arguments; the others whole.
    const calls: Json[] = [];
    for (const [i, call] of message.toolCalls.entries()) {
      const fn = call.function as { name: string; arguments: string };
      const before = sent.calls.get(i);
      if (!before) calls.push({ index: i, ...call });
      else if (fn.arguments.startsWith(before.args) && fn.arguments.length > before.args.length)
        calls.push({ index: i, function: { arguments: fn.arguments.slice(before.args.length) } });
    }
    if (calls.length > 0) delta.tool_calls = calls;
    if (finish === 'stop' && message.toolCalls.length > 0) finish = 'tool_calls';
    yield frame({
      ...sent.envelope,
      // No ids of its own (they went with the chunks before), said as such: the capture keeps them.
      choices: [
        {
          index: 0,
          delta,
          logprobs: null,
          finish_reason: finish,
          stop_reason: end.stopReason,
          token_ids: [],
        },
      ],
    });
  } else {
    yield frame({
      ...sent.envelope,
      choices: [
        {
          index: 0,
          text: '',
          logprobs: null,
          finish_reason: finish,
          stop_reason: end.stopReason,
          token_ids: [],
        },
      ],
    });
  }
  const prompt = sent.promptIds.length;
  const usage = {
    prompt_tokens: prompt,
    completion_tokens: sent.ids.length,
    total_tokens: prompt + sent.ids.length,
  };
  yield frame({ ...sent.envelope, choices: [], usage });
  yield frame('[DONE]');
}
