import { z } from 'zod';
import { ChannelName } from './ids.js';

export const LeaseState = z.enum(['active', 'acked', 'nacked', 'expired']);
export type LeaseState = z.infer<typeof LeaseState>;

/** A batch of groups handed to one consumer until it acks, nacks or the lease expires. */
export const Lease = z.object({
  id: z.string(),
  channel: z.string(),
  consumer: z.string(),
  groupIds: z.array(z.string()),
  /** Steps handed over with the lease. */
  nSteps: z.number().int().min(0),
  state: LeaseState,
  createdAt: z.number(),
  expiresAt: z.number(),
  endedAt: z.number().nullable(),
});
export type Lease = z.infer<typeof Lease>;

export const LeaseRequest = z.strictObject({
  channel: ChannelName.default('train'),
  batch_size: z.number().int().min(1, 'must be >= 1').max(4096, 'must be <= 4096'),
  n_rollouts: z.number().int().min(1, 'must be >= 1').max(4096).optional(),
  max_staleness: z.number().int().min(0, 'must be >= 0').optional(),
  wait_ms: z.number().int().min(0).max(120_000, 'must be <= 120000').default(0),
  consumer: z.string().min(1).max(128).default('anonymous'),
  ttl_ms: z
    .number()
    .int()
    .min(1_000, 'must be >= 1000')
    .max(86_400_000, 'must be <= 86400000')
    .default(300_000),
});
export type LeaseRequest = z.infer<typeof LeaseRequest>;
