import { z } from 'zod';
import { Quality } from './label.js';
import { type Signal, SignalSource } from './signal.js';
import { type Step, TokenSource, ToolResult } from './step.js';

/*
 * The wire a trainer reads, as one schema for both languages: a leased batch in the `json` format
 * (steps, or stitched trajectory rows), with its steps, signals and labels. The TS types the serving
 * code writes are inferred from these schemas, tests parse real leases with them, and
 * `npm run gen:wire` writes them as JSON Schema (schema/wire.schema.json) and as the Python client's
 * dataclasses (clients/python/stepwise_client/wire.py). Every object is strict: a field the schema
 * does not name is a test failure, not a silent extra.
 */

const Json = z.record(z.string(), z.unknown());
const Ids = z.array(z.number().int());

export const StepOutWire = z
  .strictObject({
    trajectory_uid: z.string(),
    prompt_uid: z.string(),
    channel: z.string(),
    step_index: z.number().int(),
    prompt_ids: Ids,
    response_ids: Ids,
    reward: z.number().nullable(),
    policy_version: z.number().int(),
    is_last: z.boolean(),
    metadata: Json,
    /** The engine's logprob of each response token; null when the step came without them. */
    rollout_log_probs: z.array(z.number()).nullable(),
    /**
     * The policy version of each run of response tokens, `[version, count]` in order, for a step
     * whose generation spanned a weight switch; null: every token is policy_version's.
     */
    version_spans: z.array(z.tuple([z.number().int(), z.number().int()])).nullable(),
    token_source: TokenSource,
    finish_reason: z.string().nullable(),
    messages: z.array(Json).nullable(),
    tools: z.array(Json).nullable(),
    response_text: z.string().nullable(),
    tool_calls: z.array(Json).nullable(),
    tool_results: z
      .array(ToolResult.meta({ id: 'ToolResultOut', description: "A tool's output that followed the step." }))
      .nullable(),
    timings: z
      .strictObject({ latency_ms: z.number().nullable(), ttft_ms: z.number().nullable() })
      .meta({ id: 'StepTimingsOut', description: "The call's latency and time to first token, ms." }),
    engine_id: z.string().nullable(),
    /** A guided step's prompt without the hint; null for every other step. */
    training_prompt_ids: Ids.nullable(),
    /** MoE routing `[tokens][layers][top_k]` (Claw-R1's routing replay); null when not sent. */
    routed_experts: z.array(z.array(Ids)).nullable(),
    multi_modal_data: Json.nullable(),
    created_at: z.number(),
  })
  .meta({ id: 'StepOut', description: 'A captured step as a trainer or a query receives it.' });
export type StepOut = z.infer<typeof StepOutWire>;

/** A step in its wire form. */
export function stepToWire(step: Step): StepOut {
  return {
    trajectory_uid: step.trajectoryId,
    prompt_uid: step.groupId,
    channel: step.channel,
    step_index: step.index,
    prompt_ids: step.promptIds,
    response_ids: step.responseIds,
    reward: step.reward,
    policy_version: step.policyVersion,
    is_last: step.isLast,
    metadata: step.metadata,
    rollout_log_probs: step.responseLogprobs,
    version_spans: step.versionSpans,
    token_source: step.tokenSource,
    finish_reason: step.finishReason,
    messages: step.messages,
    tools: step.tools,
    response_text: step.responseText,
    tool_calls: step.toolCalls,
    tool_results: step.toolResults,
    timings: { latency_ms: step.latencyMs, ttft_ms: step.ttftMs },
    engine_id: step.engineId,
    training_prompt_ids: step.trainingPromptIds,
    routed_experts: step.routedExperts,
    multi_modal_data: step.multiModalData,
    created_at: step.createdAt,
  };
}

export const SignalOutWire = z
  .strictObject({
    trajectory_uid: z.string(),
    step_index: z.number().int().nullable(),
    name: z.string(),
    value: z.number(),
    source: SignalSource,
    version: z.string(),
    details: Json,
    created_at: z.number(),
  })
  .meta({ id: 'SignalOut', description: 'A reward or quality signal in force.' });
export type SignalOut = z.infer<typeof SignalOutWire>;

/** A signal in its wire form. */
export function signalToWire(s: Signal): SignalOut {
  return {
    trajectory_uid: s.trajectoryId,
    step_index: s.stepIndex,
    name: s.name,
    value: s.value,
    source: s.source,
    version: s.version,
    details: s.details,
    created_at: s.createdAt,
  };
}

export const StepLabelWire = z
  .strictObject({ quality: Quality.nullable(), tags: z.array(z.string()), note: z.string().nullable() })
  .meta({ id: 'StepLabel', description: 'The label in force on a step or a trajectory.' });
export type StepLabelOut = z.infer<typeof StepLabelWire>;

export const BatchStepWire = StepOutWire.extend({
  label: StepLabelWire.nullable(),
  advantage: z.number().optional(),
}).meta({
  id: 'BatchStep',
  description: 'A step of a leased batch, with its label and (when asked) advantage.',
});

export const PackingWire = z
  .strictObject({
    tokens: Ids,
    nodes: z.array(z.tuple([z.number().int(), z.number().int(), z.number().int()])),
    parents: Ids,
    sequences: z.array(Ids),
    position_ids: Ids,
    owner: Ids.optional(),
    /** Per packed token (with `owner`): the version that produced it as its owner's response token, -1 where none. */
    versions: Ids.optional(),
    /** Per packed token (with `owner`): 1 where its owner trains on it (0 on prompt-only and masked tokens). */
    loss_mask: Ids.optional(),
    owner_offsets: Ids.optional(),
    owner_ids: Ids.optional(),
    /** Beside `owner_ids` (`share_responses`): each owner's version of the token, and whether it trains on it. */
    owner_versions: Ids.optional(),
    owner_loss_mask: Ids.optional(),
    loss_weight: z.array(z.number()).optional(),
    ratio: z.number(),
    original_tokens: z.number().int(),
  })
  .meta({ id: 'Packing', description: "A group's steps merged into one prefix tree (`pack: prefix_tree`)." });
export type PackingWire = z.infer<typeof PackingWire>;

export const TrajectoryRowWire = z
  .strictObject({
    first_step: z.number().int(),
    last_step: z.number().int(),
    input_ids: Ids,
    loss_mask: Ids,
    /** Per token: the policy version that produced it; a prompt token has its step's `policy_version`. */
    versions: Ids,
    logprobs: z.array(z.number().nullable()).nullable(),
    prompt_length: z.number().int(),
    reward: z.number().nullable(),
    policy_version: z.number().int(),
    advantage: z.number().optional(),
    spans: z.array(
      z
        .strictObject({
          step_index: z.number().int(),
          prompt_start: z.number().int(),
          response_start: z.number().int(),
          response_end: z.number().int(),
          reward: z.number().nullable(),
        })
        .meta({ id: 'RowSpan', description: 'Where one covered step sits in a stitched row.' }),
    ),
  })
  .meta({ id: 'TrajectoryRow', description: 'One stitched row (`rows: "trajectory"`).' });
export type TrajectoryRowJson = z.infer<typeof TrajectoryRowWire>;

const trajectoryFields = {
  trajectory_uid: z.string(),
  reward: z.number().nullable(),
  status: z.string(),
  guided: z.boolean(),
  guidance_k: z.number().int().nullable(),
  probe: z.boolean(),
  derived_from: z.string().nullable(),
  /** Guided (train on `training_prompt_ids`, weigh by the prompt-swap ratio) or purified offline. */
  off_policy: z.boolean(),
  /** Some step comes without `rollout_log_probs`: the trainer recomputes them. */
  recompute_log_probs: z.boolean(),
  metadata: Json,
  label: StepLabelWire.nullable(),
  signals: z.array(SignalOutWire),
  advantage: z.number().optional(),
};

export const BatchTrajectoryWire = z
  .strictObject({ ...trajectoryFields, steps: z.array(BatchStepWire) })
  .meta({ id: 'BatchTrajectory', description: 'A trajectory of a leased batch, step by step.' });

export const RowsTrajectoryWire = z
  .strictObject({ ...trajectoryFields, rows: z.array(TrajectoryRowWire) })
  .meta({ id: 'RowsTrajectory', description: 'A trajectory of a leased batch, as stitched rows.' });

export const ExcludedWire = z
  .strictObject({
    trajectory_uid: z.string(),
    reason: z.string(),
    reward: z.number().nullable(),
    detail: Json.optional(),
  })
  .meta({ id: 'Excluded', description: "A trajectory the channel's curation did not serve, with why." });

const groupFields = {
  group_id: z.string(),
  expected: z.number().int().nullable(),
  partial: z.boolean(),
  stale: z.boolean(),
  staleness: z.number(),
  excluded: z.array(ExcludedWire),
};

export const BatchGroupWire = z
  .strictObject({
    ...groupFields,
    trajectories: z.array(BatchTrajectoryWire),
    packing: PackingWire.optional(),
  })
  .meta({ id: 'BatchGroup', description: 'A prompt group of a leased batch.' });

export const RowsGroupWire = z
  .strictObject({ ...groupFields, trajectories: z.array(RowsTrajectoryWire) })
  .meta({ id: 'RowsGroup', description: 'A prompt group of a `rows: "trajectory"` batch.' });

const Tally = z
  .strictObject({ trajectories: z.number().int(), mean_reward: z.number().nullable() })
  .meta({ id: 'RewardTally', description: 'Trajectories counted and their mean reward.' });

export const BatchCurationWire = z
  .strictObject({
    dropped_groups: z.array(
      z
        .strictObject({ group_id: z.string(), reason: z.string(), rewards: z.array(z.number().nullable()) })
        .meta({ id: 'DroppedGroup', description: 'A group curation dropped while the lease was filled.' }),
    ),
    metrics: z
      .strictObject({ kept: Tally, dropped: Tally, all: Tally })
      .meta({ id: 'CurationMetrics', description: 'Reward metrics over what was kept, dropped, and both.' }),
  })
  .meta({ id: 'BatchCuration', description: 'What curation did while the batch was leased.' });
export type BatchCurationWire = z.infer<typeof BatchCurationWire>;

const batchFields = {
  lease_id: z.string(),
  expires_at: z.number().int(),
  consumer: z.string(),
  channel: z.string(),
  policy_version: z.number().int(),
  curation: BatchCurationWire,
  /** Guided steps left out: no hint-free training prompt. */
  untrainable_steps: z.number().int(),
  /** The channel's setting: `mask` leaves the tokens a step generated before its last weight switch out of the loss. */
  partial_rollouts: z.enum(['train', 'mask']),
};

export const BatchJsonWire = z
  .strictObject({ ...batchFields, groups: z.array(BatchGroupWire) })
  .meta({ id: 'BatchJson', description: 'A leased batch in the `json` format, steps as captured.' });
export type BatchJson = z.infer<typeof BatchJsonWire>;

export const RowsBatchJsonWire = z
  .strictObject({ ...batchFields, rows: z.literal('trajectory'), groups: z.array(RowsGroupWire) })
  .meta({
    id: 'RowsBatchJson',
    description: 'A leased batch in the `json` format with `rows: "trajectory"`.',
  });
export type TrajectoryRowsBatchJson = z.infer<typeof RowsBatchJsonWire>;

/** The wire as one schema: the batch formats and a step and a signal at its root, every object named in `$defs`. */
export const WIRE = z.strictObject({
  batch: BatchJsonWire,
  rows_batch: RowsBatchJsonWire,
  step: StepOutWire,
  signal: SignalOutWire,
});
