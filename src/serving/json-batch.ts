import { type StepOut, stepToWire } from '../domain/index.js';
import type { CurrentLabel, LeasedBatch } from '../store/store.js';

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
  groups: {
    group_id: string;
    expected: number | null;
    partial: boolean;
    stale: boolean;
    staleness: number;
    trajectories: {
      trajectory_uid: string;
      reward: number | null;
      status: string;
      guided: boolean;
      guidance_k: number | null;
      probe: boolean;
      derived_from: string | null;
      metadata: Record<string, unknown>;
      label: StepLabelOut | null;
      steps: (StepOut & { label: StepLabelOut | null })[];
    }[];
  }[];
}

function labelOut(label: CurrentLabel | undefined): StepLabelOut | null {
  if (!label) return null;
  return { quality: label.quality, tags: label.tags, note: label.note };
}

/** The `json` batch format: groups → trajectories → steps in wire form, with curation labels. */
export function batchToJson(batch: LeasedBatch): BatchJson {
  return {
    lease_id: batch.lease.id,
    expires_at: batch.lease.expiresAt,
    consumer: batch.lease.consumer,
    channel: batch.lease.channel,
    policy_version: batch.policyVersion,
    groups: batch.groups.map((g) => ({
      group_id: g.group.id,
      expected: g.group.expected,
      partial: g.group.partial,
      stale: g.stale,
      staleness: g.staleness,
      trajectories: g.trajectories.map((t) => {
        const byStep = new Map(t.labels.map((l) => [l.stepIndex, l]));
        return {
          trajectory_uid: t.trajectory.id,
          reward: t.trajectory.reward,
          status: t.trajectory.status,
          guided: t.trajectory.guided,
          guidance_k: t.trajectory.guidanceK,
          probe: t.trajectory.probe,
          derived_from: t.trajectory.derivedFrom,
          metadata: t.trajectory.metadata,
          label: labelOut(byStep.get(null)),
          steps: t.steps.map((s) => ({ ...stepToWire(s), label: labelOut(byStep.get(s.index)) })),
        };
      }),
    })),
  };
}
