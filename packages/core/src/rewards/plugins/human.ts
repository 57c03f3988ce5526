import { z } from 'zod';
import type { Signal } from '../../domain/index.js';
import type { DataPool } from '../../pool/data-pool.js';
import { definePlugin } from '../plugin.js';

// Human feedback computes nothing: people (and the gateway's implicit feedback) write `user_feedback` and
// `human_score` signals. docs/rewards.md#human-trajectory-source-human

export const USER_FEEDBACK_SIGNAL = 'user_feedback';
export const HUMAN_SCORE_SIGNAL = 'human_score';

export const humanPlugin = definePlugin(
  {
    name: 'human',
    version: '1',
    description:
      'Feedback written by people (thumbs, scores, corrections) and the implicit feedback of online sessions, as signals with source human; nothing is computed.',
    target: 'trajectory',
    source: 'human',
  },
  z.strictObject({}),
  () => null,
);

export const HumanFeedback = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('thumbs'), up: z.boolean() }),
  z.strictObject({
    kind: z.literal('score'),
    value: z.number().min(0, 'must be >= 0').max(1, 'must be <= 1'),
  }),
  z.strictObject({ kind: z.literal('correction'), text: z.string().max(10_000).default('') }),
]);
export type HumanFeedback = z.input<typeof HumanFeedback>;

export interface HumanFeedbackInput {
  trajectoryId: string;
  /** The step reacted to; null or absent: the whole trajectory. */
  stepIndex?: number | null;
  feedback: HumanFeedback;
  /** Who gave it (kept in details). */
  author?: string;
}

/** Records one piece of explicit human feedback as a `human` signal and returns it. */
export async function recordHumanFeedback(
  pool: Pick<DataPool, 'addSignals'>,
  input: HumanFeedbackInput,
): Promise<Signal> {
  const feedback = HumanFeedback.parse(input.feedback);
  const common = {
    trajectoryId: input.trajectoryId,
    stepIndex: input.stepIndex ?? null,
    source: 'human' as const,
  };
  const author = input.author === undefined ? {} : { author: input.author };
  const signal =
    feedback.kind === 'score'
      ? {
          ...common,
          name: HUMAN_SCORE_SIGNAL,
          value: feedback.value,
          details: { implicit: false, ...author },
        }
      : feedback.kind === 'thumbs'
        ? {
            ...common,
            name: USER_FEEDBACK_SIGNAL,
            value: feedback.up ? 1 : -1,
            details: { implicit: false, kind: feedback.up ? 'thumbs_up' : 'thumbs_down', ...author },
          }
        : {
            ...common,
            name: USER_FEEDBACK_SIGNAL,
            value: -1,
            details: { implicit: false, kind: 'correction', text: feedback.text, ...author },
          };
  const [added] = await pool.addSignals([signal]);
  return added!;
}
