import { ValidationError } from '../../domain/errors.js';
import {
  type ChatMessageInput,
  type ChatTokenizer,
  type ChatToolInput,
  loadQwen3Tokenizer,
  parseToolCalls,
  renderChat,
  renderCompletion,
  type ToolCall,
} from '../../text/index.js';
import { hashSeed, randomInt, seededRandom } from '../../util/random.js';
import { assistantTurns, type Policy, type PolicyOutput } from './policies.js';

/*
 * Wire-format decisions (vLLM OpenAI-compatible server, checked against vLLM's protocol models):
 * - vLLM returns ids when the request sets `return_token_ids`: `prompt_token_ids` at the top level of
 *   the response (and of the first streamed chunk), `token_ids` in each choice (and in each streamed
 *   chunk's choice, covering the tokens that chunk carries). The sim returns them unless the request
 *   says `return_token_ids: false`: capturing ids is what it exists for.
 * - `token_ids` include the final `<|im_end|>` (vLLM keeps the EOS id in the output ids and counts it
 *   in `completion_tokens`); the text does not. Logprobs cover every id, EOS included.
 * - A stop string ends the text before it; the stop string and EOS are then not in the ids.
 * - Streaming: one chunk per content token; each tool call arrives whole in one chunk (id, name and
 *   full arguments), carrying the ids of its `<tool_call>` block. OpenAI clients accumulate either way.
 * - Fields vLLM always serialises as null (`system_fingerprint`, `stop_reason`, ...) are written too.
 */

/** The subset of an OpenAI chat.completions body the sim reads; extra fields are ignored. */
export interface SimChatRequest {
  model?: string;
  messages: readonly ChatMessageInput[];
  tools?: readonly ChatToolInput[] | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  seed?: number | null;
  logprobs?: boolean | null;
  top_logprobs?: number | null;
  stop?: string | readonly string[] | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  return_token_ids?: boolean | null;
  chat_template_kwargs?: { enable_thinking?: boolean } | null;
}

export interface TopLogprob {
  tokenId: number;
  logprob: number;
}

export interface SimUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/** A completion, independent of wire format. */
export interface SimResult {
  promptTokenIds: number[];
  tokenIds: number[];
  /** One per id in `tokenIds`: negative, finite, deterministic for the seed. */
  logprobs: number[];
  /** Alternatives per token (the chosen one first) when the request asked for `top_logprobs`. */
  topLogprobs?: TopLogprob[][];
  /** Completion text without `<|im_end|>`: `decode(tokenIds)` minus the EOS. */
  text: string;
  /** Parsed from `text` as the hermes/Qwen3 parser does; `content` is what is left. */
  content: string | null;
  reasoning?: string;
  toolCalls: ToolCall[];
  finishReason: 'stop' | 'length';
  /** The stop string that ended the text, if one did. */
  stopReason: string | null;
  usage: SimUsage;
  seed: number;
  /** What the request asked for that shapes the wire format. */
  options: { logprobs: boolean; topLogprobs: number; includeUsage: boolean; returnTokenIds: boolean };
}

export interface SimEngineOptions {
  policy: Policy;
  tokenizer?: ChatTokenizer;
  /** Requests without a seed get one derived from this and a request counter (default 0). */
  seed?: number;
  /** Upper bound of a completion when the request sets none (default 4096). */
  defaultMaxTokens?: number;
}

const MAX_TOP_LOGPROBS = 20;

function positiveInt(value: number | null | undefined, field: string): number | undefined {
  if (value == null) return undefined;
  if (!Number.isInteger(value) || value < 1) throw new ValidationError('must be a positive integer', field);
  return value;
}

/** Logprob of the sampled token: mostly near 0, sometimes well below, never 0 or -Infinity. */
function sampledLogprob(seed: number, index: number, tokenId: number): number {
  const r = seededRandom('logprob', seed, index, tokenId)();
  return -(1e-4 + 6 * r ** 3);
}

/** The simulated engine: a policy decides what to say; the Qwen3 tokenizer makes it ids. */
export class SimEngine {
  readonly tokenizer: ChatTokenizer;
  private readonly policy: Policy;
  private readonly seed: number;
  private readonly defaultMaxTokens: number;
  private requests = 0;

  constructor(options: SimEngineOptions) {
    this.policy = options.policy;
    this.tokenizer = options.tokenizer ?? loadQwen3Tokenizer();
    this.seed = options.seed ?? 0;
    this.defaultMaxTokens = options.defaultMaxTokens ?? 4096;
  }

  /** The Qwen3 prompt for a request: what `prompt_token_ids` encode. */
  renderPrompt(request: SimChatRequest): string {
    const enableThinking = request.chat_template_kwargs?.enable_thinking;
    return renderChat(
      {
        messages: request.messages,
        tools: request.tools ?? null,
        addGenerationPrompt: true,
        ...(enableThinking !== undefined ? { enableThinking } : {}),
      },
      this.tokenizer,
    );
  }

  complete(request: SimChatRequest): SimResult {
    const tok = this.tokenizer;
    const maxTokens =
      positiveInt(request.max_completion_tokens, 'max_completion_tokens') ??
      positiveInt(request.max_tokens, 'max_tokens') ??
      this.defaultMaxTokens;
    const topLogprobs = request.top_logprobs ?? 0;
    if (!Number.isInteger(topLogprobs) || topLogprobs < 0 || topLogprobs > MAX_TOP_LOGPROBS) {
      throw new ValidationError(`must be an integer from 0 to ${MAX_TOP_LOGPROBS}`, 'top_logprobs');
    }
    if (request.seed != null && !Number.isInteger(request.seed)) {
      throw new ValidationError('must be an integer', 'seed');
    }
    const stops =
      request.stop == null ? [] : typeof request.stop === 'string' ? [request.stop] : request.stop;
    const seed = request.seed ?? hashSeed('request', this.seed, this.requests);
    this.requests++;

    const promptTokenIds = tok.encode(this.renderPrompt(request), { addSpecialTokens: false });

    const output: PolicyOutput = this.policy({
      messages: request.messages,
      tools: request.tools ?? [],
      seed,
      turn: assistantTurns(request.messages),
      random: seededRandom('policy', seed),
    });
    const raw = renderCompletion({
      content: output.text ?? null,
      ...(output.reasoning !== undefined ? { reasoning: output.reasoning } : {}),
      toolCalls: (output.toolCalls ?? []).map((c) => ({
        function: { name: c.name, arguments: JSON.stringify(c.arguments) },
      })),
    });

    const eos = tok.tokenId('<|im_end|>');
    if (eos === undefined) throw new Error('tokenizer has no <|im_end|> token');
    // Round-trip through the tokenizer so text and ids agree exactly (it NFC-normalises).
    let text = tok.decode(tok.encode(raw, { addSpecialTokens: false }));
    let stopReason: string | null = null;
    let cut = -1;
    for (const s of stops) {
      if (s === '') continue;
      const at = text.indexOf(s);
      if (at !== -1 && (cut === -1 || at < cut)) {
        cut = at;
        stopReason = s;
      }
    }
    let tokenIds = tok.encode(cut === -1 ? text : text.slice(0, cut), { addSpecialTokens: false });
    if (cut === -1) tokenIds.push(eos);
    let finishReason: 'stop' | 'length' = 'stop';
    if (tokenIds.length > maxTokens) {
      tokenIds = tokenIds.slice(0, maxTokens);
      finishReason = 'length';
      stopReason = null;
    }
    const ended = finishReason === 'stop' && cut === -1;
    text = tok.decode(ended ? tokenIds.slice(0, -1) : tokenIds);

    const ids = seededRandom('tool-call-ids', seed);
    const parsed = parseToolCalls(text, {
      newToolCallId: () =>
        `call_${Math.floor(ids() * 2 ** 32)
          .toString(16)
          .padStart(8, '0')}${Math.floor(ids() * 2 ** 32)
          .toString(16)
          .padStart(8, '0')}`,
    });

    const logprobs = tokenIds.map((id, i) => sampledLogprob(seed, i, id));
    const result: SimResult = {
      promptTokenIds,
      tokenIds,
      logprobs,
      text,
      content: parsed.content,
      ...(parsed.reasoning !== undefined ? { reasoning: parsed.reasoning } : {}),
      toolCalls: parsed.toolCalls,
      finishReason,
      stopReason,
      usage: {
        prompt_tokens: promptTokenIds.length,
        completion_tokens: tokenIds.length,
        total_tokens: promptTokenIds.length + tokenIds.length,
      },
      seed,
      options: {
        logprobs: request.logprobs === true,
        topLogprobs,
        includeUsage: request.stream_options?.include_usage === true,
        returnTokenIds: request.return_token_ids !== false,
      },
    };
    if (topLogprobs > 0) {
      result.topLogprobs = tokenIds.map((id, i) => alternatives(seed, i, id, logprobs[i]!, topLogprobs));
    }
    return result;
  }
}

const VOCAB_SIZE = 151_643; // Qwen3's ordinary (non-added) tokens

/** The chosen token first, then lower-probability alternatives drawn from the ordinary vocabulary. */
function alternatives(
  seed: number,
  index: number,
  tokenId: number,
  logprob: number,
  n: number,
): TopLogprob[] {
  const r = seededRandom('top-logprobs', seed, index);
  const out: TopLogprob[] = [{ tokenId, logprob }];
  let lp = logprob;
  while (out.length < n) {
    const id = randomInt(r, VOCAB_SIZE);
    if (out.some((t) => t.tokenId === id)) continue;
    lp -= 0.5 + 3 * r();
    out.push({ tokenId: id, logprob: lp });
  }
  return out;
}
