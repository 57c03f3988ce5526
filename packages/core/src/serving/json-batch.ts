import {
  type BatchCurationWire,
  type BatchJson,
  type StepLabelOut,
  signalToWire,
  stepToWire,
  type TrajectoryRowJson,
  type TrajectoryRowsBatchJson,
} from '../domain/index.js';
import type { LeasedBatch } from '../pool/types.js';
import type { CurrentLabel } from '../store/store.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import { isOffPolicy, needsLogprobRecompute, trainingPrompt } from './off-policy.js';
import { type PackingWire, packedResponseValues, packingToWire, packPrefixTree } from './packing.js';
import { stitchTrajectory, type TrajectoryRow } from './trajectory-rows.js';
import { type PartialRollouts, responseLossMask, responseVersions } from './versions.js';

// The wire's types are its schema's (domain/wire-batch.ts); kept importable from here.
export type { BatchCurationWire, BatchJson, StepLabelOut, TrajectoryRowJson, TrajectoryRowsBatchJson };

type TrajectoryJson = BatchJson['groups'][number]['trajectories'][number];

type GroupJson<Row> = Omit<BatchJson['groups'][number], 'trajectories'> & {
  trajectories: (Omit<TrajectoryJson, 'steps'> & { steps: Row[] })[];
};

export interface JsonBatchOptions {
  advantage?: AdvantageEstimator;
  pack?: 'prefix_tree';
  /** with `pack`: merge identical response prefixes across rollouts (Claw-R1's rule, docs/serving.md) */
  shareResponses?: boolean;
  /** How many guided steps the lease left out for want of a training prompt (reported as is). */
  untrainableSteps?: number;
  /** The channel's `partial_rollouts`: said on the batch, applied to stitched rows and packings. */
  partialRollouts?: PartialRollouts;
}

/** What curation did while this batch was leased, with reward metrics over kept and dropped data. */
export function batchCuration(batch: LeasedBatch): BatchCurationWire {
  const kept = batch.groups.flatMap((g) => g.trajectories.map((t) => t.trajectory.reward));
  const dropped = [
    ...batch.groups.flatMap((g) => (g.excluded ?? []).map((e) => e.reward)),
    ...(batch.dropped ?? []).flatMap((d) => d.rewards),
  ];
  const tally = (rewards: readonly (number | null)[]) => {
    const known = rewards.filter((r): r is number => r !== null);
    return {
      trajectories: rewards.length,
      mean_reward: known.length === 0 ? null : known.reduce((a, b) => a + b, 0) / known.length,
    };
  };
  return {
    dropped_groups: (batch.dropped ?? []).map((d) => ({
      group_id: d.groupId,
      reason: d.reason,
      rewards: d.rewards,
    })),
    metrics: { kept: tally(kept), dropped: tally(dropped), all: tally([...kept, ...dropped]) },
  };
}

function labelOut(label: CurrentLabel | undefined): StepLabelOut | null {
  if (!label) return null;
  return { quality: label.quality, tags: label.tags, note: label.note };
}

/**
 * The `json` batch format: groups → trajectories → steps in wire form, with curation labels, the
 * trajectories' current signals and, when asked, advantages and each group's prefix-tree packing.
 */
export function batchToJson(batch: LeasedBatch, options: JsonBatchOptions = {}): BatchJson {
  return buildJson(batch, options, (t, advantage) => {
    const byStep = new Map(t.labels.map((l) => [l.stepIndex, l]));
    return t.steps.map((s) => ({
      ...stepToWire(s),
      label: labelOut(byStep.get(s.index)),
      ...(advantage === undefined ? {} : { advantage }),
    }));
  });
}

function trajectoryRowToWire(row: TrajectoryRow, advantage: number | undefined): TrajectoryRowJson {
  return {
    first_step: row.firstStep,
    last_step: row.lastStep,
    input_ids: row.tokens,
    loss_mask: Array.from(row.lossMask),
    versions: Array.from(row.versions),
    logprobs: row.hasLogprobs ? Array.from(row.logprobs, (lp, i) => (row.lossMask[i] ? lp : null)) : null,
    prompt_length: row.promptLength,
    reward: row.reward,
    policy_version: row.policyVersion,
    ...(advantage === undefined ? {} : { advantage }),
    spans: row.spans.map((s) => ({
      step_index: s.stepIndex,
      prompt_start: s.promptStart,
      response_start: s.responseStart,
      response_end: s.responseEnd,
      reward: s.reward,
    })),
  };
}

/** The `json` format with `rows: "trajectory"`: each trajectory's steps stitched into rows. */
export function batchToTrajectoryRowsJson(
  batch: LeasedBatch,
  options: Omit<JsonBatchOptions, 'pack' | 'shareResponses'> = {},
): TrajectoryRowsBatchJson {
  const json = buildJson(batch, options, (t, advantage) =>
    stitchTrajectory(t.trajectory, t.steps, options.partialRollouts).map((row) =>
      trajectoryRowToWire(row, advantage),
    ),
  );
  return {
    ...json,
    rows: 'trajectory',
    groups: json.groups.map(({ packing: _, ...g }) => ({
      ...g,
      trajectories: g.trajectories.map(({ steps, ...t }) => ({ ...t, rows: steps })),
    })),
  };
}

function buildJson<Row>(
  batch: LeasedBatch,
  options: JsonBatchOptions,
  rowsOf: (t: LeasedBatch['groups'][number]['trajectories'][number], advantage: number | undefined) => Row[],
): Omit<BatchJson, 'groups'> & { groups: GroupJson<Row>[] } {
  return {
    lease_id: batch.lease.id,
    expires_at: batch.lease.expiresAt,
    consumer: batch.lease.consumer,
    channel: batch.lease.channel,
    policy_version: batch.policyVersion,
    curation: batchCuration(batch),
    untrainable_steps: options.untrainableSteps ?? 0,
    partial_rollouts: options.partialRollouts ?? 'train',
    groups: batch.groups.map((g) => {
      const advantages = options.advantage
        ? groupAdvantages(
            g.trajectories.map((t) => t.trajectory.reward),
            options.advantage,
          ).advantages
        : null;
      const group: GroupJson<Row> = {
        group_id: g.group.id,
        expected: g.group.expected,
        partial: g.group.partial,
        stale: g.stale,
        staleness: g.staleness,
        excluded: (g.excluded ?? []).map((e) => ({
          trajectory_uid: e.trajectoryId,
          reason: e.reason,
          reward: e.reward,
          ...(e.detail ? { detail: e.detail } : {}),
        })),
        trajectories: g.trajectories.map((t, i) => {
          const byStep = new Map(t.labels.map((l) => [l.stepIndex, l]));
          const advantage = advantages?.[i];
          return {
            trajectory_uid: t.trajectory.id,
            reward: t.trajectory.reward,
            status: t.trajectory.status,
            guided: t.trajectory.guided,
            guidance_k: t.trajectory.guidanceK,
            probe: t.trajectory.probe,
            derived_from: t.trajectory.derivedFrom,
            off_policy: isOffPolicy(t.trajectory),
            recompute_log_probs: needsLogprobRecompute(t.steps),
            metadata: t.trajectory.metadata,
            label: labelOut(byStep.get(null)),
            signals: t.signals.map(signalToWire),
            ...(advantage === undefined ? {} : { advantage }),
            steps: rowsOf(t, advantage),
          };
        }),
      };
      if (options.pack === 'prefix_tree') group.packing = groupPacking(g, options);
      return group;
    }),
  };
}

/**
 * A group's steps packed for the trainer's forward pass (a guided step's hint-free training prompt,
 * ActGuide), with each response token's policy version and loss mask in packed order.
 */
function groupPacking(g: LeasedBatch['groups'][number], options: JsonBatchOptions): PackingWire {
  const steps = g.trajectories.flatMap((t) =>
    t.steps.map((s) => ({ s, prompt: trainingPrompt(t.trajectory, s) })),
  );
  const packed = packPrefixTree(
    steps.map(({ s, prompt }) => ({ tokens: [...prompt, ...s.responseIds], promptLength: prompt.length })),
    { shareResponses: options.shareResponses },
  );
  const promptLengths = steps.map(({ prompt }) => prompt.length);
  const versions = packedResponseValues(
    packed,
    promptLengths,
    steps.map(({ s }) => responseVersions(s)),
    -1,
  );
  const mask = packedResponseValues(
    packed,
    promptLengths,
    steps.map(
      ({ s }) =>
        responseLossMask(s, options.partialRollouts ?? 'train') ??
        new Uint8Array(s.responseIds.length).fill(1),
    ),
    0,
  );
  const wire = packingToWire(packed);
  if (!packed.owners) return { ...wire, versions: Array.from(versions), loss_mask: Array.from(mask) };
  const { offsets } = packed.owners;
  // A shared position weighs as many times as the owners that train on it.
  const weight = Array.from(offsets.subarray(1), (end, j) => {
    let n = 0;
    for (let e = offsets[j]!; e < end; e++) n += mask[e]!;
    return n;
  });
  return {
    ...wire,
    owner_versions: Array.from(versions),
    owner_loss_mask: Array.from(mask),
    loss_weight: weight,
  };
}
