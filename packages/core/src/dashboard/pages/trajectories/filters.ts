import { z } from 'zod';
import {
  ChannelName,
  ClientId,
  MAX_POLICY_VERSION,
  Quality,
  TrajectoryStatus,
} from '../../../domain/index.js';
import type { TrajectoryQuery } from '../../../store/store.js';

/*
 * The list page's filters: a GET form whose fields arrive as strings (empty = not set). Every field
 * is checked and each bad one is reported by name, so the page shows all mistakes at once.
 */

export const PAGE_SIZE = 50;

const blank = (v: unknown) => (typeof v === 'string' && v.trim() === '' ? undefined : v);
const optional = <T extends z.ZodType>(schema: T) => z.preprocess(blank, schema.optional());
/** A select's "any" means the same as leaving the field out. */
const choice = <T extends z.ZodType>(schema: T) =>
  z.preprocess((v) => (v === 'any' ? undefined : blank(v)), schema.optional());
const NumberText = z
  .string()
  .trim()
  .regex(/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/, 'must be a number')
  .transform(Number);
const IntText = z
  .string()
  .trim()
  .regex(/^\d+$/, 'must be a whole number >= 0')
  .transform(Number)
  .pipe(z.number().max(Number.MAX_SAFE_INTEGER, 'is too large'));
const AnyYesNo = z.enum(['any', 'yes', 'no'], 'must be any, yes or no');

const ListForm = z.object({
  channel: optional(ChannelName),
  group: optional(ClientId),
  task: optional(z.string().max(256, 'must be at most 256 characters')),
  reward_min: optional(NumberText),
  reward_max: optional(NumberText),
  status: choice(z.enum(TrajectoryStatus.options, `must be one of ${TrajectoryStatus.options.join(', ')}`)),
  // No stored version is larger (PostgreSQL's integer column would refuse the filter with a 500).
  policy_version: optional(
    IntText.pipe(z.number().max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION}`)),
  ),
  tag: optional(z.string().max(64, 'must be at most 64 characters')),
  quality: choice(z.enum(Quality.options, `must be one of ${Quality.options.join(', ')}`)),
  trainable: optional(AnyYesNo),
  guided: optional(AnyYesNo),
  probe: optional(AnyYesNo),
  derived: optional(AnyYesNo),
  page: optional(IntText.pipe(z.number().min(1, 'must be >= 1'))),
});

/** What the form's fields are called on the page (error messages name them so). */
export const FIELD_LABELS: Record<string, string> = {
  channel: 'Channel',
  group: 'Group',
  task: 'Task',
  reward_min: 'Reward min',
  reward_max: 'Reward max',
  status: 'Status',
  policy_version: 'Policy version',
  tag: 'Label tag',
  quality: 'Quality',
  trainable: 'Trainable',
  guided: 'Guided',
  probe: 'Probe',
  derived: 'Derived',
  page: 'Page',
};

/** The form's raw values, echoed back into the inputs (even when invalid, so they can be fixed). */
export type ListFormValues = Partial<Record<keyof typeof FIELD_LABELS, string>>;

export type ListFilters =
  | { ok: true; query: TrajectoryQuery; page: number; values: ListFormValues }
  | { ok: false; errors: string[]; values: ListFormValues };

const yesNo = (v: 'any' | 'yes' | 'no' | undefined) => (v === 'yes' ? true : v === 'no' ? false : undefined);

export function parseListFilters(raw: Record<string, string>): ListFilters {
  const values: ListFormValues = {};
  for (const key of Object.keys(FIELD_LABELS)) if (raw[key] !== undefined) values[key] = raw[key];
  const result = ListForm.safeParse(raw);
  if (!result.success) {
    const seen = new Set<string>();
    const errors: string[] = [];
    for (const issue of result.error.issues) {
      const field = String(issue.path[0] ?? 'form');
      if (seen.has(field)) continue;
      seen.add(field);
      errors.push(`${FIELD_LABELS[field] ?? field} (${field}): ${issue.message}`);
    }
    return { ok: false, errors, values };
  }
  const f = result.data;
  if (f.reward_min !== undefined && f.reward_max !== undefined && f.reward_min > f.reward_max)
    return { ok: false, errors: ['Reward min (reward_min): must be <= reward max'], values };
  const page = f.page ?? 1;
  const query: TrajectoryQuery = { limit: PAGE_SIZE, offset: (page - 1) * PAGE_SIZE };
  if (f.channel !== undefined) query.channel = f.channel;
  if (f.group !== undefined) query.groupId = f.group;
  if (f.task !== undefined) query.taskId = f.task;
  if (f.reward_min !== undefined) query.rewardMin = f.reward_min;
  if (f.reward_max !== undefined) query.rewardMax = f.reward_max;
  if (f.status !== undefined) query.status = f.status;
  if (f.policy_version !== undefined) query.policyVersion = f.policy_version;
  if (f.tag !== undefined) query.tag = f.tag;
  if (f.quality !== undefined) query.quality = f.quality;
  const flags = { trainable: f.trainable, guided: f.guided, probe: f.probe, derived: f.derived } as const;
  for (const [key, v] of Object.entries(flags)) {
    const b = yesNo(v);
    if (b !== undefined) query[key as keyof typeof flags] = b;
  }
  return { ok: true, query, page, values };
}

/** The list URL for these form values on another page (other fields kept, blanks dropped). */
export function listUrl(values: ListFormValues, page: number): string {
  const params = new URLSearchParams();
  for (const [k, v] of Object.entries(values)) {
    if (k === 'page' || v === undefined || v === '' || v === 'any') continue;
    params.set(k, v);
  }
  if (page > 1) params.set('page', String(page));
  const q = params.toString();
  return q === '' ? '/dashboard/trajectories' : `/dashboard/trajectories?${q}`;
}
