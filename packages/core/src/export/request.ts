import { z } from 'zod';
import { ChannelName, ClientId, Quality, TrajectoryStatus } from '../domain/index.js';
import { ADVANTAGE_ESTIMATORS } from '../serving/advantages.js';
import type { TrajectoryScan } from '../store/store.js';

export const EXPORT_KINDS = ['sft', 'dpo', 'rl', 'trajectories'] as const;
export const ExportKind = z.enum(EXPORT_KINDS);
export type ExportKind = z.infer<typeof ExportKind>;

/** Options that belong to one kind only; naming them for another kind is an error, not a no-op. */
const KIND_OPTIONS: Record<string, ExportKind> = { min_margin: 'dpo', advantage: 'rl' };

/**
 * What to export: the kind, the filters common to every kind and the kind's own options. The CLI
 * builds this object from its flags and the HTTP route takes it as the body, so both reject the
 * same things with the same field names.
 */
export const ExportRequest = z
  .strictObject({
    kind: ExportKind,
    channel: ChannelName.optional(),
    /** `any` exports every status; the default is `complete` for training sets, `any` for `trajectories`. */
    status: z.enum([...TrajectoryStatus.options, 'any']).optional(),
    min_reward: z.number().finite().optional(),
    max_reward: z.number().finite().optional(),
    trainable: z.boolean().optional(),
    quality: Quality.optional(),
    tag: z.string().min(1, 'must not be empty').max(64).optional(),
    group: ClientId.optional(),
    task: z.string().min(1, 'must not be empty').max(256).optional(),
    /** dpo: the smallest reward gap between chosen and rejected (a pair always needs a gap > 0). */
    min_margin: z.number().finite().min(0, 'must be >= 0').optional(),
    /** rl: the group-relative advantage estimator. */
    advantage: z.enum(ADVANTAGE_ESTIMATORS).optional(),
  })
  .superRefine((r, ctx) => {
    if (r.min_reward !== undefined && r.max_reward !== undefined && r.min_reward > r.max_reward)
      ctx.addIssue({ code: 'custom', path: ['max_reward'], message: 'must be >= min_reward' });
    for (const [field, kind] of Object.entries(KIND_OPTIONS)) {
      if (r[field as keyof typeof r] !== undefined && r.kind !== kind)
        ctx.addIssue({ code: 'custom', path: [field], message: `applies to kind ${kind} only` });
    }
  });
export type ExportRequest = z.infer<typeof ExportRequest>;

/** The filters an export ran with, defaults applied: recorded in its manifest. */
export interface ResolvedFilters {
  channel: string | null;
  status: TrajectoryStatus | 'any';
  min_reward: number | null;
  max_reward: number | null;
  trainable: boolean | null;
  quality: z.infer<typeof Quality> | null;
  tag: string | null;
  group: string | null;
  task: string | null;
}

export function resolveFilters(r: ExportRequest): ResolvedFilters {
  return {
    channel: r.channel ?? null,
    status: r.status ?? (r.kind === 'trajectories' ? 'any' : 'complete'),
    min_reward: r.min_reward ?? null,
    max_reward: r.max_reward ?? null,
    trainable: r.trainable ?? null,
    quality: r.quality ?? null,
    tag: r.tag ?? null,
    group: r.group ?? null,
    task: r.task ?? null,
  };
}

/** The store query for the trajectories an export reads (without its cursor). */
export function scanQuery(f: ResolvedFilters): Omit<TrajectoryScan, 'after' | 'limit'> {
  const query: Omit<TrajectoryScan, 'after' | 'limit'> = {};
  if (f.channel !== null) query.channel = f.channel;
  if (f.status !== 'any') query.status = f.status;
  if (f.min_reward !== null) query.rewardMin = f.min_reward;
  if (f.max_reward !== null) query.rewardMax = f.max_reward;
  if (f.trainable !== null) query.trainable = f.trainable;
  if (f.quality !== null) query.quality = f.quality;
  if (f.tag !== null) query.tag = f.tag;
  if (f.group !== null) query.groupId = f.group;
  if (f.task !== null) query.taskId = f.task;
  return query;
}
