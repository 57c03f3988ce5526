import { z } from 'zod';
import { parseOrThrow } from '../../domain/index.js';
import { boolean, SamplingFields } from './sampling.js';

/*
 * OpenAI's (legacy) completions request as the wire carries it (openai-node's CompletionCreateParams,
 * with vLLM's extras). A prompt is text or token ids; a batch is accepted when it holds one prompt,
 * as each prompt would be its own choice and a step has one.
 */

const one = 'a batch of prompts makes one choice each; send one prompt per request (one step each)';

const TokenIds = z.array(z.int().min(0), 'must be an array of token ids');

export const CompletionPrompt = z
  .union([z.string(), TokenIds, z.array(z.union([z.string(), TokenIds]))], {
    error: 'must be a string or an array of token ids',
  })
  .refine((p) => typeof p === 'string' || p.length === 0 || typeof p[0] === 'number' || p.length === 1, one);

export const CompletionRequest = z.looseObject({
  model: z.string('must be a string').nullish(),
  prompt: CompletionPrompt,
  ...SamplingFields,
  logprobs: z.int('must be an integer').min(0, 'must be a non-negative integer').nullish(),
  echo: boolean,
  suffix: z.string('must be a string').nullish(),
  best_of: z.literal(1, 'only best_of=1 is supported (the step is the one generation sampled)').nullish(),
  n: z
    .literal(
      1,
      'only n=1 is supported (each choice would be its own step; send n separate requests, one trajectory each)',
    )
    .nullish(),
  stream: boolean,
  stream_options: z.looseObject({ include_usage: boolean }, 'must be an object').nullish(),
  user: z.string('must be a string').nullish(),
});
export type CompletionRequest = z.infer<typeof CompletionRequest>;

/** The agent's completions request checked against the spec; the value is the agent's own object, typed. */
export function parseCompletionRequest(body: unknown): CompletionRequest {
  parseOrThrow(CompletionRequest, body);
  return body as CompletionRequest;
}
