import { z } from 'zod';
import { JsonObject } from './json.js';

export const EventType = z.enum([
  'steps_submitted',
  'trajectory_created',
  'trajectory_completed',
  'group_ready',
  'group_dropped',
  'group_pending_guidance',
  'group_guidance_released',
  'trajectory_excluded',
  'batch_leased',
  'batch_acked',
  'batch_nacked',
  'lease_expired',
  'label_changed',
  'policy_version_changed',
  'channel_configured',
  'signal_added',
  'call_failed',
  'access_refused',
  'prompts_registered',
  'prompts_handed',
  'evidence_kept',
]);
export type EventType = z.infer<typeof EventType>;

/** An entry of the append-only event log; `seq` is the monotonic cursor. */
export const PoolEvent = z.object({
  seq: z.number().int().min(1),
  ts: z.number(),
  type: EventType,
  channel: z.string().nullable(),
  data: JsonObject,
});
export type PoolEvent = z.infer<typeof PoolEvent>;
