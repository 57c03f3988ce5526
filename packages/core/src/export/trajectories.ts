import { z } from 'zod';
import {
  ChannelName,
  ClientId,
  JsonObject,
  type Label,
  Quality,
  type StepOut,
  stepToWire,
  type TrajectoryOut,
  TrajectoryStatus,
  trajectoryToWire,
} from '../domain/index.js';
import type { CurrentLabel } from '../store/store.js';
import type { ExportContext } from './context.js';
import type { FileSink } from './sink.js';

/** A label as exported: the audit trail keeps every act; ids are the store's and are not kept. */
export interface LabelLine {
  step_index: number | null;
  quality: Label['quality'];
  trainable: boolean | null;
  tags: string[];
  note: string | null;
  author: string | null;
  created_at: number;
}

/** The curation state in force for the trajectory (step_index null) or one step. */
export interface LabelStateLine {
  step_index: number | null;
  quality: Label['quality'];
  trainable: boolean | null;
  tags: string[];
  note: string | null;
}

/** One line of `trajectories.jsonl`: everything the store knows about a trajectory. */
export interface TrajectoryLine extends TrajectoryOut {
  /** The size of the trajectory's prompt group, when known. */
  n_rollouts: number | null;
  labels: LabelLine[];
  label_state: LabelStateLine[];
  steps: StepOut[];
}

export function labelLine(l: Label): LabelLine {
  return {
    step_index: l.stepIndex,
    quality: l.quality,
    trainable: l.trainable,
    tags: l.tags,
    note: l.note,
    author: l.author,
    created_at: l.createdAt,
  };
}

export function labelStateLine(l: CurrentLabel): LabelStateLine {
  return { step_index: l.stepIndex, quality: l.quality, trainable: l.trainable, tags: l.tags, note: l.note };
}

/** Full-fidelity export: one line per trajectory with all its steps, labels and group size. */
export async function writeTrajectories(ctx: ExportContext, sink: FileSink): Promise<void> {
  for await (const trajectory of ctx.trajectories()) {
    const [steps, labels, state, group] = await Promise.all([
      ctx.capturedStepsOf(trajectory.id),
      ctx.store.getLabels(trajectory.id),
      ctx.store.getCurrentLabels(trajectory.id),
      ctx.store.getGroup(trajectory.channel, trajectory.groupId),
    ]);
    const line: TrajectoryLine = {
      ...trajectoryToWire(trajectory),
      n_rollouts: group?.expected ?? null,
      labels: labels.map(labelLine),
      label_state: state.map(labelStateLine).sort((a, b) => (a.step_index ?? -1) - (b.step_index ?? -1)),
      steps: steps.map(stepToWire),
    };
    sink.writeLine(line);
    ctx.onTrajectory();
  }
}

const Time = z.number().finite().min(0, 'must be >= 0');
const StepIndex = z.number().int('must be an integer').min(0, 'must be >= 0');

const LabelLineSchema = z.strictObject({
  step_index: StepIndex.nullable(),
  quality: Quality.nullable(),
  trainable: z.boolean().nullable(),
  tags: z.array(z.string().min(1).max(64)).max(32),
  note: z.string().max(4000).nullable(),
  author: z.string().max(128).nullable(),
  created_at: Time,
});

const LabelStateSchema = z.strictObject({
  step_index: StepIndex.nullable(),
  quality: Quality.nullable(),
  trainable: z.boolean().nullable(),
  tags: z.array(z.string()),
  note: z.string().nullable(),
});

/**
 * A `trajectories.jsonl` line as `stepwise import` reads it. Steps stay unknown here: each is checked
 * with the step API's own schema (`StepWire`) once its stored-only fields are taken off.
 */
export const TrajectoryLineSchema = z.strictObject({
  trajectory_uid: ClientId,
  prompt_uid: ClientId,
  channel: ChannelName,
  task_id: z.string().max(256).nullable(),
  status: TrajectoryStatus,
  reward: z.number().finite().nullable(),
  metadata: JsonObject,
  n_steps: z.number().int().min(0),
  prefix_breaks: z.number().int().min(0),
  created_at: Time,
  completed_at: Time.nullable(),
  guided: z.boolean(),
  guidance_k: z.number().int().nullable(),
  probe: z.boolean(),
  derived_from: z.string().nullable(),
  derivation: JsonObject.nullable(),
  n_rollouts: z.number().int().min(1).max(4096).nullable(),
  labels: z.array(LabelLineSchema),
  label_state: z.array(LabelStateSchema),
  steps: z.array(z.unknown()),
});
export type ParsedTrajectoryLine = z.infer<typeof TrajectoryLineSchema>;
