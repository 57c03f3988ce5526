import { createHash } from 'node:crypto';
import { ValidationError } from '@stepwise/core';
import { CATEGORIES, GymTask } from '@stepwise/gym';
import { PERSONAS } from './personas.js';
import { Rng } from './rng.js';
import type { Category, TaskTemplate } from './template.js';
import { ANALYSIS_TEMPLATES } from './templates/analysis.js';
import { CONTENT_TEMPLATES } from './templates/content.js';
import { PLANNING_TEMPLATES } from './templates/planning.js';
import { PRODUCTIVITY_TEMPLATES } from './templates/productivity.js';
import { SOFTWARE_TEMPLATES } from './templates/software.js';
import { SYSTEMS_TEMPLATES } from './templates/systems.js';

/*
 * Procedural task synthesis: persona × category × operation template, with generated input files,
 * check-DSL verifiers whose expected values are computed from the generated data, and reference
 * actions (tool calls) that solve each task. The same (n, seed) gives the same tasks, byte for byte.
 */

export { PERSONAS } from './personas.js';
export type { Category, TaskTemplate } from './template.js';

/** Bumped whenever a change to the generator changes its output for an existing seed. */
export const SYNTH_VERSION = 1;
export const MAX_TASKS = 100_000;
export const CLOSING_SENTENCE = 'All file paths are relative to the workspace directory.';

export const TEMPLATES: readonly TaskTemplate[] = [
  ...PRODUCTIVITY_TEMPLATES,
  ...SYSTEMS_TEMPLATES,
  ...ANALYSIS_TEMPLATES,
  ...CONTENT_TEMPLATES,
  ...PLANNING_TEMPLATES,
  ...SOFTWARE_TEMPLATES,
];

/** A seed: a non-negative integer, or a short label of letters, digits, ".", "_" and "-". */
export type SynthSeed = number | string;

export interface SynthOptions {
  n: number;
  seed: SynthSeed;
}

const SEED_LABEL = /^[A-Za-z0-9._-]{1,32}$/;
/** Attempts at a task that is not a duplicate of an earlier one before giving up. */
const MAX_ATTEMPTS = 25;

export function parseSeed(value: SynthSeed): SynthSeed {
  if (typeof value === 'number') {
    if (!Number.isSafeInteger(value) || value < 0)
      throw new ValidationError('seed must be a non-negative integer or a label', 'seed');
    return value;
  }
  if (/^\d+$/.test(value) && Number.isSafeInteger(Number(value))) return Number(value);
  if (!SEED_LABEL.test(value)) {
    throw new ValidationError(
      'seed must be a non-negative integer or up to 32 letters, digits, ".", "_" or "-"',
      'seed',
    );
  }
  return value;
}

export function templatesOf(category: Category): TaskTemplate[] {
  return TEMPLATES.filter((t) => t.category === category);
}

/** The key two tasks are duplicates under: their prompt and their files. */
export function dedupKey(task: Pick<GymTask, 'prompt' | 'files'>): string {
  const h = createHash('sha256');
  h.update(task.prompt);
  for (const f of [...task.files].sort((a, b) => (a.path < b.path ? -1 : 1))) {
    h.update('\0');
    h.update(f.path);
    h.update('\0');
    h.update(f.content);
  }
  return h.digest('hex');
}

/** sha256 over the tasks' JSONL lines: what `gym synth` records as the content hash. */
export function contentHash(tasks: readonly GymTask[]): string {
  const h = createHash('sha256');
  for (const t of tasks) h.update(`${JSON.stringify(t)}\n`);
  return h.digest('hex');
}

/**
 * `n` tasks for a seed. Task i belongs to category i mod 6, so every prefix is balanced; within a
 * category the templates take turns in a seed-shuffled order, so 6 × (templates per category) tasks
 * use every template. Personas and parameters are drawn per task.
 */
export function synthesize(options: SynthOptions, onTask?: (done: number, total: number) => void): GymTask[] {
  const { n } = options;
  if (!Number.isInteger(n) || n < 0 || n > MAX_TASKS)
    throw new ValidationError(`n must be an integer from 0 to ${MAX_TASKS}`, 'n');
  const seed = parseSeed(options.seed);
  const order = new Map<Category, TaskTemplate[]>(
    CATEGORIES.map((c) => [c, Rng.of('synth-order', SYNTH_VERSION, seed, c).shuffle(templatesOf(c))]),
  );
  // Prompts are unique too (not only prompt + files): the sim's reference policy finds a task by its prompt.
  const seen = new Set<string>();
  const prompts = new Set<string>();
  const tasks: GymTask[] = [];
  for (let i = 0; i < n; i++) {
    const category = CATEGORIES[i % CATEGORIES.length]!;
    const rotation = order.get(category)!;
    const template = rotation[Math.floor(i / CATEGORIES.length) % rotation.length]!;
    let task: GymTask | null = null;
    for (let attempt = 0; attempt < MAX_ATTEMPTS && task === null; attempt++) {
      const candidate = buildTask(template, seed, i, attempt);
      const key = dedupKey(candidate);
      if (seen.has(key) || prompts.has(candidate.prompt)) continue;
      seen.add(key);
      prompts.add(candidate.prompt);
      task = candidate;
    }
    if (task === null)
      throw new Error(`${template.id}: no new task after ${MAX_ATTEMPTS} attempts (index ${i})`);
    tasks.push(task);
    onTask?.(i + 1, n);
  }
  return tasks;
}

/** One task of a template for (seed, index, attempt); throws when the template breaks the contract. */
export function buildTask(template: TaskTemplate, seed: SynthSeed, index: number, attempt = 0): GymTask {
  const rng = Rng.of('synth-task', SYNTH_VERSION, seed, index, attempt);
  const persona = rng.pick(PERSONAS);
  const draft = template.build({ rng: rng.fork(template.id), persona });
  const names = draft.checks.map((c) => c.name);
  const twice = names.find((name, k) => names.indexOf(name) !== k);
  if (twice) throw new Error(`${template.id}: check name ${twice} used twice`);
  if (draft.actions.length < 2 || draft.actions.length > 6) {
    throw new Error(`${template.id}: ${draft.actions.length} reference actions (2 to 6 expected)`);
  }
  const parsed = GymTask.safeParse({
    id: `synth-${seed}-${String(index).padStart(5, '0')}-${template.id}`,
    prompt: `${draft.prompt}\n\n${CLOSING_SENTENCE}`,
    files: draft.files,
    verifier: { kind: 'checks', checks: draft.checks },
    // No rubric: the checks decide alone.
    weights: { code: 1, rubric: 0 },
    referenceActions: draft.actions,
    category: template.category,
    persona: persona.role,
    skills: draft.skills,
    difficulty: draft.difficulty,
    provenance: {
      source: 'synth',
      generator: 'stepwise-synth',
      version: SYNTH_VERSION,
      seed,
      index,
      attempt,
      template: template.id,
      persona: persona.id,
      params: draft.params,
    },
  });
  if (!parsed.success) {
    const issue = parsed.error.issues[0];
    throw new Error(`${template.id}: ${issue?.path.join('.')}: ${issue?.message}`);
  }
  return parsed.data;
}
