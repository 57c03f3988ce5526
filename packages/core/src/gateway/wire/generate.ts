import { z } from 'zod';
import { ClientId, TokenIds } from '../../domain/index.js';
import { SamplingParams } from './sampling.js';

/*
 * `POST /generate` (Claw-R1's white-box call, SGLang's shape): prompt ids in, with sampling_params by
 * OpenAI's or SGLang's names; the trajectory only picks the engine it sticks to.
 */

export const GenerateRequest = z.looseObject({
  prompt_ids: TokenIds.optional(),
  input_ids: TokenIds.optional(),
  sampling_params: SamplingParams.nullish(),
  trajectory_uid: ClientId.optional(),
  model: z.string().max(256).optional(),
});
export type GenerateRequest = z.infer<typeof GenerateRequest>;
