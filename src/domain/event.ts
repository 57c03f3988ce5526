import { z } from 'zod';

export const EventType = z.enum([
  'steps_submitted',
  'trajectory_created',
  'trajectory_completed',
  'group_ready',
  'group_dropped',
  'batch_leased',
  'batch_acked',
  'batch_nacked',
  'lease_expired',
  'label_changed',
  'policy_version_changed',
  'channel_configured',
  'signal_added',
]);
export type EventType = z.infer<typeof EventType>;

/** An entry of the append-only event log; `seq` is the monotonic cursor. */
export interface PoolEvent {
  seq: number;
  ts: number;
  type: EventType;
  channel: string | null;
  data: Record<string, unknown>;
}
