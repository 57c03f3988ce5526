import { z } from 'zod';

/* What a trainer asks of a weight switch (`PUT /v1/policy-version` with a mode; gateway/weight-switch.ts). */

/** How running generations meet a switch: ended with what they have, frozen, or drained. */
export const SwitchMode = z.enum(['abort', 'keep', 'wait']);
export type SwitchMode = z.infer<typeof SwitchMode>;

/**
 * The new weights: a checkpoint folder every engine loads, or vLLM's transfer-backend `update_info`
 * passed as given. Absent: the trainer pushes the weights itself while the fleet is paused.
 */
export const WeightsSource = z.union([
  z.strictObject({ path: z.string().min(1, 'must be a folder path').max(4096) }),
  z.strictObject({ update_info: z.record(z.string(), z.unknown()) }),
]);
export type WeightsSource = z.infer<typeof WeightsSource>;
