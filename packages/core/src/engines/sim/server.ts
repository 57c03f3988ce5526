import { randomBytes } from 'node:crypto';
import { type Context, Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import { stream } from 'hono/streaming';
import { z } from 'zod';
import { fromZodError, StepwiseError, ValidationError } from '../../domain/errors.js';
import { ChatMessage, ChatTool } from '../../text/index.js';
import { encodeSseDone, encodeSseEvent } from '../../text/sse.js';
import { SGLANG_SAMPLING_NAMES } from '../sglang.js';
import { mountControlRoutes } from './control-routes.js';
import { ResponseFormat, ToolChoice } from './controls.js';
import {
  SIM_MAX_MODEL_LEN,
  type SimChatRequest,
  type SimCompletionRequest,
  type SimEngine,
  type SimGeneration,
  type SimTextResult,
} from './engine.js';
import {
  type ResponseMeta,
  type TimedChunk,
  toChatCompletion,
  toChatCompletionChunks,
  toTextCompletion,
  toTextCompletionChunks,
} from './format.js';
import { instantLatency, type LatencyModel } from './latency.js';
import { cutGeneration } from './partial.js';
import { SimPauseControl, type SimRun } from './pause.js';
import { RecentGenerations, resumeGeneration } from './resume.js';

/*
 * The HTTP face of the sim engine: the subset of vLLM's OpenAI-compatible server that agents and the
 * gateway use (`/v1/models`, `/v1/chat/completions` and `/v1/completions` with SSE streaming,
 * `/health`), and SGLang's native `/generate` (answered whole). Errors use the
 * OpenAI shape `{error: {message, type, param, code}}`. The served model is always named `sim-*` so
 * nobody mistakes it for a real model; the request's `model` is not checked (any name is answered).
 */

export const DEFAULT_SIM_MODEL = 'sim-qwen3';

/** How a streamed response ended: all chunks sent, or the client went away first. */
export interface SimStreamEnd {
  aborted: boolean;
  /** Chunks written, `[DONE]` not counted. */
  chunksSent: number;
}

export interface SimAppOptions {
  engine: SimEngine;
  /** Paces streamed chunks (default: instant). Non-streaming responses wait for the whole completion. */
  latency?: LatencyModel;
  /** Served model name; must contain "sim" (default `sim-qwen3`). */
  model?: string;
  /** Called when a streaming handler finishes, for tests and metrics. */
  onStreamEnd?: (end: SimStreamEnd) => void;
  /** Pause, resume and weight versions (pause.ts); one per sim. */
  control?: SimPauseControl;
}

const nullable = <T extends z.ZodType>(schema: T) => schema.nullable().optional();

/** What the server checks before the engine sees the body; the engine checks the rest. */
const ChatCompletionBody = z.looseObject({
  model: nullable(z.string()),
  messages: z.array(ChatMessage).min(1, 'must contain at least one message'),
  tools: nullable(z.array(ChatTool)),
  n: nullable(z.literal(1, 'the sim supports only n=1')),
  stream: nullable(z.boolean()),
  stream_options: nullable(z.looseObject({ include_usage: nullable(z.boolean()) })),
  max_tokens: nullable(z.number()),
  max_completion_tokens: nullable(z.number()),
  seed: nullable(z.number()),
  logprobs: nullable(z.boolean()),
  top_logprobs: nullable(z.number()),
  stop: nullable(z.union([z.string(), z.array(z.string())])),
  return_token_ids: nullable(z.boolean()),
  add_generation_prompt: nullable(z.boolean()),
  continue_final_message: nullable(z.boolean()),
  tool_choice: nullable(ToolChoice),
  response_format: nullable(ResponseFormat),
});

/**
 * One prompt: a string or token ids. vLLM also takes a batch (several strings or id lists, one choice
 * each); the sim serves one prompt per request, so a batch of one is unwrapped and a larger one refused.
 */
const Prompt = z
  .union([z.string(), z.array(z.number()), z.array(z.string()), z.array(z.array(z.number()))], {
    error: 'must be a string or an array of token ids',
  })
  .transform((value, ctx): string | number[] => {
    if (typeof value === 'string' || value.length === 0 || typeof value[0] === 'number') {
      return value as string | number[];
    }
    if (value.length > 1) {
      ctx.issues.push({
        code: 'custom',
        message: `the sim serves one prompt per request, got a batch of ${value.length}`,
        input: value,
      });
      return z.NEVER;
    }
    return value[0] as string | number[];
  });

/**
 * SGLang's native `/generate` as the sim serves it (GenerateReqInput, python/sglang/srt/managers/
 * io_struct.py): one prompt of ids, SamplingParams by their own names (any other name is refused,
 * as SGLang's msgspec struct refuses it), answered whole.
 */
const NativeGenerateBody = z.looseObject({
  input_ids: z.array(z.number().int().min(0)).min(1, 'must be a non-empty array of token ids'),
  sampling_params: nullable(
    z.record(z.string(), z.unknown()).superRefine((params, ctx) => {
      for (const name of Object.keys(params))
        if (!SGLANG_SAMPLING_NAMES.has(name))
          ctx.addIssue({ code: 'custom', path: [name], message: 'not a sampling parameter' });
      if (params.n != null && params.n !== 1)
        ctx.addIssue({ code: 'custom', path: ['n'], message: 'the sim supports only n=1' });
    }),
  ),
  return_logprob: nullable(z.boolean()),
  logprob_start_len: nullable(z.number().int()),
  stream: nullable(z.literal(false, "the sim's /generate answers whole (stream: false)")),
});

const CompletionBody = z.looseObject({
  model: nullable(z.string()),
  prompt: Prompt,
  n: nullable(z.literal(1, 'the sim supports only n=1')),
  best_of: nullable(z.literal(1, 'the sim supports only best_of=1')),
  echo: nullable(z.literal(false, 'echo is not supported by the sim')),
  suffix: nullable(z.null('suffix is not supported')),
  stream: nullable(z.boolean()),
  stream_options: nullable(z.looseObject({ include_usage: nullable(z.boolean()) })),
  max_tokens: nullable(z.number()),
  seed: nullable(z.number()),
  logprobs: nullable(z.number('must be an integer (the number of alternatives per token)')),
  stop: nullable(z.union([z.string(), z.array(z.string())])),
  return_token_ids: nullable(z.boolean()),
  response_format: nullable(ResponseFormat),
});

interface OpenAIError {
  error: { message: string; type: string; param: string | null; code: string | null };
}

function openaiError(message: string, type: string, param: string | null = null): OpenAIError {
  return { error: { message, type, param, code: null } };
}

/** Reads a JSON body without trusting it: malformed JSON is a 400 that says so. */
async function jsonBody(c: Context): Promise<unknown> {
  const text = await c.req.text();
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`malformed JSON body (${(error as Error).message})`, 'body');
  }
}

export function createSimApp(options: SimAppOptions): Hono {
  const { engine } = options;
  const latency = options.latency ?? instantLatency;
  const model = options.model ?? DEFAULT_SIM_MODEL;
  if (!model.toLowerCase().includes('sim')) {
    throw new ValidationError('the served model name must contain "sim"', 'model');
  }
  const created = Math.floor(Date.now() / 1000);
  const app = new Hono();

  mountErrorsAndModels(app, model, created);

  const control = options.control ?? new SimPauseControl();
  mountControlRoutes(app, control);

  const recent = new RecentGenerations();
  const pacing: Pacing = {
    control,
    latency,
    tokenizer: engine.tokenizer,
    onStreamEnd: options.onStreamEnd,
    recent,
  };
  const completeText = textCompleter(engine, recent);

  const meta = (prefix: string): ResponseMeta => ({
    id: `${prefix}${randomBytes(16).toString('hex')}`,
    created: Math.floor(Date.now() / 1000),
    model,
  });

  app.post('/v1/chat/completions', async (c) => {
    const body = await jsonBody(c);
    const parsed = ChatCompletionBody.safeParse(body);
    if (!parsed.success) throw fromZodError(parsed.error);
    // The engine gets the body as sent: zod's copy would normalise content and reorder tool keys.
    const request = body as SimChatRequest;
    const id = meta('chatcmpl-');
    return answerGeneration(c, pacing, {
      run: () => engine.complete(request),
      whole: (r) => toChatCompletion(r, id, engine.tokenizer),
      chunks: (r) => toChatCompletionChunks(r, id, engine.tokenizer),
      streamed: request.stream === true,
    });
  });

  app.post('/v1/completions', async (c) => {
    const body = await jsonBody(c);
    const parsed = CompletionBody.safeParse(body);
    if (!parsed.success) throw fromZodError(parsed.error);
    // As sent, but with the prompt unwrapped from a batch of one.
    const request = { ...(body as object), prompt: parsed.data.prompt } as SimCompletionRequest;
    const id = meta('cmpl-');
    return answerGeneration(c, pacing, {
      run: () => completeText(request),
      whole: (r) => toTextCompletion(r, id, engine.tokenizer),
      chunks: (r) => toTextCompletionChunks(r, id, engine.tokenizer),
      streamed: request.stream === true,
    });
  });

  // SGLang's /generate over the same engine as /v1/completions: the answer TokenizerManager builds
  // (python/sglang/srt/managers/tokenizer_manager.py), finish reasons as SGLang's FINISH_* objects.
  app.post('/generate', async (c) => {
    const parsed = NativeGenerateBody.safeParse(await jsonBody(c));
    if (!parsed.success) throw fromZodError(parsed.error);
    return answerGeneration(c, pacing, {
      run: () => engine.completeText(generateRequest(parsed.data)),
      whole: (r) => generateAnswer(r, engine.tokenizer, parsed.data.return_logprob),
      chunks: () => [],
      streamed: false,
    });
  });

  return app;
}

/** A text completion, or the rest of a recent generation its prompt of ids continues (resume.ts). */
function textCompleter(engine: SimEngine, recent: RecentGenerations) {
  return (request: SimCompletionRequest): SimTextResult => {
    const ids = Array.isArray(request.prompt) ? (request.prompt as number[]) : null;
    const found = ids ? recent.find(ids) : null;
    return found
      ? resumeGeneration(found.generation, found.done, request, [...ids!], engine.tokenizer)
      : engine.completeText(request);
  };
}

type AnsweredGeneration = SimGeneration & { options: { returnTokenIds: boolean } };

/** What paces a generation's answer: the pause control, the latency model, the tokenizer. */
interface Pacing {
  control: SimPauseControl;
  latency: LatencyModel;
  tokenizer: SimEngine['tokenizer'];
  onStreamEnd: SimAppOptions['onStreamEnd'];
  recent: RecentGenerations;
}

/**
 * Admits a generation (new ones wait while paused), runs it, and answers once its latency says it
 * is done, or at once with the tokens ready so far when a pause aborts it.
 */
async function answerGeneration<R extends AnsweredGeneration>(
  c: Context,
  pacing: Pacing,
  g: {
    run: () => R;
    whole: (result: R) => object;
    chunks: (result: R) => readonly TimedChunk<object>[];
    streamed: boolean;
  },
) {
  const { control, latency } = pacing;
  await control.admit();
  const started = performance.now();
  const result = g.run();
  pacing.recent.add(result);
  const active = control.start(latency.schedule(result), started);
  const cut = (count: number) => cutGeneration(result, count, pacing.tokenizer, g.streamed);
  if (g.streamed)
    return streamChunks(c, active, g.chunks(result), (k) => g.chunks(cut(k)), pacing.onStreamEnd);
  try {
    const done = await active.until(latency.totalMs(result), { aborted: false });
    const answered = done ? result : cut(active.ready());
    return c.json(withSpans(g.whole(answered), active, 0, answered.tokenIds.length));
  } finally {
    active.end();
  }
}

/** Errors as OpenAI's, unknown routes a 404, `/health` and the served model. */
function mountErrorsAndModels(app: Hono, model: string, created: number): void {
  app.onError((error, c) => {
    if (error instanceof StepwiseError) {
      const type = error.status === 400 ? 'invalid_request_error' : error.code;
      return c.json(openaiError(error.message, type, error.field ?? null), error.status as 400);
    }
    if (error instanceof HTTPException) {
      return c.json(openaiError(error.message || 'request failed', 'http_error'), error.status);
    }
    return c.json(openaiError('internal error', 'internal_error'), 500);
  });
  app.notFound((c) =>
    c.json(openaiError(`no route for ${c.req.method} ${c.req.path}`, 'not_found_error'), 404),
  );

  app.get('/health', (c) => c.body(null, 200));
  app.get('/v1/models', (c) =>
    c.json({
      object: 'list',
      data: [
        {
          id: model,
          object: 'model',
          created,
          owned_by: 'stepwise',
          root: model,
          parent: null,
          max_model_len: SIM_MAX_MODEL_LEN,
        },
      ],
    }),
  );
}

/**
 * Writes each chunk once its last token is due on the run's schedule, then `[DONE]`. A pause that
 * aborts the run ends the stream with `cut(k)`'s chunks past those sent: the rest of the k tokens
 * ready, and a finish_reason "abort".
 */
function streamChunks(
  c: Context,
  run: SimRun,
  chunks: readonly TimedChunk<object>[],
  cut: (count: number) => readonly TimedChunk<object>[],
  onStreamEnd: SimAppOptions['onStreamEnd'],
) {
  c.header('content-type', 'text/event-stream');
  c.header('cache-control', 'no-cache');
  c.header('x-accel-buffering', 'no');
  return stream(c, async (out) => {
    const signal: { aborted: boolean; wake?: () => void } = { aborted: false };
    out.onAbort(() => {
      signal.aborted = true;
      signal.wake?.();
    });
    let sent = 0;
    let through = 0;
    const write = async ({ chunk, tokensThrough }: TimedChunk<object>) => {
      await out.write(
        encodeSseEvent({ data: JSON.stringify(withSpans(chunk, run, through, tokensThrough)) }),
      );
      through = Math.max(through, tokensThrough);
      sent++;
    };
    try {
      for (const timed of chunks) {
        const due = timed.tokensThrough > 0 ? (run.schedule[timed.tokensThrough - 1] ?? 0) : 0;
        if (!(await run.until(due, signal))) break;
        await write(timed);
      }
      if (run.aborted && !signal.aborted) {
        const rest = cut(run.ready());
        for (const timed of rest.slice(sent === 0 ? 0 : 1))
          if (timed.tokensThrough > through || isFinal(timed.chunk)) await write(timed);
      }
      if (!signal.aborted) await out.write(encodeSseDone());
    } finally {
      run.end();
      onStreamEnd?.({ aborted: signal.aborted || out.aborted, chunksSent: sent });
    }
  });
}

/** A chunk that ends the choice (its finish_reason) or carries only usage. */
function isFinal(chunk: object): boolean {
  const choices = (chunk as { choices?: { finish_reason?: unknown }[] }).choices ?? [];
  return choices.length === 0 || choices.some((c) => c.finish_reason != null);
}

/**
 * Adds `weight_version_spans` to each choice that carries token ids: the weights version that
 * produced each of its tokens [from, to), so a gateway can stamp tokens across a `keep` switch.
 */
function withSpans<T extends object>(body: T, run: SimRun, from: number, to: number): T {
  const choices = (body as { choices?: { token_ids?: unknown }[] }).choices;
  if (!choices) {
    // SGLang's /generate: its meta_info names the weights version it ran under.
    const meta = (body as { meta_info?: Record<string, unknown> }).meta_info;
    if (meta) meta.weight_version_spans = run.spans(from, to);
    return body;
  }
  for (const choice of choices as Record<string, unknown>[])
    if (Array.isArray(choice.token_ids)) choice.weight_version_spans = run.spans(from, to);
  return body;
}

type NativeGenerate = z.infer<typeof NativeGenerateBody>;

/** SGLang's `/generate` as the engine's text completion. */
function generateRequest({
  input_ids: prompt,
  sampling_params: params,
}: NativeGenerate): SimCompletionRequest {
  return {
    prompt,
    // SGLang's default is 128 new tokens; null is up to the context (the engine's default here).
    max_tokens: params?.max_new_tokens === undefined ? 128 : (params.max_new_tokens as number | null),
    seed: (params?.sampling_seed as number | null | undefined) ?? null,
    stop: (params?.stop as string | string[] | null | undefined) ?? null,
  };
}

/** The answer SGLang's TokenizerManager builds, finish reasons as its FINISH_* objects. */
function generateAnswer(
  result: SimTextResult,
  tokenizer: SimEngine['tokenizer'],
  returnLogprob: NativeGenerate['return_logprob'],
): object {
  const eos = result.endTokenId ?? tokenizer.tokenId('<|im_end|>');
  const finish =
    result.finishReason === 'length'
      ? { type: 'length', length: result.tokenIds.length }
      : { type: 'stop', matched: result.stopReason ?? eos };
  return {
    text: result.text,
    output_ids: result.tokenIds,
    meta_info: {
      id: randomBytes(16).toString('hex'),
      finish_reason: finish,
      prompt_tokens: result.promptTokenIds.length,
      completion_tokens: result.tokenIds.length,
      cached_tokens: 0,
      ...(returnLogprob
        ? { output_token_logprobs: result.tokenIds.map((id, i) => [result.logprobs[i], id, null]) }
        : {}),
    },
  };
}
