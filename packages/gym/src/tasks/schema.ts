import { z } from 'zod';

/*
 * A Stepwise gym task: what the agent is asked, the workspace it starts from, how its work is
 * verified, and (for synthesized tasks) the reference actions that solve it. The JSONL form is one
 * `GymTask` per line; the ClawGym folder form (`data_entry.json`, `input_files/`, `reward/`) converts
 * to and from it without loss (packages/gym/src/tasks/clawgym.ts).
 */

export const DEFAULT_MOUNT_DIR = '/root/.openclaw/workspace';

/** ClawGym-Bench's six categories. ClawGym's own tasks may carry other strings (often ''). */
export const CATEGORIES = [
  'Productivity & Collaboration',
  'Systems & Automation',
  'Analysis & Reasoning',
  'Content & Domain',
  'Planning & Knowledge',
  'Software Development',
] as const;

/** A file of the workspace or of the verifier, by path relative to its root. */
export const TaskFile = z.strictObject({
  path: z
    .string()
    .min(1)
    .max(1024)
    .refine((p) => !p.startsWith('/') && !p.split('/').includes('..') && !p.includes('\0'), {
      message: 'must be a relative path without ..',
    }),
  /** utf8 text, or base64 for bytes that are not valid UTF-8. */
  encoding: z.enum(['utf8', 'base64']).default('utf8'),
  content: z.string(),
  /** Unix permission bits when they matter (e.g. an executable script); absent: 0644. */
  mode: z.number().int().min(0).max(0o7777).optional(),
});
export type TaskFile = z.infer<typeof TaskFile>;

/** One tool call of a reference solution, as an agent would make it. */
export const ReferenceAction = z.strictObject({
  name: z.string().min(1).max(64),
  arguments: z.record(z.string(), z.unknown()),
});
export type ReferenceAction = z.infer<typeof ReferenceAction>;

/*
 * The typed check DSL for native tasks. Every check has a unique `name` (its sub-score's key) and
 * scores 0 or 1 (`rows_match` may score the fraction of matching rows); the code score is the mean.
 * Paths are relative to the workspace root.
 */
const name = z.string().min(1).max(128);
const path = z.string().min(1).max(1024);
export const Check = z.discriminatedUnion('kind', [
  z.strictObject({ kind: z.literal('file_exists'), name, path }),
  z.strictObject({ kind: z.literal('file_absent'), name, path }),
  /** Parses as JSON / CSV (with a header row). */
  z.strictObject({ kind: z.literal('parses'), name, path, format: z.enum(['json', 'csv']) }),
  /** A CSV's header equals `columns` (in order when `ordered`), or a JSON object has `keys`. */
  z.strictObject({
    kind: z.literal('csv_columns'),
    name,
    path,
    columns: z.array(z.string()).min(1),
    ordered: z.boolean().default(true),
  }),
  z.strictObject({ kind: z.literal('json_keys'), name, path, keys: z.array(z.string()).min(1) }),
  /**
   * The value at a JSON pointer (RFC 6901, e.g. `/total` or `/by_role/Sponsor`) equals `expected`
   * (recomputed from the inputs when the task was made); numbers compare within `tolerance`.
   */
  z.strictObject({
    kind: z.literal('json_value'),
    name,
    path,
    pointer: z.string(),
    expected: z.unknown(),
    tolerance: z.number().min(0).default(1e-6),
  }),
  /** The CSV's rows (as objects of the listed columns, values compared as trimmed strings). */
  z.strictObject({
    kind: z.literal('rows_match'),
    name,
    path,
    columns: z.array(z.string()).min(1),
    expected: z.array(z.array(z.string())),
    /** Rows must appear in this order (else compared as a multiset). */
    ordered: z.boolean().default(false),
  }),
  /** A regex (JavaScript syntax) or literal is present / absent in a text file. */
  z.strictObject({
    kind: z.literal('text_contains'),
    name,
    path,
    pattern: z.string().min(1),
    regex: z.boolean().default(false),
    absent: z.boolean().default(false),
    ignoreCase: z.boolean().default(false),
  }),
  z.strictObject({
    kind: z.literal('word_count'),
    name,
    path,
    min: z.number().int().min(0).optional(),
    max: z.number().int().min(0).optional(),
  }),
  /** A command run in the sandbox, in the workspace, exits with `exitCode` (default 0). */
  z.strictObject({
    kind: z.literal('command'),
    name,
    command: z.string().min(1),
    exitCode: z.number().int().default(0),
    timeoutMs: z.number().int().min(1).max(600_000).default(60_000),
  }),
]);
export type Check = z.infer<typeof Check>;

/** What each of the judge's bands means for one rule (ClawGym-SynData's `scores`). */
export const RubricBands = z.strictObject({
  '0': z.string().min(1),
  '0.25': z.string().min(1),
  '0.5': z.string().min(1),
  '0.75': z.string().min(1),
  '1': z.string().min(1),
});
export type RubricBands = z.infer<typeof RubricBands>;

/** An LLM-judge rule: the judge scores it in 5 bands (0, 0.25, 0.5, 0.75, 1). */
export const RubricRule = z.strictObject({
  name,
  description: z.string().min(1),
  weight: z.number().min(0).default(1),
  /** The output file the rule judges, relative to the workspace (ClawGym-SynData's `file_path`). */
  filePath: z.string().min(1).optional(),
  /** What each band means for this rule; without them the judge is given the generic scale. */
  scores: RubricBands.optional(),
});
export type RubricRule = z.infer<typeof RubricRule>;

export const Verifier = z.discriminatedUnion('kind', [
  /** ClawGym's: the `reward/` folder, copied in after the episode; its entry prints the score last. */
  z.strictObject({
    kind: z.literal('script'),
    files: z.array(TaskFile).min(1),
    entry: z.string().default('reward/reward.sh'),
    timeoutMs: z.number().int().min(1).max(3_600_000).default(120_000),
  }),
  z.strictObject({ kind: z.literal('checks'), checks: z.array(Check).min(1) }),
  /** No code verifier (ClawGym-SynData's rubric-only tasks): the code score is 0, the judge scores. */
  z.strictObject({ kind: z.literal('none') }),
]);
export type Verifier = z.infer<typeof Verifier>;

export const GymTask = z.strictObject({
  id: z
    .string()
    .min(1)
    .max(128)
    .regex(/^[A-Za-z0-9._-]+$/, 'letters, digits, ".", "_" and "-" only'),
  prompt: z.string().min(1),
  files: z.array(TaskFile).default([]),
  /** Where the workspace appears inside the sandbox (and what the prompt's paths are relative to). */
  mountDir: z.string().startsWith('/').default(DEFAULT_MOUNT_DIR),
  verifier: Verifier,
  /** Scored by an LLM judge when one is configured. */
  rubric: z.array(RubricRule).default([]),
  /** Code vs rubric weights (ClawGym-Bench: 0.7 / 0.3); without a rubric or judge, code counts alone. */
  weights: z
    .strictObject({ code: z.number().min(0), rubric: z.number().min(0) })
    .default({ code: 0.7, rubric: 0.3 }),
  referenceActions: z.array(ReferenceAction).nullable().default(null),
  category: z.string().default(''),
  persona: z.string().nullable().default(null),
  skills: z.array(z.string()).default([]),
  difficulty: z.enum(['easy', 'medium', 'hard']).nullable().default(null),
  /** Where the task came from: `clawgym` (with its original entry), `synth` (generator + seed), ... */
  provenance: z.record(z.string(), z.unknown()).default({}),
});
export type GymTask = z.infer<typeof GymTask>;
export type GymTaskInput = z.input<typeof GymTask>;
