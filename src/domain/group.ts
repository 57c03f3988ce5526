import { z } from 'zod';

export const GroupState = z.enum(['collecting', 'ready', 'leased', 'consumed', 'dropped']);
export type GroupState = z.infer<typeof GroupState>;

export const DropReason = z.enum(['queue_full', 'stale', 'incomplete_timeout', 'no_complete_trajectories']);
export type DropReason = z.infer<typeof DropReason>;

/** Claw-R1's prompt group: the rollouts of one prompt, the unit GRPO normalises over. */
export interface Group {
  id: string;
  channel: string;
  expected: number | null;
  nTrajectories: number;
  nFinished: number;
  nComplete: number;
  state: GroupState;
  dropReason: DropReason | null;
  partial: boolean;
  minPolicyVersion: number | null;
  createdAt: number;
  readyAt: number | null;
  leaseId: string | null;
  consumedAt: number | null;
}
