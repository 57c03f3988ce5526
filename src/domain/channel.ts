import { z } from 'zod';

const fields = {
  n_rollouts: z.number().int().min(1).max(4096).nullable(),
  max_queue_size: z.number().int().min(1).nullable(),
  max_staleness: z.number().int().min(0).nullable(),
  stale_policy: z.enum(['drop', 'flag']),
  group_timeout_ms: z.number().int().min(1).nullable(),
  incomplete_policy: z.enum(['drop', 'serve_partial']),
  /** An open trajectory with no activity for this long is closed as `aborted` (no session leaks). */
  idle_timeout_ms: z.number().int().min(1).nullable(),
};

/** Per-channel pool policy; persisted so every process sharing the store applies the same rules. */
export const ChannelConfig = z.strictObject(fields);
export type ChannelConfig = z.infer<typeof ChannelConfig>;

/** A change to some settings; fields left out keep their value. */
export const ChannelConfigPatch = z.strictObject(fields).partial();
export type ChannelConfigPatch = z.infer<typeof ChannelConfigPatch>;

export const DEFAULT_CHANNEL_CONFIG: ChannelConfig = {
  n_rollouts: null,
  max_queue_size: null,
  max_staleness: null,
  stale_policy: 'drop',
  group_timeout_ms: null,
  incomplete_policy: 'drop',
  idle_timeout_ms: 30 * 60 * 1000,
};
