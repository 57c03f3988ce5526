import { z } from 'zod';
import { ClientId, type LabelInput, MAX_STEP_INDEX, Quality } from '../../../domain/index.js';
import type { CurrentLabel } from '../../../store/store.js';

/*
 * The curation forms (form-encoded POSTs) turned into labels. Blank fields mean "leave as it is", so
 * a form never clears what it does not mention; every mistake is reported by field name and nothing
 * is written when there is one.
 */

export const AUTHOR = 'dashboard';
const MAX_TAGS = 32;

type FormBody = Record<string, string | File | (string | File)[]>;

/** A form field's string values (repeated fields arrive as arrays; files are not expected). */
export function values(body: FormBody, key: string): string[] {
  const v = body[key];
  if (v === undefined) return [];
  return (Array.isArray(v) ? v : [v]).filter((x): x is string => typeof x === 'string');
}
const first = (body: FormBody, key: string) => values(body, key)[0]?.trim() ?? '';

/** Comma-separated tags: trimmed, blanks dropped, duplicates merged; each checked like the API does. */
export function parseTags(text: string, field: string, errors: string[]): string[] {
  const tags = [
    ...new Set(
      text
        .split(',')
        .map((t) => t.trim())
        .filter((t) => t !== ''),
    ),
  ];
  const long = tags.find((t) => t.length > 64);
  if (long !== undefined) errors.push(`${field}: tag "${long.slice(0, 20)}…" is longer than 64 characters`);
  if (tags.length > MAX_TAGS) errors.push(`${field}: at most ${MAX_TAGS} tags`);
  return tags;
}

/** What the trajectory page's form asked for, echoed back into it when it must be fixed. */
export interface LabelFormValues {
  steps: string[];
  quality: string;
  trainable: string;
  tags: string;
  tagMode: string;
  note: string;
}

export function labelFormValues(body: FormBody): LabelFormValues {
  return {
    steps: values(body, 'step'),
    quality: first(body, 'quality'),
    trainable: first(body, 'trainable'),
    tags: first(body, 'tags'),
    tagMode: first(body, 'tag_mode') || 'add',
    note: values(body, 'note')[0] ?? '',
  };
}

/** A step index as the store keys them (whether the step exists is the store's to say). */
export const isStepIndex = (n: number) => Number.isInteger(n) && n >= 0 && n <= MAX_STEP_INDEX;

const QualityChoice = z.enum(['', 'keep', 'clear', ...Quality.options]);
const TrainableChoice = z.enum(['', 'keep', 'yes', 'no', 'clear']);
const TagMode = z.enum(['add', 'replace', 'remove']);

/**
 * Labels for the trajectory page's form: one per chosen step, or one for the whole trajectory when no
 * step is chosen. Tags are added to, removed from or replace each target's current tags.
 */
export function labelsFromForm(
  trajectoryId: string,
  form: LabelFormValues,
  isStepIndex: (n: number) => boolean,
  current: readonly CurrentLabel[],
): { labels: LabelInput[]; errors: string[] } {
  const errors: string[] = [];
  const targets: (number | null)[] = [];
  for (const raw of form.steps) {
    const n = /^\d+$/.test(raw) ? Number(raw) : Number.NaN;
    if (!isStepIndex(n)) errors.push(`Steps (step): ${JSON.stringify(raw)} is not a step index`);
    else if (!targets.includes(n)) targets.push(n);
  }
  if (targets.length === 0) targets.push(null);

  const quality = QualityChoice.safeParse(form.quality);
  if (!quality.success) errors.push(`Quality (quality): must be one of ${QualityChoice.options.join(', ')}`);
  const trainable = TrainableChoice.safeParse(form.trainable);
  if (!trainable.success) errors.push('Trainable (trainable): must be keep, yes, no or clear');
  const mode = TagMode.safeParse(form.tagMode);
  if (!mode.success) errors.push('Tags (tag_mode): must be add, replace or remove');
  const tags = parseTags(form.tags, 'Tags (tags)', errors);
  if (form.note.length > 4000) errors.push('Note (note): must be at most 4000 characters');
  if (errors.length > 0) return { labels: [], errors };

  const patch: Omit<LabelInput, 'trajectory_uid'> = { author: AUTHOR };
  const q = quality.data!;
  if (q === 'clear') patch.quality = null;
  else if (q !== '' && q !== 'keep') patch.quality = q;
  const t = trainable.data!;
  if (t === 'clear') patch.trainable = null;
  else if (t === 'yes' || t === 'no') patch.trainable = t === 'yes';
  if (form.note.trim() !== '') patch.note = form.note.trim();
  const tagMode = mode.data!;
  const touchesTags = tags.length > 0 || tagMode === 'replace';
  if (!touchesTags && Object.keys(patch).length === 1)
    return { labels: [], errors: ['Nothing to change: choose a quality, trainable, tags or a note.'] };

  const labels: LabelInput[] = [];
  for (const target of targets) {
    const label: LabelInput = { trajectory_uid: trajectoryId, ...patch };
    if (target !== null) label.step_index = target;
    if (touchesTags) {
      const have = current.find((l) => l.stepIndex === target)?.tags ?? [];
      const next =
        tagMode === 'replace'
          ? tags
          : tagMode === 'add'
            ? [...new Set([...have, ...tags])]
            : have.filter((x) => !tags.includes(x));
      if (next.length > MAX_TAGS) {
        errors.push(
          `Tags (tags): ${target === null ? 'the trajectory' : `step ${target}`} would have more than ${MAX_TAGS} tags`,
        );
        continue;
      }
      label.tags = next;
    }
    labels.push(label);
  }
  return errors.length > 0 ? { labels: [], errors } : { labels, errors };
}

export const BULK_ACTIONS = ['untrainable', 'trainable', 'tag'] as const;

export interface BulkRequest {
  ids: string[];
  action: (typeof BULK_ACTIONS)[number];
  tag: string | null;
  back: string;
}

/** Only a list URL is a place to return to. */
export function safeListUrl(back: string): string {
  return /^\/dashboard\/trajectories(\?[^#\s]*)?$/.test(back) ? back : '/dashboard/trajectories';
}

/** The list page's bulk form: the chosen trajectories and what to do to all of them. */
export function parseBulk(body: FormBody): { request: BulkRequest; errors: string[] } {
  const errors: string[] = [];
  const back = safeListUrl(first(body, 'back'));
  const ids = [...new Set(values(body, 'id'))];
  if (ids.length === 0) errors.push('Trajectories (id): choose at least one row');
  if (ids.length > 500) errors.push('Trajectories (id): at most 500 at once');
  const bad = ids.find((id) => !ClientId.safeParse(id).success);
  if (bad !== undefined)
    errors.push(`Trajectories (id): ${JSON.stringify(bad.slice(0, 40))} is not a trajectory id`);
  const actionText = first(body, 'action');
  const action = (BULK_ACTIONS as readonly string[]).includes(actionText)
    ? (actionText as BulkRequest['action'])
    : null;
  if (action === null) errors.push(`Action (action): must be one of ${BULK_ACTIONS.join(', ')}`);
  let tag: string | null = null;
  if (action === 'tag') {
    const tags = parseTags(first(body, 'tag'), 'Tag (tag)', errors);
    if (tags.length !== 1) errors.push('Tag (tag): give exactly one tag to add');
    else tag = tags[0]!;
  }
  return { request: { ids, action: action ?? 'trainable', tag, back }, errors };
}

/** The labels a bulk request writes (tags are added to each trajectory's current ones). */
export function bulkLabels(request: BulkRequest, currentTags: ReadonlyMap<string, string[]>): LabelInput[] {
  return request.ids.map((id): LabelInput => {
    if (request.action === 'tag') {
      const have = currentTags.get(id) ?? [];
      return { trajectory_uid: id, tags: [...new Set([...have, request.tag!])], author: AUTHOR };
    }
    return { trajectory_uid: id, trainable: request.action === 'trainable', author: AUTHOR };
  });
}
