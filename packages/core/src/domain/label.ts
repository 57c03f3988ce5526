import { z } from 'zod';
import { ClientId } from './ids.js';
import { MAX_STEP_INDEX } from './step.js';

export const Quality = z.enum(['good', 'neutral', 'bad']);

/** Human curation of a step (step_index given) or a whole trajectory; applied when serving. */
export const LabelInput = z
  .strictObject({
    trajectory_uid: ClientId,
    step_index: z.number().int().min(0).max(MAX_STEP_INDEX).nullable().optional(),
    quality: Quality.nullable().optional(),
    trainable: z.boolean().nullable().optional(),
    tags: z.array(z.string().min(1).max(64)).max(32).optional(),
    note: z.string().max(4000).nullable().optional(),
    author: z.string().max(128).optional(),
  })
  .refine(
    (label) =>
      ['quality', 'trainable', 'tags', 'note'].some((k) => label[k as keyof typeof label] !== undefined),
    'must set at least one of quality, trainable, tags or note',
  );
export type LabelInput = z.infer<typeof LabelInput>;

export const LabelsBody = z.strictObject({
  labels: z.array(LabelInput).min(1, 'must hold at least one label').max(10_000),
});

/** One curation act, kept forever (the audit trail); the latest fields per target are in force. */
export const Label = z.object({
  id: z.number().int(),
  trajectoryId: z.string(),
  stepIndex: z.number().int().nullable(),
  quality: Quality.nullable(),
  trainable: z.boolean().nullable(),
  tags: z.array(z.string()),
  note: z.string().nullable(),
  author: z.string().nullable(),
  createdAt: z.number(),
});
export type Label = z.infer<typeof Label>;

/** The curation state in force for one step: its own label's fields, else its trajectory's. */
export interface LabelState {
  stepIndex: number | null;
  trainable: boolean | null;
}

/** A step is trained on unless its own label, or failing that its trajectory's, says otherwise. */
export function isStepTrainable(labels: readonly LabelState[], stepIndex: number): boolean {
  let trajectoryLevel: boolean | null = null;
  for (const label of labels) {
    if (label.stepIndex === stepIndex && label.trainable !== null) return label.trainable;
    if (label.stepIndex === null && label.trainable !== null) trajectoryLevel = label.trainable;
  }
  return trajectoryLevel ?? true;
}
