import type { ChatTokenizer } from '../../text/index.js';
import type { SimResult, SimTextResult, SimUsage } from './engine.js';

/** Response identity: the HTTP layer chooses these (`chatcmpl-...`, unix seconds, served model name). */
export interface ResponseMeta {
  id: string;
  created: number;
  model: string;
}

export interface LogprobEntry {
  token: string;
  logprob: number;
  bytes: number[];
}

export interface LogprobContent extends LogprobEntry {
  top_logprobs: LogprobEntry[];
}

export interface WireToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

export interface ChatCompletion {
  id: string;
  object: 'chat.completion';
  created: number;
  model: string;
  choices: {
    index: 0;
    message: {
      role: 'assistant';
      content: string | null;
      reasoning_content: string | null;
      tool_calls: WireToolCall[];
      refusal: null;
      function_call: null;
    };
    logprobs: { content: LogprobContent[] } | null;
    finish_reason: 'stop' | 'length' | 'tool_calls' | 'abort';
    stop_reason: string | null;
    token_ids: number[] | null;
  }[];
  usage: SimUsage;
  system_fingerprint: null;
  prompt_logprobs: null;
  prompt_token_ids: number[] | null;
}

export interface ChunkDelta {
  role?: 'assistant';
  content?: string;
  reasoning_content?: string;
  tool_calls?: (WireToolCall & { index: number })[];
}

export interface ChatCompletionChunk {
  id: string;
  object: 'chat.completion.chunk';
  created: number;
  model: string;
  choices: {
    index: 0;
    delta: ChunkDelta;
    logprobs: { content: LogprobContent[] } | null;
    finish_reason: 'stop' | 'length' | 'tool_calls' | 'abort' | null;
    stop_reason?: string | null;
    token_ids?: number[] | null;
  }[];
  usage?: SimUsage | null;
  prompt_token_ids?: number[] | null;
}

/** A chunk and how many completion tokens it carries, so the HTTP layer can pace it with the latency model. */
export interface TimedChunk<C = ChatCompletionChunk> {
  chunk: C;
  /** Number of completion tokens generated once this chunk can be sent (index into the schedule + 1). */
  tokensThrough: number;
}

export function finishReasonOf(result: SimResult): 'stop' | 'length' | 'tool_calls' | 'abort' {
  return result.finishReason === 'stop' && result.toolCalls.length > 0 ? 'tool_calls' : result.finishReason;
}

function entry(tokenizer: ChatTokenizer, tokenId: number, logprob: number): LogprobEntry {
  const token = tokenizer.decode([tokenId]);
  return { token, logprob, bytes: [...Buffer.from(token, 'utf8')] };
}

function logprobContent(
  tokenizer: ChatTokenizer,
  result: SimResult,
  from: number,
  to: number,
): LogprobContent[] {
  const out: LogprobContent[] = [];
  for (let i = from; i < to; i++) {
    const id = result.tokenIds[i]!;
    const top = result.topLogprobs?.[i] ?? [];
    out.push({
      ...entry(tokenizer, id, result.logprobs[i]!),
      top_logprobs: top.map((t) => entry(tokenizer, t.tokenId, t.logprob)),
    });
  }
  return out;
}

function wireToolCalls(result: SimResult): WireToolCall[] {
  return result.toolCalls.map((c) => ({ id: c.id, type: 'function', function: { ...c.function } }));
}

/** The non-streaming chat.completion body vLLM returns for this result. */
export function toChatCompletion(
  result: SimResult,
  meta: ResponseMeta,
  tokenizer: ChatTokenizer,
): ChatCompletion {
  const { options } = result;
  return {
    id: meta.id,
    object: 'chat.completion',
    created: meta.created,
    model: meta.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: result.content,
          reasoning_content: result.reasoning ?? null,
          tool_calls: wireToolCalls(result),
          refusal: null,
          function_call: null,
        },
        logprobs: options.logprobs
          ? { content: logprobContent(tokenizer, result, 0, result.tokenIds.length) }
          : null,
        finish_reason: finishReasonOf(result),
        stop_reason: result.stopReason,
        token_ids: options.returnTokenIds ? [...result.tokenIds] : null,
      },
    ],
    usage: { ...result.usage },
    system_fingerprint: null,
    prompt_logprobs: null,
    prompt_token_ids: options.returnTokenIds ? [...result.promptTokenIds] : null,
  };
}

/** Length of the decoded prefix that is final: a trailing U+FFFD may be an incomplete UTF-8 sequence. */
function stablePrefixLengths(tokenizer: ChatTokenizer, ids: readonly number[]): number[] {
  const out: number[] = [];
  for (let i = 1; i <= ids.length; i++) {
    const s = tokenizer.decode(ids.slice(0, i));
    out.push(i < ids.length && s.endsWith('\uFFFD') ? s.length - 1 : s.length);
  }
  // The prefix lengths must not decrease once held back characters resolve.
  for (let i = out.length - 2; i >= 0; i--) out[i] = Math.min(out[i]!, out[i + 1]!);
  return out;
}

/**
 * The streamed chat.completion.chunk objects vLLM would send for this result: a role chunk (with
 * `prompt_token_ids`), content token by token, reasoning and each tool call whole, a final chunk with
 * the finish reason, and a usage chunk when `stream_options.include_usage` was set. Concatenating the
 * deltas gives the non-streaming message; concatenating `token_ids` gives the completion's ids.
 */
export function toChatCompletionChunks(
  result: SimResult,
  meta: ResponseMeta,
  tokenizer: ChatTokenizer,
): TimedChunk[] {
  const { options } = result;
  const base = {
    id: meta.id,
    object: 'chat.completion.chunk' as const,
    created: meta.created,
    model: meta.model,
  };
  const eos = result.endTokenId ?? tokenizer.tokenId('<|im_end|>');
  const ids = result.tokenIds;
  const endsWithEos = ids.length > 0 && ids[ids.length - 1] === eos && result.finishReason === 'stop';
  const bodyCount = endsWithEos ? ids.length - 1 : ids.length;
  const ends = stablePrefixLengths(tokenizer, ids.slice(0, bodyCount));

  const chunks: TimedChunk[] = [];
  const push: PushChunk = (delta, from, to, finish = null) => {
    chunks.push({
      chunk: {
        ...base,
        choices: [
          {
            index: 0,
            delta,
            logprobs: options.logprobs ? { content: logprobContent(tokenizer, result, from, to) } : null,
            finish_reason: finish,
            ...(finish !== null ? { stop_reason: result.stopReason } : {}),
            ...(options.returnTokenIds ? { token_ids: ids.slice(from, to) } : {}),
          },
        ],
      },
      tokensThrough: to,
    });
  };

  // Role chunk: no tokens yet; vLLM sends the prompt ids here.
  chunks.push({
    chunk: {
      ...base,
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }],
      ...(options.returnTokenIds ? { prompt_token_ids: [...result.promptTokenIds] } : {}),
    },
    tokensThrough: 0,
  });

  let i = pushTextChunks(result, ends, bodyCount, push);

  // Tool calls: the tokens of each block (and the separator before it) go with that call's chunk.
  const close = tokenizer.tokenId('</tool_call>');
  const calls = wireToolCalls(result);
  for (let c = 0; c < calls.length; c++) {
    const start = i;
    if (c === calls.length - 1) i = bodyCount;
    else while (i < bodyCount && ids[i++] !== close);
    push({ tool_calls: [{ index: c, ...calls[c]! }] }, start, i);
  }

  push({}, i, ids.length, finishReasonOf(result));
  if (options.includeUsage)
    chunks.push({ chunk: { ...base, choices: [], usage: { ...result.usage } }, tokensThrough: ids.length });
  return chunks;
}

/** A chunk's delta over the token ids [from, to), finishing the choice where `finish` is set. */
type PushChunk = (
  delta: ChunkDelta,
  from: number,
  to: number,
  finish?: ChatCompletionChunk['choices'][0]['finish_reason'],
) => void;

/**
 * The chunks of the reasoning and the content, each token's text once its bytes are stable;
 * returns the index of the first token after them (the tool calls').
 */
function pushTextChunks(result: SimResult, ends: number[], bodyCount: number, push: PushChunk): number {
  const text = result.text;
  // Character regions of the text: reasoning, content, tool calls.
  let contentStart = 0;
  if (result.reasoning !== undefined) {
    const thinkClose = result.markers?.thinkClose ?? '</think>';
    const close = text.indexOf(thinkClose);
    contentStart = close === -1 ? text.length : close + thinkClose.length;
    while (text[contentStart] === '\n') contentStart++;
  }
  const content = result.content ?? '';
  const firstCall =
    result.toolCalls.length > 0
      ? text.indexOf(result.markers?.toolCallOpen ?? '<tool_call>', contentStart)
      : -1;
  const contentEnd = firstCall === -1 ? text.length : firstCall;

  let i = 0;
  if (result.reasoning !== undefined) {
    const start = i;
    while (i < bodyCount && ends[i]! <= contentStart) i++;
    push({ reasoning_content: result.reasoning }, start, i);
  }
  let emitted = 0;
  while (
    i < bodyCount &&
    (firstCall === -1 || ends[i]! <= contentEnd || (i > 0 && ends[i - 1]! < contentEnd))
  ) {
    const visible = Math.min(Math.max(ends[i]! - contentStart, 0), content.length);
    const delta = visible > emitted ? content.slice(emitted, visible) : '';
    emitted = Math.max(emitted, visible);
    push({ content: delta }, i, i + 1);
    i++;
  }
  if (emitted < content.length) push({ content: content.slice(emitted) }, i, i);

  return i;
}

/*
 * `/v1/completions` (the legacy text API), as vLLM serves it: `text_completion` objects whose choice
 * carries `prompt_token_ids` and `token_ids` (when `return_token_ids`), and the legacy logprobs lists.
 */

/** The legacy completions logprobs: parallel lists, one entry per token. */
export interface CompletionLogprobs {
  /** Where each token starts in the text, in code points (Python's `len`), as vLLM counts. */
  text_offset: number[];
  token_logprobs: number[];
  tokens: string[];
  /** Per token, decoded alternative -> logprob; the chosen token first. */
  top_logprobs: Record<string, number>[];
}

export interface TextCompletion {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: {
    index: 0;
    text: string;
    logprobs: CompletionLogprobs | null;
    finish_reason: 'stop' | 'length' | 'abort';
    stop_reason: string | null;
    prompt_logprobs: null;
    prompt_token_ids: number[] | null;
    token_ids: number[] | null;
  }[];
  service_tier: null;
  system_fingerprint: null;
  usage: SimUsage;
  kv_transfer_params: null;
}

export interface TextCompletionChunk {
  id: string;
  object: 'text_completion';
  created: number;
  model: string;
  choices: {
    index: 0;
    text: string;
    logprobs: CompletionLogprobs | null;
    finish_reason: 'stop' | 'length' | 'abort' | null;
    stop_reason: string | null;
    /** The prompt's ids in the first chunk (when `return_token_ids`), null after. */
    prompt_token_ids: number[] | null;
    /** The ids this chunk covers (when `return_token_ids`). */
    token_ids: number[] | null;
  }[];
  /** null in every chunk but the usage chunk, which has no choices. */
  usage: SimUsage | null;
}

/** Python's `len`: code points, not UTF-16 units. */
function codePoints(s: string): number {
  let n = 0;
  for (const _ of s) n++;
  return n;
}

/** vLLM's `_create_completion_logprobs` for tokens [from, to), offsets counted from `offset`. */
function completionLogprobs(
  tokenizer: ChatTokenizer,
  result: SimTextResult,
  from: number,
  to: number,
  offset: number,
): CompletionLogprobs {
  const out: CompletionLogprobs = { text_offset: [], token_logprobs: [], tokens: [], top_logprobs: [] };
  for (let i = from; i < to; i++) {
    const token = tokenizer.decode([result.tokenIds[i]!]);
    out.tokens.push(token);
    out.token_logprobs.push(result.logprobs[i]!);
    // fromEntries keeps every key (even "__proto__") as data; JavaScript puts integer-like keys first.
    out.top_logprobs.push(
      Object.fromEntries(
        (result.topLogprobs?.[i] ?? []).map((t) => [tokenizer.decode([t.tokenId]), t.logprob]),
      ),
    );
    out.text_offset.push(offset);
    offset += codePoints(token);
  }
  return out;
}

/** The non-streaming `text_completion` body vLLM returns for this result. */
export function toTextCompletion(
  result: SimTextResult,
  meta: ResponseMeta,
  tokenizer: ChatTokenizer,
): TextCompletion {
  const { options } = result;
  return {
    id: meta.id,
    object: 'text_completion',
    created: meta.created,
    model: meta.model,
    choices: [
      {
        index: 0,
        text: result.text,
        logprobs:
          options.logprobs === null
            ? null
            : completionLogprobs(tokenizer, result, 0, result.tokenIds.length, 0),
        finish_reason: result.finishReason,
        stop_reason: result.stopReason,
        prompt_logprobs: null,
        prompt_token_ids: options.returnTokenIds ? [...result.promptTokenIds] : null,
        token_ids: options.returnTokenIds ? [...result.tokenIds] : null,
      },
    ],
    service_tier: null,
    system_fingerprint: null,
    usage: { ...result.usage },
    kv_transfer_params: null,
  };
}

/**
 * The streamed `text_completion` chunks vLLM would send: one per token (text held back while a
 * multi-byte character is incomplete), the first with `prompt_token_ids`, the last (the EOS one when
 * the text ended) with the finish reason, then a usage chunk when `stream_options.include_usage`. There
 * is no role chunk. Concatenating `text` gives the non-streaming text, `token_ids` its ids; logprob
 * offsets count from the text already sent, as vLLM's do.
 */
export function toTextCompletionChunks(
  result: SimTextResult,
  meta: ResponseMeta,
  tokenizer: ChatTokenizer,
): TimedChunk<TextCompletionChunk>[] {
  const { options } = result;
  const base = {
    id: meta.id,
    object: 'text_completion' as const,
    created: meta.created,
    model: meta.model,
  };
  const ids = result.tokenIds;
  const text = result.text;
  const eos = result.endTokenId ?? tokenizer.tokenId('<|im_end|>');
  const endsWithEos = ids.length > 0 && ids[ids.length - 1] === eos && result.finishReason === 'stop';
  const bodyCount = endsWithEos ? ids.length - 1 : ids.length;
  const ends = stablePrefixLengths(tokenizer, ids.slice(0, bodyCount));

  const chunks: TimedChunk<TextCompletionChunk>[] = [];
  let emitted = 0;
  const count = Math.max(ids.length, 1); // a text stopped before its first token still gets a chunk
  for (let i = 0; i < count; i++) {
    const last = i === count - 1;
    const to = Math.min(i + 1, ids.length);
    const visible = last ? text.length : i < bodyCount ? Math.min(ends[i]!, text.length) : emitted;
    const delta = visible > emitted ? text.slice(emitted, visible) : '';
    const offset = codePoints(text.slice(0, emitted));
    emitted = Math.max(emitted, visible);
    chunks.push({
      chunk: {
        ...base,
        choices: [
          {
            index: 0,
            text: delta,
            logprobs: options.logprobs === null ? null : completionLogprobs(tokenizer, result, i, to, offset),
            finish_reason: last ? result.finishReason : null,
            stop_reason: last ? result.stopReason : null,
            prompt_token_ids: i === 0 && options.returnTokenIds ? [...result.promptTokenIds] : null,
            token_ids: options.returnTokenIds ? ids.slice(i, to) : null,
          },
        ],
        usage: null,
      },
      tokensThrough: to,
    });
  }
  if (options.includeUsage) {
    chunks.push({ chunk: { ...base, choices: [], usage: { ...result.usage } }, tokensThrough: ids.length });
  }
  return chunks;
}
