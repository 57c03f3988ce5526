import { z } from 'zod';
import { fromZodError, StepwiseError, ValidationError } from '../domain/errors.js';

/*
 * SGLang's native `POST /generate` (token ids in, token ids and logprobs out), as SGLang serves it:
 * the request is `GenerateReqInput` (python/sglang/srt/managers/io_struct.py), its sampling_params
 * `SamplingParams` (python/sglang/srt/sampling/sampling_params.py), and a whole answer is
 * `{text, output_ids, meta_info}` built in TokenizerManager._handle_batch_output
 * (python/sglang/srt/managers/tokenizer_manager.py).
 */

/**
 * The names SamplingParams takes (a msgspec struct: any other name fails the whole request), and
 * the OpenAI/vLLM names the gateway's `/generate` uses for some of them.
 */
export const SGLANG_SAMPLING_NAMES: ReadonlySet<string> = new Set([
  'max_new_tokens',
  'min_new_tokens',
  'stop',
  'stop_token_ids',
  'stop_regex',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'frequency_penalty',
  'presence_penalty',
  'repetition_penalty',
  'n',
  'json_schema',
  'regex',
  'ebnf',
  'structural_tag',
  'ignore_eos',
  'skip_special_tokens',
  'spaces_between_special_tokens',
  'no_stop_trim',
  'custom_params',
  'stream_interval',
  'logit_bias',
  'sampling_seed',
]);
const RENAMED: Record<string, string> = {
  max_tokens: 'max_new_tokens',
  min_tokens: 'min_new_tokens',
  seed: 'sampling_seed',
};
/** What the gateway decides itself (the answer always carries logprobs), not sampling. */
const GATEWAY_FIELDS = new Set(['logprobs', 'top_logprobs', 'stream', 'model']);

/**
 * The request of a native `/generate` for `promptIds`: `sampling` in the gateway's (OpenAI/vLLM) names
 * becomes SGLang's, a name SGLang does not take is a 400 naming it, and the answer is asked whole
 * with the logprob of every output token (`logprob_start_len: -1`: none for the prompt).
 */
export function sglangGenerateRequest(
  promptIds: readonly number[] | Uint32Array,
  sampling: Record<string, unknown>,
  maxNewTokens: number | null,
  field = 'sampling_params',
): Record<string, unknown> {
  const params: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(sampling)) {
    if (value === undefined || GATEWAY_FIELDS.has(name)) continue;
    const native = RENAMED[name] ?? name;
    if (!SGLANG_SAMPLING_NAMES.has(native))
      throw new ValidationError(
        `${field}.${name}: not a sampling parameter of SGLang (it takes ${[...SGLANG_SAMPLING_NAMES].join(', ')})`,
        `${field}.${name}`,
      );
    params[native] = value;
  }
  if (params.n !== undefined && params.n !== null && params.n !== 1)
    throw new ValidationError(`${field}.n: only n=1 is supported (send n separate requests)`, `${field}.n`);
  // Null is SGLang's "up to the rest of the context" (its own default would be 128 tokens).
  params.max_new_tokens = maxNewTokens;
  return {
    input_ids: promptIds,
    sampling_params: params,
    return_logprob: true,
    logprob_start_len: -1,
    stream: false,
  };
}

/** sglangGenerateRequest as JSON text. */
export function sglangGenerateBody(
  promptIds: readonly number[],
  sampling: Record<string, unknown>,
  maxNewTokens: number | null,
  field = 'sampling_params',
): string {
  return JSON.stringify(sglangGenerateRequest(promptIds, sampling, maxNewTokens, field));
}

const TokenId = z.number().int().min(0);

/** meta_info.finish_reason: FINISH_MATCHED_TOKEN/STR ({type: 'stop', matched}), FINISH_LENGTH, FINISH_ABORT. */
const FinishReason = z.looseObject({
  type: z.string(),
  matched: z.union([z.number(), z.string()]).nullish(),
  message: z.string().nullish(),
  status_code: z.number().int().nullish(),
});

const GenerateAnswer = z.looseObject({
  text: z.string(),
  output_ids: z.array(TokenId),
  meta_info: z.looseObject({
    finish_reason: FinishReason.nullable(),
    prompt_tokens: z.number().int().min(0),
    completion_tokens: z.number().int().min(0),
    // [logprob, token_id, text or null] per output token (text only with return_text_in_logprobs).
    output_token_logprobs: z.array(z.tuple([z.number().nullable(), TokenId]).rest(z.unknown())).optional(),
  }),
});

export interface SglangGeneration {
  responseIds: number[];
  /** One per response id; null when SGLang left any of them out. */
  logprobs: number[] | null;
  text: string;
  /** `stop` or `length` as OpenAI names them (SGLang's `type`). */
  finishReason: string;
  promptTokens: number;
}

/** The engine's answer was not a generation of the request: a 502, nothing of it is used. */
export class SglangAnswerError extends StepwiseError {
  constructor(message: string) {
    super(message, 502, 'bad_upstream_answer', undefined, true);
  }
}

/**
 * A whole `/generate` answer for a prompt of `promptLength` ids, checked: the ids are token ids,
 * the logprob entries name the same ids in the same order, the prompt was counted as sent (not
 * truncated), and the generation finished. An aborted generation is the engine's error.
 */
export function readSglangGenerate(
  answer: unknown,
  promptLength: number,
  engineId: string,
): SglangGeneration {
  const parsed = GenerateAnswer.safeParse(answer);
  if (!parsed.success)
    throw new SglangAnswerError(
      `engine ${engineId} sent a malformed /generate answer: ${fromZodError(parsed.error).message}`,
    );
  const { text, output_ids: ids, meta_info: meta } = parsed.data;
  const finish = meta.finish_reason;
  if (finish === null)
    throw new SglangAnswerError(
      `engine ${engineId} sent an unfinished /generate answer (finish_reason null)`,
    );
  if (finish.type === 'abort') {
    const status = finish.status_code ?? 502;
    throw new StepwiseError(
      `engine ${engineId} aborted the generation: ${finish.message ?? 'no reason given'}`,
      status >= 400 && status < 600 ? status : 502,
      'upstream_error',
    );
  }
  if (meta.prompt_tokens !== promptLength)
    throw new SglangAnswerError(
      `engine ${engineId} counted ${meta.prompt_tokens} prompt tokens for the ${promptLength} ids sent`,
    );
  if (meta.completion_tokens !== ids.length)
    throw new SglangAnswerError(
      `engine ${engineId} sent ${ids.length} output_ids but counted ${meta.completion_tokens} completion tokens`,
    );
  let logprobs: number[] | null = null;
  const entries = meta.output_token_logprobs;
  if (entries !== undefined) {
    if (entries.length !== ids.length || entries.some((e, i) => e[1] !== ids[i]))
      throw new SglangAnswerError(
        `engine ${engineId} sent output_token_logprobs for other tokens than its output_ids`,
      );
    if (entries.every((e) => e[0] !== null)) logprobs = entries.map((e) => e[0] as number);
  }
  return { responseIds: ids, logprobs, text, finishReason: finish.type, promptTokens: meta.prompt_tokens };
}
