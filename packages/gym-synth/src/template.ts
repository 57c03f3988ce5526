import type { CATEGORIES, Check, ReferenceAction, TaskFile } from '@stepwise/gym';
import type { z } from 'zod';
import { FIRST_NAMES, LAST_NAMES } from './people.js';
import type { Persona } from './personas.js';
import type { Rng } from './rng.js';

/*
 * A task template: one operation of one category (say, "aggregate sales by region"). `build` draws
 * its parameters and data from the context's seeded stream and returns the prompt, the input files,
 * the checks (expected values computed here, from the drawn data) and the reference actions (tool
 * calls that solve the task the way an agent would: read, compute, write, check).
 */

export type Category = (typeof CATEGORIES)[number];
export type CheckInput = z.input<typeof Check>;
export type TaskFileInput = z.input<typeof TaskFile>;

export interface TemplateContext {
  rng: Rng;
  persona: Persona;
}

export interface TaskDraft {
  /** The prompt without its closing sentence (synthesize adds "All file paths are relative ..."). */
  prompt: string;
  files: TaskFileInput[];
  checks: CheckInput[];
  actions: ReferenceAction[];
  skills: string[];
  difficulty: 'easy' | 'medium' | 'hard';
  /** The drawn parameters worth keeping in the task's provenance. */
  params: Record<string, unknown>;
}

export interface TaskTemplate {
  /** `<category slug>.<operation>`, stable: it is recorded in every task's provenance. */
  id: string;
  category: Category;
  /** One line for docs and the manifest. */
  summary: string;
  build(ctx: TemplateContext): TaskDraft;
}

/**
 * A task family as data: what it is (id, category, summary, difficulty, skills) and the pieces of one
 * of its tasks, each a small function of the data `draw` took from the seeded stream. `family` turns it
 * into a template; the pieces run in a fixed order (draw, prompt, late, files, checks, reference,
 * params), and only `draw`, the prompt's composition and `late` read the stream, so the same seed gives
 * the same task.
 */
export interface TaskFamily<D, L extends object = Record<never, never>> {
  id: string;
  category: Category;
  summary: string;
  difficulty: TaskDraft['difficulty'];
  skills: string[];
  /** The task's parameters and data, drawn from `ctx.rng`. */
  draw(ctx: TemplateContext): D;
  /** The prompt's parts; `composePrompt` draws its heading style after `draw`. */
  prompt(data: D, ctx: TemplateContext): PromptParts;
  /** Draws made after the prompt's composition (which items the checks test, a shuffle), merged into the data. */
  late?(data: D, rng: Rng): L;
  files(data: D & L): TaskFileInput[];
  /** Expected values computed from the drawn data. */
  checks(data: D & L): CheckInput[];
  /** Tool calls that solve the task the way an agent would: read, compute, write, check. */
  reference(data: D & L): ReferenceAction[];
  /** The drawn parameters worth keeping in the task's provenance. */
  params(data: D & L): Record<string, unknown>;
}

/** The template of a declared family. */
export function family<D, L extends object = Record<never, never>>(spec: TaskFamily<D, L>): TaskTemplate {
  return {
    id: spec.id,
    category: spec.category,
    summary: spec.summary,
    build(ctx) {
      const drawn = spec.draw(ctx);
      const prompt = composePrompt(ctx.rng, spec.prompt(drawn, ctx));
      const data = { ...drawn, ...spec.late?.(drawn, ctx.rng) } as D & L;
      return {
        prompt,
        files: spec.files(data),
        checks: spec.checks(data),
        actions: spec.reference(data),
        skills: spec.skills,
        difficulty: spec.difficulty,
        params: spec.params(data),
      };
    },
  };
}

// ---- people -------------------------------------------------------------------------------------

/** `k` distinct given names. */
export function givenNames(rng: Rng, k: number): string[] {
  return rng.sample(FIRST_NAMES, k);
}

/** `k` distinct "Given Family" names (given names distinct too, so either identifies a person). */
export function fullNames(rng: Rng, k: number): string[] {
  const first = rng.sample(FIRST_NAMES, k);
  const last = rng.sample(LAST_NAMES, k);
  return first.map((f, i) => `${f} ${last[i]}`);
}

// ---- checks -------------------------------------------------------------------------------------
// Every check must fail on the untouched workspace and on an empty placeholder of each output, so
// "exists" is `word_count >= 1` (exists and is not empty) and no check asserts an absence in an output.

export const check = {
  nonEmpty: (name: string, path: string): CheckInput => ({ kind: 'word_count', name, path, min: 1 }),
  words: (name: string, path: string, min: number, max?: number): CheckInput => ({
    kind: 'word_count',
    name,
    path,
    min,
    ...(max === undefined ? {} : { max }),
  }),
  parses: (name: string, path: string, format: 'json' | 'csv'): CheckInput => ({
    kind: 'parses',
    name,
    path,
    format,
  }),
  columns: (name: string, path: string, columns: string[]): CheckInput => ({
    kind: 'csv_columns',
    name,
    path,
    columns,
    ordered: true,
  }),
  rows: (
    name: string,
    path: string,
    columns: string[],
    expected: string[][],
    ordered: boolean,
  ): CheckInput => {
    if (expected.length === 0) throw new Error(`${name}: rows_match needs at least one expected row`);
    return { kind: 'rows_match', name, path, columns, expected, ordered };
  },
  keys: (name: string, path: string, keys: string[]): CheckInput => ({ kind: 'json_keys', name, path, keys }),
  value: (
    name: string,
    path: string,
    pointer: string,
    expected: unknown,
    tolerance?: number,
  ): CheckInput => ({
    kind: 'json_value',
    name,
    path,
    pointer,
    expected,
    ...(tolerance === undefined ? {} : { tolerance }),
  }),
  contains: (name: string, path: string, text: string, ignoreCase = false): CheckInput => ({
    kind: 'text_contains',
    name,
    path,
    pattern: text,
    regex: false,
    ignoreCase,
  }),
  matches: (name: string, path: string, regex: string, ignoreCase = false): CheckInput => ({
    kind: 'text_contains',
    name,
    path,
    pattern: regex,
    regex: true,
    ignoreCase,
  }),
  /** Present in an input file now; its absence shows the agent changed that file. */
  gone: (name: string, path: string, text: string): CheckInput => ({
    kind: 'text_contains',
    name,
    path,
    pattern: text,
    absent: true,
  }),
  command: (name: string, command: string, exitCode = 0): CheckInput => ({
    kind: 'command',
    name,
    command,
    exitCode,
  }),
};

// ---- reference actions --------------------------------------------------------------------------

export const act = {
  read: (path: string): ReferenceAction => ({ name: 'read', arguments: { path } }),
  ls: (path?: string): ReferenceAction => ({ name: 'ls', arguments: path === undefined ? {} : { path } }),
  write: (path: string, content: string): ReferenceAction => ({
    name: 'write',
    arguments: { path, content },
  }),
  edit: (path: string, oldText: string, newText: string): ReferenceAction => ({
    name: 'edit',
    arguments: { path, oldText, newText },
  }),
  exec: (command: string): ReferenceAction => ({ name: 'exec', arguments: { command } }),
  /** A Python script run from the workspace root (a quoted heredoc: the shell expands nothing in it). */
  python: (script: string): ReferenceAction => ({
    name: 'exec',
    arguments: { command: `python3 - <<'PY'\n${script.trim()}\nPY` },
  }),
};

// ---- prompts ------------------------------------------------------------------------------------

export interface PromptParts {
  /** The opening: who asks and what for. */
  opening: string;
  inputs: Array<[path: string, description: string]>;
  steps: string[];
  outputs: Array<[path: string, description: string]>;
  /** Closing remarks before the standard last sentence. */
  notes?: string[];
}

const INPUT_HEADINGS = ['Inputs (do not modify):', 'Input files:', 'You will find the data here:'];
const STEP_HEADINGS = ['Requirements:', 'What to do:', 'Rules:'];
const OUTPUT_HEADINGS = ['Deliverables:', 'Outputs:', 'Write these files:'];

/** A ClawGym-style prompt: opening, inputs, numbered requirements, exact output paths. */
export function composePrompt(rng: Rng, parts: PromptParts): string {
  const style = rng.int(0, INPUT_HEADINGS.length - 1);
  const lines: string[] = [parts.opening.trim(), ''];
  if (parts.inputs.length > 0) {
    lines.push(INPUT_HEADINGS[style]!);
    for (const [path, description] of parts.inputs)
      lines.push(`- ${path}${description ? ` — ${description}` : ''}`);
    lines.push('');
  }
  lines.push(STEP_HEADINGS[style]!);
  parts.steps.forEach((step, i) => {
    lines.push(`${i + 1}) ${step}`);
  });
  lines.push('');
  lines.push(OUTPUT_HEADINGS[style]!);
  for (const [path, description] of parts.outputs) lines.push(`- ${path} — ${description}`);
  if (parts.notes && parts.notes.length > 0) lines.push('', ...parts.notes);
  return lines.join('\n');
}

/** Python that reads a CSV into a list of dicts (stdlib only). */
export const PY_READ_CSV = `import csv, json
def read_csv(path):
    with open(path, newline='', encoding='utf-8') as f:
        return list(csv.DictReader(f))
def write_csv(path, header, rows):
    import os
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w', newline='', encoding='utf-8') as f:
        w = csv.writer(f, lineterminator='\\n')
        w.writerow(header)
        w.writerows(rows)
def write_json(path, value):
    import os
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        json.dump(value, f, indent=2)
        f.write('\\n')
def write_text(path, text):
    import os
    os.makedirs(os.path.dirname(path) or '.', exist_ok=True)
    with open(path, 'w', encoding='utf-8') as f:
        f.write(text)`;
