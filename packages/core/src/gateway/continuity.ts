import { randomBytes } from 'node:crypto';
import type { JsonObject, NewStep } from '../domain/index.js';
import { CompletionCapture } from '../engines/capture.js';
import type { Engine } from '../engines/router.js';
import {
  formatSseEvent,
  type ParsedCompletion,
  parseToolCalls,
  randomToolCallId,
  SSE_DONE,
} from '../text/index.js';
import type { ModelRef } from '../text/model-ref.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import { isObject } from './call-request.js';
import type { RoutedCall } from './capture.js';
import { brokenAnswer, type Forwarding } from './forward.js';
import { openaiError } from './openai-errors.js';
import type { ContinuityBase, FallbackReason, Session } from './session.js';

export type { ContinuityBase, FallbackReason };

/*
 * Token continuity (docs/gateway.md#token-continuity): a chat call whose history is what the
 * gateway sent and got before is sent to the engine as the previous prompt + response ids + the new
 * turns' ids, over `/v1/completions`, so consecutive prompts extend each other exactly; the answer is
 * turned back into a chat completion. Any other call takes the chat path, and says why.
 */

/** Engines that take a token-id prompt on `/v1/completions` and answer its ids. */
const CONTINUITY_ENGINES = new Set(['vllm', 'sim']);

/**
 * Without a model folder the gateway's template is the built-in Qwen3's: only a served model that
 * says so is continued. With one, the folder's adapter renders (and refuses what its template cannot).
 */
export const rendersTemplateOf = (base: Pick<ContinuityBase, 'servedModel' | 'model'>): boolean =>
  base.model !== null || (base.servedModel !== null && /qwen3/i.test(base.servedModel));

/** Whether an engine serves the model a base was produced by (its ids mean the same tokens there). */
export const sameModel = (engine: Pick<Engine, 'model'>, base: Pick<ContinuityBase, 'model'>): boolean =>
  (engine.model ?? null) === null
    ? base.model === null
    : base.model !== null &&
      engine.model!.dir === base.model.dir &&
      engine.model!.family === base.model.family;

/** The base a stored step leaves, or why it leaves none. */
export function baseOfStep(
  step: Pick<
    NewStep,
    | 'promptIds'
    | 'responseIds'
    | 'tokenSource'
    | 'messages'
    | 'tools'
    | 'responseText'
    | 'toolCalls'
    | 'metadata'
  >,
  model: ModelRef | null = null,
): ContinuityBase | FallbackReason {
  if (step.tokenSource !== 'engine') return 'no_exact_ids';
  if (step.messages === null) return 'first_step';
  const served = step.metadata.served_model;
  return {
    messages: step.messages,
    tools: step.tools ?? null,
    templateKwargs: step.metadata.chat_template_kwargs ?? null,
    content: step.responseText ?? '',
    toolCalls: (step.toolCalls ?? []).map((c) => {
      const fn = isObject(c.function) ? c.function : {};
      return {
        name: typeof fn.name === 'string' ? fn.name : '',
        arguments: typeof fn.arguments === 'string' ? fn.arguments : '',
      };
    }),
    promptIds: Array.from(step.promptIds),
    responseIds: Array.from(step.responseIds),
    servedModel: typeof served === 'string' ? served : null,
    model,
  };
}

/** JSON values equal whatever their key order. */
function sameJson(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (Array.isArray(a))
    return Array.isArray(b) && a.length === b.length && a.every((v, i) => sameJson(v, b[i]));
  if (!isObject(a) || !isObject(b)) return false;
  const keys = Object.keys(a).filter((k) => a[k] !== undefined);
  if (keys.length !== Object.keys(b).filter((k) => b[k] !== undefined).length) return false;
  return keys.every((k) => sameJson(a[k], b[k]));
}

/** Arguments equal as JSON values (an agent may re-serialize them), else as text. */
function sameArguments(a: unknown, b: string): boolean {
  if (typeof a !== 'string') return sameJson(a, parsed(b));
  return a === b || sameJson(parsed(a), parsed(b));
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return Symbol('unparsed');
  }
}

/** Whether the agent's copy of the assistant turn is what the gateway answered (ids and reasoning aside). */
function sameAssistantTurn(message: unknown, base: ContinuityBase): boolean {
  if (!isObject(message) || message.role !== 'assistant') return false;
  const content = message.content ?? '';
  if (content !== base.content) return false;
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
  if (calls.length !== base.toolCalls.length) return false;
  return calls.every((c, i) => {
    const fn = isObject(c) && isObject(c.function) ? c.function : null;
    const want = base.toolCalls[i]!;
    return fn !== null && fn.name === want.name && sameArguments(fn.arguments, want.arguments);
  });
}

/** A call the gateway can continue: the base it extends. */
export interface ContinuationPlan {
  base: ContinuityBase;
  enableThinking: boolean | undefined;
}

/**
 * Whether this chat request continues the session's base: the same history, the same tools and
 * template switches, the gateway's answer as the agent's last assistant turn, then new turns only.
 */
export function planContinuation(
  session: Pick<Session, 'prefixHint' | 'rawToolCalls'>,
  base: ContinuityBase | FallbackReason | null,
  request: Record<string, unknown>,
): ContinuationPlan | FallbackReason {
  if (base === null) return 'first_step';
  if (typeof base === 'string') return base;
  // Switches the chat path applies (templates, guided decoding, raw tool-call text) stay with it.
  const topLogprobs = request.top_logprobs;
  if (
    session.prefixHint !== null ||
    session.rawToolCalls ||
    request.continue_final_message === true ||
    request.add_generation_prompt === false ||
    (request.response_format !== undefined && request.response_format !== null) ||
    (request.tool_choice !== undefined && request.tool_choice !== null && request.tool_choice !== 'auto') ||
    (typeof topLogprobs === 'number' && topLogprobs > 0)
  )
    return 'options';
  if (!rendersTemplateOf(base)) return 'template_unknown';
  const messages = request.messages as unknown[];
  const known = base.messages.length;
  if (messages.length <= known + 1) return 'history_rewritten';
  for (let i = 0; i < known; i++) if (!sameJson(messages[i], base.messages[i])) return 'history_rewritten';
  if (!sameAssistantTurn(messages[known], base)) return 'history_rewritten';
  for (let i = known + 1; i < messages.length; i++) {
    const m = messages[i];
    if (!isObject(m) || m.role === 'assistant') return 'history_rewritten';
  }
  const tools = Array.isArray(request.tools) && request.tools.length > 0 ? request.tools : null;
  const baseTools = Array.isArray(base.tools) && base.tools.length > 0 ? base.tools : null;
  if (!sameJson(tools, baseTools) || !sameJson(request.chat_template_kwargs ?? null, base.templateKwargs))
    return 'history_rewritten';
  const kwargs = request.chat_template_kwargs;
  const thinking = isObject(kwargs) ? kwargs.enable_thinking : undefined;
  return { base, enableThinking: typeof thinking === 'boolean' ? thinking : undefined };
}

/** Sampling fields a chat request shares with `/v1/completions` (vLLM's SamplingParams). */
export const SAMPLING = [
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'seed',
  'stop',
  'stop_token_ids',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'min_tokens',
  'ignore_eos',
  'logit_bias',
] as const;

/** Whether this engine can serve the continuation (and what it serves). */
export const continuesOn = (engine: Engine): boolean => CONTINUITY_ENGINES.has(engine.kind);

/** The `/v1/completions` body of a continued chat call: the ids, its sampling, ids and logprobs back. */
export function completionsBody(
  request: Record<string, unknown>,
  promptIds: readonly number[],
  model: string | null,
  contextLength: number | null,
): string {
  // Chat's default is the rest of the context; completions' would be 16 tokens. Null where the
  // engine reports no context length (vLLM then takes the rest of it itself).
  const room =
    contextLength !== null && contextLength > promptIds.length ? contextLength - promptIds.length : null;
  const body: Record<string, unknown> = {
    ...(model !== null ? { model } : typeof request.model === 'string' ? { model: request.model } : {}),
    prompt: promptIds,
    max_tokens: request.max_completion_tokens ?? request.max_tokens ?? room,
    return_token_ids: true,
    logprobs: 0,
    // A family's markers may be special tokens (harmony's channels, Llama's <|python_tag|>): the
    // parser needs them in the text, as vLLM's chat path reads them from the ids.
    skip_special_tokens: false,
  };
  for (const field of SAMPLING) if (request[field] !== undefined) body[field] = request[field];
  return JSON.stringify(body);
}

/** The engine's text completion as the chat completion it stands for (vLLM's chat answer shape). */
function chatAnswerOf(
  answer: Record<string, unknown>,
  request: Record<string, unknown>,
  engine: Engine,
): { body: Record<string, unknown>; parsed: ParsedCompletion; finish: string | null } {
  const choice = (answer.choices as unknown[])[0] as Record<string, unknown>;
  const text = typeof choice.text === 'string' ? choice.text : '';
  // The engine's model's parser: the one vLLM's chat path would run on this text.
  const parse = engine.adapter ? engine.adapter.parse : parseToolCalls;
  const parsed = parse(text, {
    newToolCallId: () => (engine.adapter ? engine.adapter.newToolCallId() : randomToolCallId()),
  });
  const engineFinish = typeof choice.finish_reason === 'string' ? choice.finish_reason : null;
  // vLLM's chat answers `tool_calls` for a turn that called tools and stopped on its own.
  const finish = parsed.toolCalls.length > 0 && engineFinish === 'stop' ? 'tool_calls' : engineFinish;
  const logprobs = isObject(choice.logprobs) ? choice.logprobs : null;
  const tokens = Array.isArray(logprobs?.tokens) ? (logprobs.tokens as unknown[]) : [];
  const values = Array.isArray(logprobs?.token_logprobs) ? (logprobs.token_logprobs as unknown[]) : [];
  const body = {
    id: `chatcmpl-${typeof answer.id === 'string' ? answer.id.replace(/^cmpl-/, '') : randomBytes(16).toString('hex')}`,
    object: 'chat.completion',
    created: typeof answer.created === 'number' ? answer.created : Math.floor(Date.now() / 1000),
    model: answer.model,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: parsed.content,
          refusal: null,
          // vLLM 0.10.2–0.11's name; null without a reasoning block, as its chat answers.
          reasoning_content: parsed.reasoning ?? null,
          tool_calls: parsed.toolCalls,
        },
        logprobs:
          request.logprobs === true
            ? {
                content: values.map((logprob, i) => ({
                  token: typeof tokens[i] === 'string' ? tokens[i] : '',
                  logprob,
                  bytes: null,
                  top_logprobs: [],
                })),
              }
            : null,
        finish_reason: finish,
        stop_reason: choice.stop_reason ?? null,
        token_ids: choice.token_ids ?? null,
      },
    ],
    usage: answer.usage ?? null,
    prompt_token_ids: choice.prompt_token_ids ?? null,
  };
  return { body, parsed, finish };
}

/** The chat completion as the chunks of a stream: role, reasoning, content, each tool call, finish, usage. */
function chatStreamOf(body: Record<string, unknown>, request: Record<string, unknown>): string {
  const [choice] = body.choices as Record<string, unknown>[];
  const message = choice!.message as Record<string, unknown>;
  const head = { id: body.id, object: 'chat.completion.chunk', created: body.created, model: body.model };
  const chunk = (delta: Record<string, unknown>, extra: Record<string, unknown> = {}) =>
    formatSseEvent({
      data: JSON.stringify({
        ...head,
        choices: [{ index: 0, delta, logprobs: null, finish_reason: null, ...extra }],
      }),
    });
  let out = chunk({ role: 'assistant', content: '' });
  if (typeof message.reasoning_content === 'string')
    out += chunk({ reasoning_content: message.reasoning_content });
  if (typeof message.content === 'string' && message.content !== '')
    out += chunk({ content: message.content });
  (message.tool_calls as Record<string, unknown>[]).forEach((call, index) => {
    out += chunk({ tool_calls: [{ index, ...call }] });
  });
  out += chunk({}, { finish_reason: choice!.finish_reason, stop_reason: choice!.stop_reason ?? null });
  const options = request.stream_options;
  if (isObject(options) && options.include_usage === true)
    out += formatSseEvent({ data: JSON.stringify({ ...head, choices: [], usage: body.usage }) });
  return out + formatSseEvent({ data: SSE_DONE });
}

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};

/**
 * A continued call's answer: read whole, its step committed, then sent as a chat completion (whole,
 * or as the chunks of a stream when the agent asked for one). An answer that is no text completion
 * goes the way forwardWhole takes it (recorded as the engine's failure).
 */
export async function forwardContinued(ctx: RoutedCall, f: Forwarding): Promise<Answer> {
  const { routed } = ctx;
  let bytes: Buffer;
  try {
    bytes = await routed.reply.bytes();
  } catch (error) {
    routed.done();
    ctx.finish();
    return brokenAnswer(ctx, f, error);
  }
  routed.done();
  let answer: unknown;
  try {
    answer = JSON.parse(bytes.toString('utf8'));
  } catch {
    answer = null;
  }
  const choice = isObject(answer) && Array.isArray(answer.choices) ? answer.choices[0] : null;
  if (!isObject(answer) || !isObject(choice) || typeof choice.text !== 'string') {
    ctx.finish();
    const message = `engine ${routed.engine.id} returned something that is not a text completion`;
    f.recorder.record(ctx.session, ctx.attachments, {
      kind: 'upstream_error',
      engineId: routed.engine.id,
      status: 502,
      message,
      partial: null,
    });
    return openaiError(502, message, null, 'bad_upstream_answer');
  }
  try {
    if (ctx.clientGone()) {
      f.recorder.record(ctx.session, ctx.attachments, {
        kind: 'aborted',
        engineId: routed.engine.id,
        status: null,
        message: 'the agent went away before the answer was sent',
        partial: null,
      });
      return { status: 499, headers: {}, body: null };
    }
    const chat = chatAnswerOf(answer, ctx.request, routed.engine);
    const capture = new CompletionCapture();
    capture.addCompletion(answer);
    const captured = {
      ...capture.result(),
      content: chat.parsed.content ?? '',
      reasoning: chat.parsed.reasoning ?? null,
      toolCalls: chat.parsed.toolCalls,
      finishReason: chat.finish,
    };
    // Committed before the agent sees a byte of it, as every answer.
    await f.recorder.capture(ctx, captured, null);
    if (ctx.request.stream === true)
      return { status: 200, headers: SSE_HEADERS, body: chatStreamOf(chat.body, ctx.request) };
    return { status: 200, headers: JSON_HEADERS, body: JSON.stringify(chat.body) };
  } finally {
    ctx.finish();
  }
}

/** Counts of continued calls and of fallbacks by reason, this process's. */
export class ContinuityCounters {
  continued = 0;
  readonly fallback: Partial<Record<FallbackReason, number>> = {};

  count(outcome: 'continued' | FallbackReason): void {
    if (outcome === 'continued') this.continued++;
    else this.fallback[outcome] = (this.fallback[outcome] ?? 0) + 1;
  }

  toJSON(): JsonObject {
    return { continued: this.continued, fallback: { ...this.fallback } };
  }
}
