import { NotFoundError, StepwiseError } from '../domain/index.js';
import { CompletionCapture } from '../engines/capture.js';
import type { Engine, EngineRouter } from '../engines/router.js';
import { readSglangGenerate, sglangGenerateRequest } from '../engines/sglang.js';
import { UpstreamError } from '../engines/upstream.js';
import { jsonOf, type ParsedJson, parseEngineJson } from '../http/offload-json.js';
import type { DataPool } from '../pool/data-pool.js';
import { normalizeUpstreamError } from './openai-errors.js';
import type { SamplingParams } from './wire/sampling.js';

/** Token ids as parsed: a big body's come from the offload thread as a Uint32Array. */
export type TokenIdList = readonly number[] | Uint32Array;

export interface GenerateInput {
  promptIds: TokenIdList;
  /** Sampling parameters passed to the engine (max_tokens, temperature, top_p, stop, seed, ...). */
  sampling: SamplingParams;
  trajectoryId: string | null;
  model?: string;
}

export interface GenerateOutput {
  prompt_ids: TokenIdList;
  response_ids: number[];
  text: string;
  logprobs: number[] | null;
  finish_reason: string | null;
  /** Claw-R1's names for response_ids, logprobs and finish_reason. */
  token_ids: number[];
  log_probs: number[] | null;
  stop_reason: string | null;
  engine_id: string;
  policy_version: number;
}

export interface GenerateDeps {
  router: EngineRouter;
  pool: DataPool;
  /** `max_tokens` of a generation that sets none (see GatewayOptions.generateMaxTokens). */
  generateMaxTokens: number | null;
}

/**
 * White-box token-in/token-out generation (Claw-R1's `/generate`): prompt ids to the engine's
 * completions API, exact ids and logprobs back. Records nothing; the agent submits its steps.
 */
export async function generate(
  on: GenerateDeps,
  input: GenerateInput,
  signal: AbortSignal,
): Promise<GenerateOutput> {
  const { router } = on;
  // The id picks the engine a trajectory sticks to: one nobody opened is a mistake, not a new key.
  if (input.trajectoryId !== null && !(await on.pool.getTrajectory(input.trajectoryId)))
    throw new NotFoundError(`trajectory_uid: no trajectory ${input.trajectoryId}`);
  const version = await on.pool.policyVersion();
  // SGLang's own /generate takes ids and answers them; vLLM and the sim answer ids on completions.
  const path = (engine: Engine) => (engine.kind === 'sglang' ? '/generate' : '/v1/completions');
  const routed = await router.send(input.trajectoryId, 'POST', path, null, signal, (engine) => {
    if (engine.kind === 'openai') {
      throw new StepwiseError(
        `engine ${engine.id} is an OpenAI-compatible API without token-id prompts: /generate needs vllm, sglang or sim`,
        501,
        'not_supported',
      );
    }
    const maxTokens = input.sampling.max_tokens ?? defaultMaxTokens(on, engine, input.promptIds.length);
    // A 262,144-id prompt is 1.4 MB of JSON: built on the offload thread (offload-json.ts), from a
    // copy of the ids that moves there (a memcpy; a clone costs more, and the ids serve the answer).
    const ids = input.promptIds.slice();
    if (engine.kind === 'sglang')
      return jsonOf(sglangGenerateRequest(ids, input.sampling, maxTokens as number | null), true);
    return jsonOf(
      {
        ...input.sampling,
        max_tokens: maxTokens,
        model: router.models(engine.id)[0] ?? input.model ?? 'default',
        prompt: ids,
        return_token_ids: true,
        logprobs: 0,
        stream: false,
      },
      true,
    );
  });
  try {
    if (routed.reply.status !== 200) {
      const text = await routed.reply.text();
      const { message } = normalizeUpstreamError(routed.reply.status, text, routed.engine.id);
      throw new StepwiseError(message, routed.reply.status, 'upstream_error');
    }
    // The engine echoes the prompt's ids: a big answer is parsed off the event loop, its ids moved.
    const parsed = await parseEngineJson(await routed.reply.bytes(), false);
    if (routed.engine.kind === 'sglang') return fromSglang(parsed, input, routed.engine.id, version);
    if (!parsed.ok)
      throw new UpstreamError(
        `engine ${routed.engine.id} returned something that is not a completion`,
        502,
        true,
      );
    const capture = new CompletionCapture();
    capture.addCompletion(parsed.value);
    const r = capture.result();
    if (!r.responseIds) {
      const why = r.malformed ? ` (${r.malformed})` : '';
      throw new UpstreamError(`engine ${routed.engine.id} returned no token ids${why}`, 502, true);
    }
    return {
      prompt_ids: r.promptIds ?? input.promptIds,
      response_ids: r.responseIds,
      text: r.content,
      logprobs: r.logprobs,
      finish_reason: r.finishReason,
      // Claw-R1's GenerateResponse names: the same ids and logprobs (none where its flow asked for
      // none, `logprobs: false`, as its gateway answers), and the finish_reason as its stop_reason.
      token_ids: r.responseIds,
      log_probs: input.sampling.logprobs === false ? null : r.logprobs,
      stop_reason: r.finishReason,
      engine_id: routed.engine.id,
      policy_version: version,
    };
  } finally {
    routed.done();
  }
}

/** The gateway's answer from SGLang's native one (checked in readSglangGenerate). */
function fromSglang(
  parsed: ParsedJson,
  input: GenerateInput,
  engineId: string,
  version: number,
): GenerateOutput {
  if (!parsed.ok)
    throw new UpstreamError(`engine ${engineId} returned something that is not JSON`, 502, true);
  const g = readSglangGenerate(parsed.value, input.promptIds.length, engineId);
  return {
    prompt_ids: input.promptIds,
    response_ids: g.responseIds,
    text: g.text,
    logprobs: g.logprobs,
    finish_reason: g.finishReason,
    token_ids: g.responseIds,
    log_probs: input.sampling.logprobs === false ? null : g.logprobs,
    stop_reason: g.finishReason,
    engine_id: engineId,
    policy_version: version,
  };
}

/**
 * The length of a `/generate` that names none: `generateMaxTokens`, never past the rest of the
 * engine's context; without it that rest. Null (the engine's own choice; vLLM's is the rest of the
 * context) where the engine reports no context length or the prompt fills it (the engine refuses).
 */
function defaultMaxTokens(on: GenerateDeps, engine: Engine, promptLength: number): number | null {
  const contextLength = on.router.maxModelLen(engine.id);
  const room = contextLength === null ? null : contextLength - promptLength;
  if (room !== null && room <= 0) return null;
  if (on.generateMaxTokens === null) return room;
  return room === null ? on.generateMaxTokens : Math.min(on.generateMaxTokens, room);
}
