import { z } from 'zod';
import { JsonObject } from './json.js';

export const SignalSource = z.enum(['rule', 'verifier', 'judge', 'rm', 'human', 'env']);

/** A reward or quality score attached to a step or a trajectory (used by the rewards issue). */
export const Signal = z.object({
  trajectoryId: z.string(),
  stepIndex: z.number().int().min(0).nullable(),
  name: z.string().min(1).max(128),
  value: z.number().finite(),
  source: SignalSource,
  version: z.string().max(64).default('1'),
  details: JsonObject.default({}),
  createdAt: z.number(),
});
export type Signal = z.infer<typeof Signal>;
