import { z } from 'zod';

/*
 * The sampling options the protocols share (chat, completions, /generate's sampling_params), typed
 * as the gateway forwards and stores them. The engine checks ranges; these checks make sure a step
 * never records `temperature: "hot"`. Null is absent, as in OpenAI's SDKs.
 */

export const number = z.number('must be a number').nullish();
export const integer = z.int('must be an integer').nullish();
export const boolean = z.boolean('must be a boolean').nullish();

/** `stop`: one string or a list (OpenAI, vLLM). */
export const Stop = z.union([z.string(), z.array(z.string())], {
  error: 'must be a string or an array of strings',
});

/** Options every protocol that reaches vLLM's OpenAI server may carry (its extras included). */
export const SamplingFields = {
  temperature: number,
  top_p: number,
  min_p: number,
  presence_penalty: number,
  frequency_penalty: number,
  repetition_penalty: number,
  top_k: integer,
  max_tokens: integer,
  min_tokens: integer,
  seed: integer,
  ignore_eos: boolean,
  skip_special_tokens: boolean,
  stop: Stop.nullish(),
  stop_token_ids: z.array(z.int(), 'must be an array of token ids').nullish(),
  logit_bias: z.record(z.string(), z.number(), 'must be an object of token id → bias').nullish(),
};

/** `/generate`'s sampling_params: SGLang's names beside OpenAI's; logprobs a switch or a count. */
export const SamplingParams = z.looseObject({
  ...SamplingFields,
  max_new_tokens: integer,
  logprobs: z
    .union([z.boolean(), z.int().min(0)], { error: 'must be a boolean or a non-negative integer' })
    .nullish(),
});
export type SamplingParams = z.infer<typeof SamplingParams>;
