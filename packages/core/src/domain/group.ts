import { z } from 'zod';

/**
 * `pending_guidance`: a hard group (ActGuide-RL) held back, never leased, until its guided
 * replacement lands or the guidance is abandoned (docs/datapool.md).
 */
export const GroupState = z.enum([
  'collecting',
  'pending_guidance',
  'ready',
  'leased',
  'consumed',
  'dropped',
]);
export type GroupState = z.infer<typeof GroupState>;

export const DropReason = z.enum([
  'queue_full',
  'stale',
  'incomplete_timeout',
  'no_complete_trajectories',
  'zero_variance',
  'too_few_after_curation',
  'signals_missing',
]);
export type DropReason = z.infer<typeof DropReason>;

/** Claw-R1's prompt group: the rollouts of one prompt, the unit GRPO normalises over. */
export const Group = z.object({
  id: z.string(),
  channel: z.string(),
  expected: z.number().int().min(1).nullable(),
  nTrajectories: z.number().int().min(0),
  nFinished: z.number().int().min(0),
  nComplete: z.number().int().min(0),
  state: GroupState,
  dropReason: DropReason.nullable(),
  partial: z.boolean(),
  minPolicyVersion: z.number().int().nullable(),
  createdAt: z.number(),
  readyAt: z.number().nullable(),
  leaseId: z.string().nullable(),
  consumedAt: z.number().nullable(),
  /** Held for guidance: a group whose complete rollouts all score at most this waits in `pending_guidance`. */
  guidanceHold: z.number().nullable(),
  /** When it entered `pending_guidance` (null when it is not there). */
  pendingSince: z.number().nullable(),
});
export type Group = z.infer<typeof Group>;
