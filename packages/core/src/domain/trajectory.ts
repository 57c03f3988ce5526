import { z } from 'zod';
import { ValidationError } from './errors.js';
import { ChannelName } from './ids.js';
import { JsonObject } from './json.js';

export const TrajectoryStatus = z.enum(['open', 'complete', 'aborted', 'infra_failed']);
export type TrajectoryStatus = z.infer<typeof TrajectoryStatus>;

/** One episode: the steps of one rollout of one prompt. */
export const Trajectory = z.object({
  id: z.string(),
  groupId: z.string(),
  channel: z.string(),
  taskId: z.string().nullable(),
  status: TrajectoryStatus,
  reward: z.number().nullable(),
  metadata: JsonObject,
  nSteps: z.number().int().min(0),
  lastIndex: z.number().int().nullable(),
  prefixBreaks: z.number().int().min(0),
  createdAt: z.number(),
  completedAt: z.number().nullable(),
  // Guidance (ActGuide-RL) and provenance (CLEANER derivations).
  guided: z.boolean(),
  guidanceK: z.number().int().nullable(),
  probe: z.boolean(),
  derivedFrom: z.string().nullable(),
  derivation: JsonObject.nullable(),
  /** Set where a bounded read left the metadata unread ({}): its size in bytes as JSON. */
  omittedMetadataBytes: z.number().int().optional(),
});
export type Trajectory = z.infer<typeof Trajectory>;

/** A complete, unguided, underived trajectory of `nSteps` steps that no store holds (a scored sample). */
export function unstoredTrajectory(
  fields: Pick<Trajectory, 'id' | 'groupId' | 'channel' | 'taskId' | 'metadata' | 'nSteps'>,
): Trajectory {
  return {
    ...fields,
    status: 'complete',
    reward: null,
    lastIndex: fields.nSteps - 1,
    prefixBreaks: 0,
    createdAt: 0,
    completedAt: 0,
    guided: false,
    guidanceK: null,
    probe: false,
    derivedFrom: null,
    derivation: null,
  };
}

export interface TrajectoryOut {
  trajectory_uid: string;
  prompt_uid: string;
  channel: string;
  task_id: string | null;
  status: TrajectoryStatus;
  reward: number | null;
  metadata: Record<string, unknown>;
  n_steps: number;
  prefix_breaks: number;
  created_at: number;
  completed_at: number | null;
  guided: boolean;
  guidance_k: number | null;
  probe: boolean;
  derived_from: string | null;
  derivation: Record<string, unknown> | null;
  /** Present where a list or detail view left big metadata out (`metadata` is then `{}`). */
  metadata_truncated?: { bytes: number };
}

export function trajectoryToWire(t: Trajectory): TrajectoryOut {
  return {
    trajectory_uid: t.id,
    prompt_uid: t.groupId,
    channel: t.channel,
    task_id: t.taskId,
    status: t.status,
    reward: t.reward,
    metadata: t.metadata,
    n_steps: t.nSteps,
    prefix_breaks: t.prefixBreaks,
    created_at: t.createdAt,
    completed_at: t.completedAt,
    guided: t.guided,
    guidance_k: t.guidanceK,
    probe: t.probe,
    derived_from: t.derivedFrom,
    derivation: t.derivation,
    ...(t.omittedMetadataBytes === undefined
      ? {}
      : { metadata_truncated: { bytes: t.omittedMetadataBytes } }),
  };
}

export const CompleteTrajectoryBody = z.strictObject({
  reward: z.number().finite().nullable().optional(),
  /**
   * Claw-R1's completion names the channel too (default `train`). Steps are in by now, so it must be
   * the trajectory's own channel (checked by the routes): accepted, never a move.
   */
  channel: ChannelName.optional(),
  status: z.enum(['complete', 'aborted', 'infra_failed']).default('complete'),
});

/** A completion's `channel` must be the trajectory's: a 400 naming the field otherwise. */
export function checkCompletionChannel(
  given: string | undefined,
  trajectory: Pick<Trajectory, 'id' | 'channel'>,
): void {
  if (given !== undefined && given !== trajectory.channel)
    throw new ValidationError(
      `channel: trajectory ${trajectory.id} is in channel '${trajectory.channel}'; completing it does not move it`,
      'channel',
    );
}
