import { ValidationError } from '../../domain/errors.js';
import type { CompletionParts } from '../../text/adapter-text.js';
import {
  type ChatMessageInput,
  type ChatTokenizer,
  type ChatToolInput,
  loadQwen3Tokenizer,
  newToolCallId,
  type ParsedCompletion,
  parseToolCalls,
  renderChat,
  renderCompletion,
  type ToolCall,
} from '../../text/index.js';
import type { ModelAdapter } from '../../text/model-adapter.js';
import { hashSeed, randomInt, seededRandom } from '../../util/random.js';
import {
  type ResponseFormatInput,
  resolveResponseFormat,
  resolveToolChoice,
  type SimToolChoice,
  structuredAnswer,
  type ToolChoiceInput,
} from './controls.js';
import {
  assistantTurns,
  assistantTurnsInPrompt,
  type PastToolCall,
  type Policy,
  type PolicyOutput,
} from './policies.js';
import { turnOpeners, turnsAfter } from './turns.js';

// The wire format follows vLLM's OpenAI-compatible server (checked against its protocol models): ids, EOS,
// stop strings, streamed chunks, null fields: docs/engines.md#the-built-in-sim

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
  /** vLLM's chat-template switches: a new assistant turn (default), or the last message continued. */
  add_generation_prompt?: boolean | null;
  continue_final_message?: boolean | null;
  tool_choice?: ToolChoiceInput | null;
  response_format?: ResponseFormatInput | null;
}

/** The subset of an OpenAI (legacy) completions body the sim reads: one prompt, text or token ids. */
export interface SimCompletionRequest {
  model?: string;
  /** Used as given: a string is tokenized without a template, ids are taken as they are. */
  prompt: string | readonly number[];
  /** Absent means 16 (vLLM's and OpenAI's default for this API); null means the engine's default. */
  max_tokens?: number | null;
  seed?: number | null;
  /** The number of alternatives per token (0 to 20): the legacy API's integer `logprobs`. */
  logprobs?: number | null;
  stop?: string | readonly string[] | null;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean | null } | null;
  return_token_ids?: boolean | null;
  response_format?: ResponseFormatInput | null;
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

/** What both endpoints generate, independent of wire format. */
export interface SimGeneration {
  promptTokenIds: number[];
  tokenIds: number[];
  /** One per id in `tokenIds`: negative, finite, deterministic for the seed. */
  logprobs: number[];
  /** Alternatives per token (the chosen one first) when the request asked for them. */
  topLogprobs?: TopLogprob[][];
  /** Completion text without `<|im_end|>`: `decode(tokenIds)` minus the EOS. */
  text: string;
  /** `abort`: a pause or an abort ended it early, with the tokens ready by then (pause.ts). */
  finishReason: 'stop' | 'length' | 'abort';
  /** The stop string that ended the text, if one did. */
  stopReason: string | null;
  /** The end-of-turn token a completion stops on (the family's; `<|im_end|>` when absent). */
  endTokenId?: number;
  usage: SimUsage;
  seed: number;
}

/** A chat completion, independent of wire format. */
export interface SimResult extends SimGeneration {
  /** Parsed from `text` as the hermes/Qwen3 parser does; `content` is what is left. */
  content: string | null;
  reasoning?: string;
  toolCalls: ToolCall[];
  /** Where a reasoning block ends and a tool call starts in `text`, in this family's format. */
  markers?: { thinkClose: string; toolCallOpen: string };
  /** What the request asked for that shapes the wire format. */
  options: { logprobs: boolean; topLogprobs: number; includeUsage: boolean; returnTokenIds: boolean };
}

/** A text completion (`/v1/completions`), independent of wire format. */
export interface SimTextResult extends SimGeneration {
  /** `logprobs`: null when not asked for, else the number of alternatives per token. */
  options: { logprobs: number | null; includeUsage: boolean; returnTokenIds: boolean };
}

export interface SimEngineOptions {
  policy: Policy;
  tokenizer?: ChatTokenizer;
  /**
   * The model family the sim speaks (a model folder's adapter): its template renders prompts, its
   * format writes completions, its parser splits them. Without one, Qwen3 over `tokenizer`.
   */
  adapter?: ModelAdapter;
  /** Requests without a seed get one derived from this and a request counter (default 0). */
  seed?: number;
  /** Upper bound of a completion when the request sets none (default 4096). */
  defaultMaxTokens?: number;
}

const MAX_TOP_LOGPROBS = 20;
/** vLLM's (and OpenAI's) `max_tokens` default for `/v1/completions`. */
export const COMPLETIONS_DEFAULT_MAX_TOKENS = 16;
/** The context length the sim reports in `/v1/models`, as vLLM does: Qwen3's 40960 positions. */
export const SIM_MAX_MODEL_LEN = 40_960;

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

/** What `generate` makes of a policy's raw text: the part both endpoints share. */
interface Generated {
  tokenIds: number[];
  endTokenId: number;
  text: string;
  logprobs: number[];
  finishReason: 'stop' | 'length';
  stopReason: string | null;
}

/** The simulated engine: a policy decides what to say; the Qwen3 tokenizer makes it ids. */
export class SimEngine {
  readonly tokenizer: ChatTokenizer;
  private readonly adapter: ModelAdapter | null;
  private readonly policy: Policy;
  private readonly seed: number;
  private readonly defaultMaxTokens: number;
  private requests = 0;
  private maxTokenId: number | undefined;

  constructor(options: SimEngineOptions) {
    this.policy = options.policy;
    this.adapter = options.adapter ?? null;
    this.tokenizer = options.adapter?.tokenizer ?? options.tokenizer ?? loadQwen3Tokenizer();
    this.seed = options.seed ?? 0;
    this.defaultMaxTokens = options.defaultMaxTokens ?? 4096;
  }

  /** The Qwen3 prompt for a request: what `prompt_token_ids` encode. */
  renderPrompt(request: SimChatRequest): string {
    const enableThinking = request.chat_template_kwargs?.enable_thinking;
    const input = {
      messages: request.messages,
      tools: request.tools ?? null,
      // vLLM's defaults: open a new assistant turn unless the last message is to be continued.
      addGenerationPrompt: request.add_generation_prompt ?? true,
      continueFinalMessage: request.continue_final_message ?? false,
      ...(enableThinking !== undefined ? { enableThinking } : {}),
    };
    return this.adapter ? this.adapter.render(input) : renderChat(input, this.tokenizer);
  }

  /** The texts an assistant turn of this family's template opens with (built on first use). */
  private openers: string[] | undefined;

  /** Where alternatives for top logprobs are drawn from: ordinary tokens of this vocabulary. */
  private get vocabSize(): number {
    return this.adapter ? SHARED_VOCAB_SIZE : VOCAB_SIZE;
  }

  /** The completion text this family writes for a turn, and the token it stops on. */
  private completion(parts: CompletionParts): { text: string; end: string } {
    return this.adapter
      ? this.adapter.completion(parts)
      : { text: renderCompletion(parts), end: '<|im_end|>' };
  }

  /**
   * The ids a model writes into its calls, where its format has them (Mistral's): the family's
   * shape, reproducible from the seed. The parser then makes new ones, as vLLM's does.
   */
  private writtenCallIds(seed: number): () => string {
    const random = seededRandom('written-call-ids', seed);
    return () => (this.adapter ? this.adapter.newToolCallId(random) : '');
  }

  /** A completion split as vLLM's parser of this family does. */
  private parse(text: string, toolChoice: SimToolChoice, seed: number): ParsedCompletion {
    return parseCompletion(
      text,
      toolChoice,
      seed,
      this.adapter ? this.adapter.parse : parseToolCalls,
      this.adapter?.thinking?.close ?? '</think>',
      this.adapter ? this.adapter.newToolCallId : (random) => newToolCallId('openai', random),
    );
  }

  /**
   * The completed assistant turns of a raw prompt and their calls: ChatML's by its markers, another
   * family's by the text its turns open with, a turn running to the first end-of-turn token after it.
   */
  private promptTurns(prompt: string): { turn: number; pastCalls?: PastToolCall[][] } {
    const adapter = this.adapter;
    if (!adapter) return { turn: assistantTurnsInPrompt(prompt) };
    this.openers ??= turnOpeners(adapter);
    if (this.openers.length === 0) return { turn: 0, pastCalls: [] };
    const ends = adapter.endOfTurnTokens;
    const pastCalls: PastToolCall[][] = [];
    // A piece with no end is part of the turn the next piece ends (gpt-oss: analysis, then a call):
    // it is joined to that piece by the marker between them.
    let pending: string | null = null;
    for (const { marker, piece } of turnsAfter(prompt, this.openers)) {
      const text: string = pending === null ? piece : pending + marker + piece;
      const at = Math.min(...ends.map((e) => text.indexOf(e)).filter((i) => i >= 0));
      if (!Number.isFinite(at)) {
        pending = text;
        continue;
      }
      const calls = adapter.parse(text.slice(0, at), { newToolCallId: () => '' }).toolCalls;
      pastCalls.push(
        calls.map((c) => ({ name: c.function.name, arguments: jsonOrText(c.function.arguments) })),
      );
      pending = null;
    }
    return { turn: pastCalls.length, pastCalls };
  }

  complete(request: SimChatRequest): SimResult {
    const maxTokens =
      positiveInt(request.max_completion_tokens, 'max_completion_tokens') ??
      positiveInt(request.max_tokens, 'max_tokens') ??
      this.defaultMaxTokens;
    const topLogprobs = request.top_logprobs ?? 0;
    if (!Number.isInteger(topLogprobs) || topLogprobs < 0 || topLogprobs > MAX_TOP_LOGPROBS) {
      throw new ValidationError(`must be an integer from 0 to ${MAX_TOP_LOGPROBS}`, 'top_logprobs');
    }
    checkSeed(request.seed);
    const toolChoice = resolveToolChoice(request.tool_choice, request.tools);
    const format = resolveResponseFormat(request.response_format);
    const seed = this.nextSeed(request.seed);

    const promptTokenIds = this.tokenizer.encode(this.renderPrompt(request), { addSpecialTokens: false });

    const output: PolicyOutput = this.policy({
      messages: request.messages,
      tools: request.tools ?? [],
      seed,
      seedDerived: request.seed == null,
      turn: assistantTurns(request.messages),
      random: seededRandom('policy', seed),
      toolChoice,
    });
    const gen = this.generate(
      this.completion(completionParts(output, toolChoice, format, this.writtenCallIds(seed))),
      stopList(request.stop),
      maxTokens,
      seed,
    );
    const parsed = this.parse(gen.text, toolChoice, seed);

    const result: SimResult = {
      promptTokenIds,
      ...gen,
      content: parsed.content,
      ...(parsed.reasoning !== undefined ? { reasoning: parsed.reasoning } : {}),
      toolCalls: parsed.toolCalls,
      ...(this.adapter
        ? {
            markers: {
              thinkClose: this.adapter.thinking?.close ?? '</think>',
              toolCallOpen: this.adapter.toolCallOpen ?? '<tool_call>',
            },
          }
        : {}),
      usage: usageOf(promptTokenIds, gen.tokenIds),
      seed,
      options: {
        logprobs: request.logprobs === true,
        topLogprobs,
        includeUsage: request.stream_options?.include_usage === true,
        returnTokenIds: request.return_token_ids !== false,
      },
    };
    if (topLogprobs > 0) {
      result.topLogprobs = gen.tokenIds.map((id, i) =>
        alternatives(seed, i, id, gen.logprobs[i]!, topLogprobs, undefined, this.vocabSize),
      );
    }
    return result;
  }

  /**
   * A `/v1/completions` continuation: the prompt is used as given (a string is tokenized without a
   * template, ids are taken as they are), the policy sees no messages (only `prompt` and, for a
   * rendered ChatML conversation, the number of assistant turns in it) and its output becomes the same
   * Qwen3 text a chat turn would be, not parsed. Ends with `<|im_end|>` in the ids, as chat does.
   */
  completeText(request: SimCompletionRequest): SimTextResult {
    const tok = this.tokenizer;
    const maxTokens =
      request.max_tokens === undefined
        ? COMPLETIONS_DEFAULT_MAX_TOKENS
        : (positiveInt(request.max_tokens, 'max_tokens') ?? this.defaultMaxTokens);
    const logprobs = request.logprobs ?? null;
    if (logprobs !== null && (!Number.isInteger(logprobs) || logprobs < 0 || logprobs > MAX_TOP_LOGPROBS)) {
      throw new ValidationError(`must be an integer from 0 to ${MAX_TOP_LOGPROBS}`, 'logprobs');
    }
    checkSeed(request.seed);
    const format = resolveResponseFormat(request.response_format);
    const promptTokenIds = this.promptTokenIds(request.prompt);
    const seed = this.nextSeed(request.seed);

    const prompt = typeof request.prompt === 'string' ? request.prompt : tok.decode(promptTokenIds);
    const output = this.policy({
      messages: [],
      tools: [],
      prompt,
      seed,
      seedDerived: request.seed == null,
      ...this.promptTurns(prompt),
      random: seededRandom('policy', seed),
    });
    const gen = this.generate(
      this.completion(completionParts(output, 'auto', format, this.writtenCallIds(seed))),
      stopList(request.stop),
      maxTokens,
      seed,
    );
    const result: SimTextResult = {
      promptTokenIds,
      ...gen,
      usage: usageOf(promptTokenIds, gen.tokenIds),
      seed,
      options: {
        logprobs,
        includeUsage: request.stream_options?.include_usage === true,
        returnTokenIds: request.return_token_ids !== false,
      },
    };
    if (logprobs !== null) {
      // The chosen token is the sim's most likely one, so the top N include it: N entries (1 for N=0),
      // distinct as decoded strings because the wire format keys them by their text.
      const seen = (id: number) => tok.decode([id]);
      result.topLogprobs = gen.tokenIds.map((id, i) =>
        alternatives(seed, i, id, gen.logprobs[i]!, Math.max(logprobs, 1), seen, this.vocabSize),
      );
    }
    return result;
  }

  /** Request seed, or one derived from the engine seed and a request counter. */
  private nextSeed(seed: number | null | undefined): number {
    const out = seed ?? hashSeed('request', this.seed, this.requests);
    this.requests++;
    return out;
  }

  private promptTokenIds(prompt: string | readonly number[]): number[] {
    const tok = this.tokenizer;
    if (typeof prompt === 'string') {
      // vLLM's completions default is add_special_tokens=true (Qwen3 defines no BOS, so it adds nothing).
      const ids = tok.encode(prompt, { addSpecialTokens: true });
      if (ids.length === 0) throw new ValidationError('must not be empty', 'prompt');
      return ids;
    }
    if (!Array.isArray(prompt))
      throw new ValidationError('must be a string or an array of token ids', 'prompt');
    if (prompt.length === 0) throw new ValidationError('must not be empty', 'prompt');
    const max = this.lastTokenId();
    prompt.forEach((id, i) => {
      if (!Number.isInteger(id) || id < 0) {
        throw new ValidationError('token ids must be non-negative integers', `prompt.${i}`);
      }
      if (id > max) throw new ValidationError(`token id ${id} is out of vocabulary`, `prompt.${i}`);
    });
    return [...prompt];
  }

  /** The largest id the tokenizer knows (ids are contiguous; an unknown one decodes to ""). */
  private lastTokenId(): number {
    if (this.maxTokenId !== undefined) return this.maxTokenId;
    const known = (id: number) => {
      try {
        return this.tokenizer.decode([id]) !== '';
      } catch {
        return false;
      }
    };
    let lo = 0;
    let hi = 1 << 24;
    while (lo < hi) {
      const mid = Math.ceil((lo + hi) / 2);
      if (known(mid)) lo = mid;
      else hi = mid - 1;
    }
    this.maxTokenId = lo;
    return lo;
  }

  /** Text to ids: round-trip, stop strings, EOS, `max_tokens`, logprobs. Shared by both endpoints. */
  private generate(
    completion: { text: string; end: string },
    stops: readonly string[],
    maxTokens: number,
    seed: number,
  ): Generated {
    const tok = this.tokenizer;
    const raw = completion.text;
    const eos = tok.tokenId(completion.end);
    if (eos === undefined) throw new Error(`tokenizer has no ${completion.end} token`);
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
    const logprobs = tokenIds.map((id, i) => sampledLogprob(seed, i, id));
    return { tokenIds, endTokenId: eos, text, logprobs, finishReason, stopReason };
  }
}

function checkSeed(seed: number | null | undefined): void {
  if (seed != null && !Number.isInteger(seed)) throw new ValidationError('must be an integer', 'seed');
}

function stopList(stop: string | readonly string[] | null | undefined): readonly string[] {
  return stop == null ? [] : typeof stop === 'string' ? [stop] : stop;
}

function usageOf(promptTokenIds: readonly number[], tokenIds: readonly number[]): SimUsage {
  return {
    prompt_tokens: promptTokenIds.length,
    completion_tokens: tokenIds.length,
    total_tokens: promptTokenIds.length + tokenIds.length,
  };
}

/**
 * What the simulated model writes for a policy's output. With tool_choice "none" its tool calls are
 * dropped; with a JSON response_format its answer becomes JSON (`structuredAnswer`), and when it calls
 * tools the calls stand alone (no text), so content is always JSON or null.
 */
function completionParts(
  output: PolicyOutput,
  toolChoice: SimToolChoice,
  format: ReturnType<typeof resolveResponseFormat>,
  callId: () => string,
): CompletionParts {
  const calls = toolChoice === 'none' ? [] : (output.toolCalls ?? []);
  let content = output.text ?? null;
  if (format) content = calls.length > 0 ? null : structuredAnswer(format, output.text ?? '');
  return {
    content,
    ...(output.reasoning !== undefined ? { reasoning: output.reasoning } : {}),
    toolCalls: calls.map((c) => ({
      id: callId(),
      function: { name: c.name, arguments: JSON.stringify(c.arguments) },
    })),
  };
}

function jsonOrText(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/**
 * Splits a chat completion as vLLM's Qwen3 reasoning and hermes tool parsers do. With tool_choice
 * "none" vLLM runs no tool parser, so a `<tool_call>` block the text happens to contain stays content.
 */
function parseCompletion(
  text: string,
  toolChoice: SimToolChoice,
  seed: number,
  parse: ModelAdapter['parse'],
  thinkClose: string,
  callId: ModelAdapter['newToolCallId'],
): ParsedCompletion {
  // Ids in the family's shape (Mistral's 9 alphanumerics), reproducible from the request's seed.
  const ids = seededRandom('tool-call-ids', seed);
  const parsed = parse(text, { newToolCallId: () => callId(ids) });
  if (toolChoice !== 'none' || parsed.toolCalls.length === 0) return parsed;
  let rest = text;
  if (parsed.reasoning !== undefined) {
    const close = text.indexOf(thinkClose);
    rest = close === -1 ? '' : text.slice(close + thinkClose.length).replace(/^\n+/, '');
  }
  const content = rest === '' ? null : rest;
  return parsed.reasoning === undefined
    ? { content, toolCalls: [] }
    : { content, reasoning: parsed.reasoning, toolCalls: [] };
}

const VOCAB_SIZE = 151_643; // Qwen3's ordinary (non-added) tokens
/** Ids every other family's vocabulary holds as ordinary tokens (DeepSeek-V3's and Llama 3's start at 128000). */
const SHARED_VOCAB_SIZE = 100_000;

/**
 * The chosen token first, then lower-probability alternatives drawn from the ordinary vocabulary,
 * distinct by id (or by `key`, when the wire format keys them by text).
 */
function alternatives(
  seed: number,
  index: number,
  tokenId: number,
  logprob: number,
  n: number,
  key: (id: number) => string | number = (id) => id,
  vocabSize = VOCAB_SIZE,
): TopLogprob[] {
  const r = seededRandom('top-logprobs', seed, index);
  const out: TopLogprob[] = [{ tokenId, logprob }];
  const keys = new Set([key(tokenId)]);
  let lp = logprob;
  while (out.length < n) {
    const id = randomInt(r, vocabSize);
    const k = key(id);
    if (keys.has(k)) continue;
    keys.add(k);
    lp -= 0.5 + 3 * r();
    out.push({ tokenId: id, logprob: lp });
  }
  return out;
}
