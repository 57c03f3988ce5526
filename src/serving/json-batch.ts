import { type SignalOut, type StepOut, signalToWire, stepToWire } from '../domain/index.js';
import type { CurrentLabel, LeasedBatch } from '../store/store.js';
import { type AdvantageEstimator, groupAdvantages } from './advantages.js';
import { isOffPolicy, needsLogprobRecompute, trainingPrompt } from './off-policy.js';
import { type PackingWire, packingToWire, packPrefixTree } from './packing.js';

export interface StepLabelOut {
  quality: CurrentLabel['quality'];
  tags: string[];
  note: string | null;
}

export interface BatchJson {
  lease_id: string;
  expires_at: number;
  consumer: string;
  channel: string;
  policy_version: number;
  curation: BatchCurationWire;
  /** Guided steps left out: no hint-free training prompt (serving's off-policy.ts). */
  untrainable_steps: number;
  groups: {
    group_id: string;
    expected: number | null;
    partial: boolean;
    stale: boolean;
    staleness: number;
    /** Trajectories of the group that the channel's curation did not serve, with why. */
    excluded: {
      trajectory_uid: string;
      reason: string;
      reward: number | null;
      detail?: Record<string, unknown>;
    }[];
    trajectories: {
      trajectory_uid: string;
      reward: number | null;
      status: string;
      guided: boolean;
      guidance_k: number | null;
      probe: boolean;
      derived_from: string | null;
      /** Guided (train on `training_prompt_ids`, weigh by the prompt-swap ratio) or purified offline. */
      off_policy: boolean;
      /** Some step comes without `rollout_log_probs`: the trainer recomputes them. */
      recompute_log_probs: boolean;
      metadata: Record<string, unknown>;
      label: StepLabelOut | null;
      /** The signals in force (the latest per step, name and source), oldest first. */
      signals: SignalOut[];
      /** With `advantage`: the trajectory's advantage, also on each of its steps. */
      advantage?: number;
      steps: (StepOut & { label: StepLabelOut | null; advantage?: number })[];
    }[];
    /** With `pack: prefix_tree`: the group's steps (trajectory by trajectory) merged into one trie. */
    packing?: PackingWire;
  }[];
}

export interface BatchCurationWire {
  /** Groups curation dropped while this lease was filled (their places were refilled). */
  dropped_groups: { group_id: string; reason: string; rewards: (number | null)[] }[];
  /** Reward metrics of this batch over what was served, what curation left out, and both. */
  metrics: Record<'kept' | 'dropped' | 'all', { trajectories: number; mean_reward: number | null }>;
}

export interface JsonBatchOptions {
  advantage?: AdvantageEstimator;
  pack?: 'prefix_tree';
  /** with `pack`: merge identical response prefixes across rollouts (Claw-R1's rule, docs/serving.md) */
  shareResponses?: boolean;
  /** How many guided steps the lease left out for want of a training prompt (reported as is). */
  untrainableSteps?: number;
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
  return {
    lease_id: batch.lease.id,
    expires_at: batch.lease.expiresAt,
    consumer: batch.lease.consumer,
    channel: batch.lease.channel,
    policy_version: batch.policyVersion,
    curation: batchCuration(batch),
    untrainable_steps: options.untrainableSteps ?? 0,
    groups: batch.groups.map((g) => {
      const advantages = options.advantage
        ? groupAdvantages(
            g.trajectories.map((t) => t.trajectory.reward),
            options.advantage,
          ).advantages
        : null;
      const group: BatchJson['groups'][number] = {
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
            steps: t.steps.map((s) => ({
              ...stepToWire(s),
              label: labelOut(byStep.get(s.index)),
              ...(advantage === undefined ? {} : { advantage }),
            })),
          };
        }),
      };
      if (options.pack === 'prefix_tree') {
        // Packed for the trainer's forward pass: a guided step's hint-free training prompt (ActGuide).
        const inputs = g.trajectories.flatMap((t) =>
          t.steps.map((s) => {
            const prompt = trainingPrompt(t.trajectory, s);
            return { tokens: [...prompt, ...s.responseIds], promptLength: prompt.length };
          }),
        );
        group.packing = packingToWire(packPrefixTree(inputs, { shareResponses: options.shareResponses }));
      }
      return group;
    }),
  };
}
