import { z } from 'zod';
import { fromZodError } from '../domain/errors.js';
import { packIdFields } from '../util/typed-json.js';

// What an engine produced for one call, from its OpenAI-compatible answer (whole or streamed): exact ids
// and logprobs where vLLM or the sim send them, else rebuilt (retokenize.ts). docs/gateway.md#capture

export interface CapturedToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** One generation as the gateway records it. */
export interface Captured {
  promptIds: number[] | null;
  /** The engine's output ids; null when the engine sent none (not even for some chunks). */
  responseIds: number[] | null;
  /** One per response id, when the engine sent them for every token. */
  logprobs: number[] | null;
  content: string;
  reasoning: string | null;
  toolCalls: CapturedToolCall[];
  finishReason: string | null;
  usage: { prompt_tokens?: number; completion_tokens?: number } | null;
  model: string | null;
  /** The answer's `id` (`chatcmpl-...`), as the engine named it. */
  id?: string;
  /**
   * The weights version of each run of response ids, as the engine reported them
   * (`weight_version_spans`: the sim, the reference engine, and the gateway's own splice of a
   * partial rollout), null for ids that came without (the call's own version); null when they were
   * malformed. A version is as the engine names it.
   */
  versionSpans: EngineVersionSpan[] | null;
  /**
   * The engine sent ids, but fewer than it generated (its usage says more): vLLM's streaming tool
   * parser drops the chunks of the tokens it holds back (vLLM issue 27482), so the ids are unusable.
   */
  idsIncomplete: boolean;
  /**
   * The first field that broke the answer's format (ids that are not token ids), named by its path
   * in the answer or chunk; absent when none did. The ids are then null: nothing of them is kept.
   */
  malformed?: string;
}

type Json = Record<string, unknown>;

/** `[weights version, count]` as an engine reports it (a version it was never given is null). */
export type EngineVersionSpan = [version: number | string | null, count: number];

function isSpan(v: unknown): v is EngineVersionSpan {
  return (
    Array.isArray(v) &&
    v.length === 2 &&
    (v[0] === null || typeof v[0] === 'number' || (typeof v[0] === 'string' && v[0].length <= 64)) &&
    Number.isSafeInteger(v[1]) &&
    (v[1] as number) > 0
  );
}

/** The id arrays of a completion: the prompt's echo (top level or per choice) and each choice's output. */
const ANSWER_ID_FIELDS = ['prompt_token_ids', 'token_ids'] as const;

/**
 * A parsed answer's id arrays that hold only token ids, as Uint32Arrays (to move between threads:
 * http/offload-worker.ts); returns their buffers. CompletionCapture takes them as checked ids.
 */
export function packAnswerIds(answer: unknown): ArrayBuffer[] {
  const buffers: ArrayBuffer[] = [];
  packIdFields(answer, ANSWER_ID_FIELDS, buffers);
  const choices = isObject(answer) ? answer.choices : undefined;
  if (Array.isArray(choices)) for (const choice of choices) packIdFields(choice, ANSWER_ID_FIELDS, buffers);
  return buffers;
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

/** Ids as an engine sends them; an absent or non-array field is no ids (a plain API sends none). */
const TokenIds = z.array(z.number().int().min(0));

/** The counts the gateway reads; other fields pass as they come, a count that is no number is absent. */
const Usage = z.looseObject({
  prompt_tokens: z.number().optional().catch(undefined),
  completion_tokens: z.number().optional().catch(undefined),
});

/** Accumulates an answer; feed it whole (`addCompletion`) or chunk by chunk (`addChunk`). */
export class CompletionCapture {
  private promptIds: number[] | null = null;
  private responseIds: number[] = [];
  private idsMissing = false;
  private logprobs: number[] = [];
  private logprobsMissing = false;
  private content = '';
  private reasoning = '';
  private readonly calls = new Map<number, CapturedToolCall>();
  private finishReason: string | null = null;
  private usage: Captured['usage'] = null;
  private model: string | null = null;
  private id: string | null = null;
  private malformed: string | null = null;
  private spans: EngineVersionSpan[] = [];
  private spansMissing = false;
  /** Time of the first chunk that carried generated tokens (for time to first token). */
  firstTokenAt: number | null = null;

  constructor(private readonly clock: () => number = () => performance.now()) {}

  /** A whole chat.completion or text_completion answer. */
  addCompletion(answer: unknown): void {
    if (!isObject(answer)) return;
    this.readEnvelope(answer);
    const choice = Array.isArray(answer.choices) ? answer.choices[0] : undefined;
    if (!isObject(choice)) return;
    this.readChoiceIds(choice, 'choices.0.');
    const message = isObject(choice.message) ? choice.message : null;
    if (message) {
      if (typeof message.content === 'string') this.content += message.content;
      const reasoning = message.reasoning_content ?? message.reasoning;
      if (typeof reasoning === 'string') this.reasoning += reasoning;
      if (Array.isArray(message.tool_calls)) {
        for (const [i, c] of message.tool_calls.entries()) this.mergeCall(c, i);
      }
    } else if (typeof choice.text === 'string') {
      this.content += choice.text;
    }
    if (typeof choice.finish_reason === 'string') this.finishReason = choice.finish_reason;
  }

  /** One streamed chunk (`chat.completion.chunk` or a streamed `text_completion`), arrived `at`. */
  addChunk(chunk: unknown, at?: number): void {
    if (!isObject(chunk)) return;
    this.readEnvelope(chunk);
    const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : undefined;
    if (!isObject(choice)) return;
    const before = this.responseIds.length + this.content.length + this.calls.size;
    this.readChoiceIds(choice, 'choices.0.');
    const delta = isObject(choice.delta) ? choice.delta : null;
    if (delta) {
      if (typeof delta.content === 'string') this.content += delta.content;
      const reasoning = delta.reasoning_content ?? delta.reasoning;
      if (typeof reasoning === 'string') this.reasoning += reasoning;
      if (Array.isArray(delta.tool_calls)) {
        for (const [i, c] of delta.tool_calls.entries()) {
          this.mergeCall(c, isObject(c) && typeof c.index === 'number' ? c.index : i);
        }
      }
    } else if (typeof choice.text === 'string') {
      this.content += choice.text;
    }
    if (typeof choice.finish_reason === 'string') this.finishReason = choice.finish_reason;
    const after = this.responseIds.length + this.content.length + this.calls.size;
    if (this.firstTokenAt === null && after > before) this.firstTokenAt = at ?? this.clock();
  }

  private readEnvelope(o: Json): void {
    if (typeof o.model === 'string') this.model ??= o.model;
    // Bounded: it goes on a span as it came.
    if (typeof o.id === 'string' && o.id.length <= 256) this.id ??= o.id;
    const prompt = this.ids(o.prompt_token_ids, 'prompt_token_ids');
    if (prompt) this.promptIds ??= prompt;
    if (isObject(o.usage)) this.usage = Usage.parse(o.usage);
  }

  /** The ids of one field; null when absent, and when malformed (noted, and no ids are kept). */
  private ids(value: unknown, field: string): number[] | null {
    // Packed off the event loop (packAnswerIds) only when every item was a token id.
    if (value instanceof Uint32Array) return value as unknown as number[];
    if (!Array.isArray(value)) return null;
    // A loop over a 262,144-id prompt costs the event loop ~1 ms where zod's walk cost ~30; zod runs
    // only to name what broke.
    if (value.every((id) => Number.isSafeInteger(id) && id >= 0)) return value as number[];
    const parsed = TokenIds.safeParse(value);
    if (parsed.success) return parsed.data;
    this.malformed ??= fromZodError(parsed.error, field).message;
    this.idsMissing = true;
    return null;
  }

  private readChoiceIds(choice: Json, at: string): void {
    const prompt = this.ids(choice.prompt_token_ids, `${at}prompt_token_ids`);
    if (prompt) this.promptIds ??= prompt;
    const out = this.ids(choice.token_ids, `${at}token_ids`);
    const logprobs = isObject(choice.logprobs) ? choice.logprobs : null;
    // A chunk that only closes the stream (finish reason, usage) carries no tokens.
    const carriesTokens =
      out !== null ||
      (isObject(choice.delta) && (choice.delta.content || choice.delta.tool_calls)) ||
      (typeof choice.text === 'string' && choice.text !== '');
    if (out) for (const id of out) this.responseIds.push(id);
    else if (carriesTokens) this.idsMissing = true;
    if (out && out.length > 0) this.readSpans(choice.weight_version_spans, out.length);
    let count = 0;
    if (logprobs && Array.isArray(logprobs.content)) {
      for (const entry of logprobs.content) {
        if (isObject(entry) && typeof entry.logprob === 'number') this.logprobs.push(entry.logprob);
        else this.logprobsMissing = true;
        count++;
      }
    } else if (logprobs && Array.isArray(logprobs.token_logprobs)) {
      for (const lp of logprobs.token_logprobs) {
        if (typeof lp === 'number') this.logprobs.push(lp);
        else this.logprobsMissing = true;
        count++;
      }
    }
    if (out && count !== out.length) this.logprobsMissing = true;
  }

  /**
   * The spans of `count` ids just read. Ids without any are the call's own version's (null); spans
   * that are malformed or do not cover them leave the answer's spans unknown.
   */
  private readSpans(value: unknown, count: number): void {
    if (value === undefined || value === null) value = [[null, count]];
    if (!Array.isArray(value) || !value.every(isSpan)) {
      this.spansMissing = true;
      return;
    }
    let covered = 0;
    for (const [version, n] of value) {
      covered += n;
      const last = this.spans[this.spans.length - 1];
      if (last && last[0] === version) last[1] += n;
      else this.spans.push([version, n]);
    }
    if (covered !== count) this.spansMissing = true;
  }

  private mergeCall(raw: unknown, index: number): void {
    if (!isObject(raw)) return;
    const fn = isObject(raw.function) ? raw.function : {};
    const call = this.calls.get(index) ?? {
      id: '',
      type: 'function' as const,
      function: { name: '', arguments: '' },
    };
    if (typeof raw.id === 'string' && raw.id) call.id = raw.id;
    if (typeof fn.name === 'string') call.function.name += fn.name;
    if (typeof fn.arguments === 'string') call.function.arguments += fn.arguments;
    this.calls.set(index, call);
  }

  /** Whether anything was generated yet (for recording an aborted call). */
  get generated(): boolean {
    return this.responseIds.length > 0 || this.content !== '' || this.calls.size > 0;
  }

  result(): Captured {
    const generated = this.usage?.completion_tokens;
    const idsIncomplete =
      !this.idsMissing &&
      this.responseIds.length > 0 &&
      typeof generated === 'number' &&
      generated !== this.responseIds.length;
    const responseIds =
      this.idsMissing || idsIncomplete || this.responseIds.length === 0 ? null : this.responseIds;
    const captured: Captured = {
      promptIds: this.promptIds,
      responseIds,
      logprobs:
        responseIds && !this.logprobsMissing && this.logprobs.length === responseIds.length
          ? this.logprobs
          : null,
      content: this.content,
      reasoning: this.reasoning === '' ? null : this.reasoning,
      toolCalls: [...this.calls.entries()].sort((a, b) => a[0] - b[0]).map(([, c]) => c),
      finishReason: this.finishReason,
      usage: this.usage,
      model: this.model,
      ...(this.id !== null ? { id: this.id } : {}),
      idsIncomplete,
      versionSpans: responseIds && !this.spansMissing && this.spans.length > 0 ? this.spans : null,
    };
    if (this.malformed === null) return captured;
    return { ...captured, promptIds: null, malformed: this.malformed };
  }
}
