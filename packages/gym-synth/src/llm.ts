import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { hashSeed, StepwiseError, ValidationError } from '@stepwise/core';
import {
  CATEGORIES,
  Check,
  checkSandbox,
  type GateOptions,
  GymTask,
  gateTask,
  parseToolArguments,
  ReferenceAction,
  scaffoldPaths,
  TOOL_DEFINITIONS,
  TOOL_NAMES,
} from '@stepwise/gym';
import OpenAI from 'openai';
import { z } from 'zod';
import { CLOSING_SENTENCE, MAX_TASKS, parseSeed, type SynthSeed } from './index.js';
import type { SynthManifest } from './output.js';
import { PERSONAS, type Persona } from './personas.js';
import { Rng } from './rng.js';
import type { Category } from './template.js';

// LLM task synthesis after ClawGym's pipeline: replies parsed leniently, validated strictly; a candidate
// that still fails is dropped with a reason. docs/gym-synth.md#llm-synthesis---mode-llm

/** Bumped whenever a change to the prompts or the pipeline changes what a seed asks the model. */
export const LLM_SYNTH_VERSION = 1;

export const DROP_REASONS = [
  'invalid_json',
  'invalid_checks',
  'gate_failed',
  'duplicate',
  'llm_error',
] as const;
export type DropReason = (typeof DROP_REASONS)[number];

export interface LlmEndpoint {
  /** OpenAI-compatible base URL, e.g. `http://127.0.0.1:8000/v1`. */
  baseURL: string;
  apiKey: string;
  model: string;
  /** Per request (default 120 s). */
  timeoutMs?: number;
  /** Retries of a request that failed in transport (connection, timeout, 429, 5xx) — default 1. */
  maxRetries?: number;
  /** Default 0.7: synthesis wants variety; each request also carries a seed derived from the task. */
  temperature?: number;
  /** Default 4096. */
  maxTokens?: number;
}

export interface LlmSynthLimits {
  /** Longest request prompt, in characters (default 6000). */
  maxPromptChars: number;
  /** Input files per task (default 8), characters per file (default 16000) and in all (default 48000). */
  maxFiles: number;
  maxFileChars: number;
  maxTotalChars: number;
  /** Checks (default 30) and reference actions (default 20) per task. */
  maxChecks: number;
  maxActions: number;
}

export const DEFAULT_LLM_SYNTH_LIMITS: LlmSynthLimits = {
  maxPromptChars: 6000,
  maxFiles: 8,
  maxFileChars: 16_000,
  maxTotalChars: 48_000,
  maxChecks: 30,
  maxActions: 20,
};

export interface LlmSynthOptions {
  n: number;
  seed: SynthSeed;
  llm: LlmEndpoint;
  /** Follow-up turns per stage: a reply that cannot be used, or a checker the gate rejects (default 2). */
  repairRounds?: number;
  /** Candidates in flight at once (default 4). */
  concurrency?: number;
  /** Passed to `gateTask` (sandbox settings, work dir, another scorer). */
  gate?: Pick<GateOptions, 'sandbox' | 'workDir' | 'score'>;
  limits?: Partial<LlmSynthLimits>;
  /** Prompts whose shingle Jaccard similarity reaches this are duplicates (default 0.8). */
  dedupThreshold?: number;
  /** Called as each candidate finishes (accepted or dropped). */
  onProgress?: (done: number, total: number) => void;
}

export interface LlmSynthDrop {
  index: number;
  id: string;
  reason: DropReason;
  /** What went wrong last (truncated). */
  detail: string;
}

export interface LlmSynthStats {
  requested: number;
  accepted: number;
  dropped: Record<DropReason, number>;
  /** Accepted tasks by the checker round that passed the gate (1: the first try). */
  rounds: Record<string, number>;
  /** Requests made to the model, all candidates together. */
  llmCalls: number;
  drops: LlmSynthDrop[];
}

// ---- the plan: persona × category per task --------------------------------------------------------

const CATEGORY_SCOPE: Record<Category, string> = {
  'Productivity & Collaboration':
    'meetings, calendars, task boards, contact lists, notes and other everyday office work',
  'Systems & Automation':
    'logs, configuration files, file trees, backups, batch renames and shell automation',
  'Analysis & Reasoning': 'tables of numbers to aggregate, compare, rank, reconcile or flag anomalies in',
  'Content & Domain':
    'turning structured data into documents: Markdown pages, reports, glossaries, citations',
  'Planning & Knowledge': 'schedules, dependencies, budgets, bookings and indexes of notes',
  'Software Development':
    'small Python (standard library) programs: fixing bugs, implementing functions, scripts, tests',
};

export interface LlmTaskPlan {
  index: number;
  id: string;
  category: Category;
  persona: Persona;
  /** A few of the persona's things, drawn per task, for the request to be about (variety). */
  focus: string[];
}

/**
 * Who asks and about what, for task `index` of a seed. Categories take turns in a seed-shuffled order
 * (every prefix of 6 covers all six); the persona and its focus words are drawn per task. Task i does
 * not depend on n.
 */
export function llmTaskPlan(seed: SynthSeed, index: number): LlmTaskPlan {
  const s = parseSeed(seed);
  const order = Rng.of('llm-synth-order', LLM_SYNTH_VERSION, s).shuffle(CATEGORIES);
  const rng = Rng.of('llm-synth-task', LLM_SYNTH_VERSION, s, index);
  const persona = rng.pick(PERSONAS);
  const focus = [...rng.sample(persona.items, 2), rng.pick(persona.places), rng.pick(persona.systems)];
  return {
    index,
    id: `llm-${s}-${String(index).padStart(5, '0')}`,
    category: order[index % order.length]!,
    persona,
    focus,
  };
}

// ---- lenient JSON extraction ------------------------------------------------------------------------

/** Every balanced `{...}` / `[...]` span starting at `start` (strings and escapes respected). */
function balancedSpan(text: string, start: number): string | undefined {
  const stack: string[] = [];
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i]!;
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{' || c === '[') stack.push(c === '{' ? '}' : ']');
    else if (c === '}' || c === ']') {
      if (stack.pop() !== c) return undefined;
      if (stack.length === 0) return text.slice(start, i + 1);
    }
  }
  return undefined;
}

function tryParse(text: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(text) };
  } catch {
    return undefined;
  }
}

/**
 * The JSON value in a model's reply: `<think>` blocks are dropped; then the whole reply, each fenced
 * block (```json ... ```), and finally the first balanced object or array after leading prose are
 * tried, in that order. `want` keeps only an object or an array.
 */
export function extractJson(
  reply: string,
  want: 'object' | 'array' | 'any' = 'any',
): { value: unknown } | { error: string } {
  const text = reply.replace(/<think>[\s\S]*?<\/think>/g, '').trim();
  const fits = (v: unknown) =>
    want === 'any' ||
    (want === 'array' ? Array.isArray(v) : typeof v === 'object' && v !== null && !Array.isArray(v));
  const candidates: string[] = [text];
  for (const m of text.matchAll(/(`{3,}|~{3,})[^\n]*\n([\s\S]*?)\1/g)) candidates.push(m[2]!.trim());
  for (const candidate of candidates) {
    const parsed = tryParse(candidate);
    if (parsed && fits(parsed.value)) return parsed;
  }
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c !== '{' && c !== '[') continue;
    const span = balancedSpan(text, i);
    const parsed = span === undefined ? undefined : tryParse(span);
    if (parsed && fits(parsed.value)) return parsed;
  }
  if (text === '') return { error: 'the reply is empty' };
  return { error: `no JSON ${want === 'any' ? 'value' : want} in the reply` };
}

// ---- near-duplicate detection -------------------------------------------------------------------------

/** Lower case, letters and digits only, single spaces. */
export function normalizeText(text: string): string {
  return text
    .normalize('NFKC')
    .toLowerCase()
    .replace(/[^\p{L}\p{N}]+/gu, ' ')
    .trim();
}

/** Word k-shingles of the normalized text (a text shorter than k words is one shingle). */
export function shingles(text: string, k = 3): Set<string> {
  const words = normalizeText(text).split(' ').filter(Boolean);
  if (words.length <= k) return new Set([words.join(' ')]);
  const out = new Set<string>();
  for (let i = 0; i + k <= words.length; i++) out.add(words.slice(i, i + k).join(' '));
  return out;
}

export function jaccard(a: ReadonlySet<string>, b: ReadonlySet<string>): number {
  if (a.size === 0 && b.size === 0) return 1;
  let shared = 0;
  for (const s of a) if (b.has(s)) shared++;
  return shared / (a.size + b.size - shared);
}

/** sha256 of the files (sorted by path): two tasks with the same key start from the same workspace. */
export function filesKey(files: GymTask['files']): string {
  const h = createHash('sha256');
  for (const f of [...files].sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0))) {
    h.update(`${f.path}\0${f.encoding}\0${f.content}\0`);
  }
  return h.digest('hex');
}

/**
 * Drops, in task order, every task whose prompt is a near-duplicate of an earlier kept one (shingle
 * Jaccard ≥ threshold) or whose files are identical to one's. Order, not timing, decides who stays.
 */
export function dropNearDuplicates(
  tasks: readonly GymTask[],
  threshold = 0.8,
): { kept: GymTask[]; duplicates: { task: GymTask; of: string; similarity: number }[] } {
  const kept: { task: GymTask; shingles: Set<string>; files: string }[] = [];
  const duplicates: { task: GymTask; of: string; similarity: number }[] = [];
  for (const task of tasks) {
    const own = { task, shingles: shingles(task.prompt), files: filesKey(task.files) };
    let dup: { of: string; similarity: number } | undefined;
    for (const k of kept) {
      if (task.files.length > 0 && k.files === own.files) {
        dup = { of: k.task.id, similarity: 1 };
        break;
      }
      const similarity = jaccard(own.shingles, k.shingles);
      if (similarity >= threshold) {
        dup = { of: k.task.id, similarity };
        break;
      }
    }
    if (dup) duplicates.push({ task, ...dup });
    else kept.push(own);
  }
  return { kept: kept.map((k) => k.task), duplicates };
}

// ---- what each stage's reply must be ---------------------------------------------------------------------

type Read<T> = { value: T } | { reason: 'invalid_json' | 'invalid_checks'; error: string };

function issuesText(error: z.ZodError, prefix: string, max = 3): string {
  const lines = error.issues.slice(0, max).map((issue) => {
    const where = [prefix, ...issue.path.map(String)].filter(Boolean).join('.');
    return `${where}: ${issue.message}`;
  });
  const more = error.issues.length > max ? ` (and ${error.issues.length - max} more)` : '';
  return `${lines.join('; ')}${more}`;
}

const IntentReply = z.looseObject({
  title: z.string().trim().min(1).max(200),
  prompt: z.string().trim().min(40, 'must be a full request (at least 40 characters)'),
});

export interface Intent {
  title: string;
  /** With the closing sentence ("All file paths are relative to the workspace directory."). */
  prompt: string;
}

export function readIntent(reply: string, limits: LlmSynthLimits = DEFAULT_LLM_SYNTH_LIMITS): Read<Intent> {
  const json = extractJson(reply, 'object');
  if ('error' in json) return { reason: 'invalid_json', error: json.error };
  const parsed = IntentReply.safeParse(json.value);
  if (!parsed.success) return { reason: 'invalid_json', error: issuesText(parsed.error, '') };
  const { title, prompt } = parsed.data;
  if (prompt.length > limits.maxPromptChars)
    return { reason: 'invalid_json', error: `prompt: longer than ${limits.maxPromptChars} characters` };
  const paths = scaffoldPaths(prompt);
  if (!paths.some((p) => p.startsWith('input/')))
    return {
      reason: 'invalid_json',
      error: 'prompt: names no input file under input/ (e.g. input/data.csv)',
    };
  if (!paths.some((p) => p.startsWith('output/')))
    return {
      reason: 'invalid_json',
      error: 'prompt: names no output file under output/ (e.g. output/report.json)',
    };
  const full = prompt.includes(CLOSING_SENTENCE) ? prompt : `${prompt}\n\n${CLOSING_SENTENCE}`;
  return { value: { title, prompt: full } };
}

const FilesReply = z.looseObject({
  files: z
    .array(
      z.looseObject({
        path: z
          .string()
          .trim()
          .regex(/^input\/[^\0]+$/, 'must be a path under input/')
          .refine((p) => !p.split('/').some((part) => part === '..' || part === '.' || part === ''), {
            message: 'must be a plain relative path (no "..", ".", or empty parts)',
          }),
        content: z.string().refine((c) => !c.includes('\0'), { message: 'must be text (no NUL bytes)' }),
      }),
    )
    .min(1),
});

export function readFiles(
  reply: string,
  prompt: string,
  limits: LlmSynthLimits = DEFAULT_LLM_SYNTH_LIMITS,
): Read<GymTask['files']> {
  const json = extractJson(reply, 'object');
  if ('error' in json) return { reason: 'invalid_json', error: json.error };
  const parsed = FilesReply.safeParse(json.value);
  if (!parsed.success) return { reason: 'invalid_json', error: issuesText(parsed.error, '') };
  const files = parsed.data.files;
  const fail = (error: string): Read<GymTask['files']> => ({ reason: 'invalid_json', error });
  if (files.length > limits.maxFiles) return fail(`files: ${files.length} files, at most ${limits.maxFiles}`);
  const seen = new Set<string>();
  let total = 0;
  for (const [i, f] of files.entries()) {
    if (seen.has(f.path)) return fail(`files.${i}.path: ${f.path} given twice`);
    seen.add(f.path);
    if (f.content.length > limits.maxFileChars)
      return fail(`files.${i}.content: ${f.content.length} characters, at most ${limits.maxFileChars}`);
    total += f.content.length;
  }
  if (total > limits.maxTotalChars)
    return fail(`files: ${total} characters in all, at most ${limits.maxTotalChars}`);
  // A directory and a file of the same name cannot both exist.
  const clash = files.find((f) => files.some((g) => g.path.startsWith(`${f.path}/`)));
  if (clash) return fail(`files: ${clash.path} is both a file and a directory`);
  const missing = scaffoldPaths(prompt).filter((p) => p.startsWith('input/') && !seen.has(p));
  if (missing.length > 0)
    return fail(`files: the request names ${missing.join(', ')} but no file has that path`);
  return { value: files.map((f) => ({ path: f.path, encoding: 'utf8' as const, content: f.content })) };
}

/** Argument names per tool, from the tool definitions the agents are offered. */
const TOOL_ARGUMENTS = new Map(
  TOOL_DEFINITIONS.map((t) => {
    const params = t.function.parameters as { properties?: Record<string, unknown>; required?: string[] };
    return [
      t.function.name,
      { allowed: Object.keys(params.properties ?? {}), required: params.required ?? [] },
    ];
  }),
);

const CheckerReply = z.looseObject({
  checks: z.array(z.unknown()),
  actions: z.array(z.unknown()).optional(),
  reference_actions: z.array(z.unknown()).optional(),
  referenceActions: z.array(z.unknown()).optional(),
});

function readAction(raw: unknown, i: number): { value: ReferenceAction } | { error: string } {
  const parsed = ReferenceAction.safeParse(raw);
  if (!parsed.success) return { error: issuesText(parsed.error, `actions.${i}`, 1) };
  const { name, arguments: args } = parsed.data;
  const spec = TOOL_ARGUMENTS.get(name);
  if (!spec) return { error: `actions.${i}.name: unknown tool ${name} (tools: ${TOOL_NAMES.join(', ')})` };
  const unknown = Object.keys(args).filter((k) => !spec.allowed.includes(k));
  if (unknown.length > 0)
    return {
      error: `actions.${i}.arguments: ${name} takes ${spec.allowed.join(', ')}, not ${unknown.join(', ')}`,
    };
  const missing = spec.required.filter((k) => !(k in args));
  if (missing.length > 0) return { error: `actions.${i}.arguments: ${name} needs ${missing.join(', ')}` };
  try {
    parseToolArguments(name as (typeof TOOL_NAMES)[number], args);
  } catch (error) {
    return { error: `actions.${i}.arguments: ${(error as Error).message.replace(/^Error: /, '')}` };
  }
  return { value: parsed.data };
}

export interface Checker {
  checks: Check[];
  actions: ReferenceAction[];
}

/** The checks (validated against the check DSL) and reference actions (real tools, their argument names). */
export function readChecker(reply: string, limits: LlmSynthLimits = DEFAULT_LLM_SYNTH_LIMITS): Read<Checker> {
  const json = extractJson(reply, 'object');
  if ('error' in json) return { reason: 'invalid_json', error: json.error };
  const shape = CheckerReply.safeParse(json.value);
  if (!shape.success) return { reason: 'invalid_json', error: issuesText(shape.error, '') };
  const invalid = (error: string): Read<Checker> => ({ reason: 'invalid_checks', error });
  const checks = z.array(Check).min(1).max(limits.maxChecks).safeParse(shape.data.checks);
  if (!checks.success) return invalid(issuesText(checks.error, 'checks'));
  const names = checks.data.map((c) => c.name);
  const twice = names.find((n, k) => names.indexOf(n) !== k);
  if (twice !== undefined) return invalid(`checks: the name ${twice} is used twice (names must be unique)`);
  const rawActions = shape.data.actions ?? shape.data.reference_actions ?? shape.data.referenceActions;
  if (!rawActions || rawActions.length === 0)
    return invalid('actions: missing (the tool calls that solve the task)');
  if (rawActions.length > limits.maxActions)
    return invalid(`actions: ${rawActions.length} actions, at most ${limits.maxActions}`);
  const actions: ReferenceAction[] = [];
  for (const [i, raw] of rawActions.entries()) {
    const action = readAction(raw, i);
    if ('error' in action) return invalid(action.error);
    actions.push(action.value);
  }
  return { value: { checks: checks.data, actions } };
}

// ---- the messages ------------------------------------------------------------------------------------------

export type ChatMessage = { role: 'system' | 'user' | 'assistant'; content: string };

const SYSTEM = [
  'You design realistic tasks for training and evaluating AI agents.',
  'The agent works in a workspace directory inside a Linux sandbox with bash and python3 (standard library only) and no network.',
  `Its tools: ${TOOL_NAMES.join(', ')}.`,
  'Every task is scored automatically by code, so it must have exactly one correct result that a program can check.',
  'Reply with only the JSON asked for: no prose, no comments.',
].join(' ');

const CHECK_DOCS: Record<Check['kind'], string> = {
  file_exists: '{"kind": "file_exists", "name", "path"}: the file or directory exists',
  file_absent: '{"kind": "file_absent", "name", "path"}: nothing is at path',
  parses:
    '{"kind": "parses", "name", "path", "format": "json"|"csv"}: it parses (CSV: a header row, equal widths)',
  csv_columns:
    '{"kind": "csv_columns", "name", "path", "columns": [..], "ordered"?: true}: the header equals columns',
  json_keys: '{"kind": "json_keys", "name", "path", "keys": [..]}: the top-level object has every key',
  json_value:
    '{"kind": "json_value", "name", "path", "pointer": "/a/0", "expected": <any JSON>, "tolerance"?: 1e-6}: the value at the RFC 6901 pointer deep-equals expected',
  rows_match:
    '{"kind": "rows_match", "name", "path", "columns": [..], "expected": [["v1", "v2"], ..], "ordered"?: false}: the CSV rows projected on columns (trimmed strings) equal expected',
  text_contains:
    '{"kind": "text_contains", "name", "path", "pattern", "regex"?: false, "absent"?: false, "ignoreCase"?: false}: the literal or JavaScript regex is found',
  word_count:
    '{"kind": "word_count", "name", "path", "min"?, "max"?}: whitespace-separated words within [min, max]',
  command:
    '{"kind": "command", "name", "command", "exitCode"?: 0, "timeoutMs"?: 60000}: the bash command, run in the workspace, exits with exitCode',
};

const TOOL_DOCS = [...TOOL_ARGUMENTS.entries()]
  .map(([name, { allowed, required }]) => {
    const args = allowed.map((a) => `"${a}"${required.includes(a) ? '' : '?'}`).join(', ');
    return `- ${name} {${args}}`;
  })
  .join('\n');

function header(plan: LlmTaskPlan, step: string): string {
  return `Task id: ${plan.id}\n# ${step}`;
}

function fenced(text: string): string {
  const longest = Math.max(0, ...(text.match(/`+/g) ?? []).map((r) => r.length));
  const fence = '`'.repeat(Math.max(3, longest + 1));
  return `${fence}\n${text}\n${fence}`;
}

export function intentMessages(plan: LlmTaskPlan): ChatMessage[] {
  const p = plan.persona;
  return [
    { role: 'system', content: SYSTEM },
    {
      role: 'user',
      content: [
        header(plan, 'Step 1 of 3: the request'),
        '',
        `Persona: ${p.role} at ${p.org} ("${p.intro}").`,
        `Things they work with: ${p.items.join(', ')}; places: ${p.places.join(', ')}; systems: ${p.systems.join(', ')}.`,
        `Category: ${plan.category} — ${CATEGORY_SCOPE[plan.category]}.`,
        `Build the request around some of: ${plan.focus.join(', ')}.`,
        '',
        'Write one request this person would send an agent, in their voice (first person, saying why they need it).',
        '- Name every input file by its exact path under input/ (e.g. input/orders.csv) and say what is in it; the files are written in the next step, from your request.',
        '- Name every output by its exact path under output/ and fix its format exactly: CSV columns in order, JSON keys and value types, sort orders, rounding, Markdown headings, so that one correct result exists.',
        '- It must be doable with bash and python3 (standard library) in a few tool calls, without network.',
        '- At most about 250 words. Do not give the answer.',
        '',
        'Reply with only a JSON object: {"title": "a short title", "prompt": "the full request"}',
      ].join('\n'),
    },
  ];
}

export function filesMessages(plan: LlmTaskPlan, intent: Intent, limits: LlmSynthLimits): ChatMessage[] {
  const inputs = scaffoldPaths(intent.prompt).filter((p) => p.startsWith('input/'));
  return [
    { role: 'system', content: SYSTEM },
    {
      role: 'user',
      content: [
        header(plan, 'Step 2 of 3: the input files'),
        '',
        `The request (${plan.persona.role}, ${plan.category}):`,
        fenced(intent.prompt),
        '',
        `Write the starting workspace: every input file the request names (${inputs.join(', ')}), with realistic content that fits the persona and the request.`,
        '- The data must make the answer unambiguous: no ties where the request asks for a top item, no missing values unless the request says how to treat them.',
        `- Text files only, paths under input/, at most ${limits.maxFiles} files, ${limits.maxFileChars} characters each and ${limits.maxTotalChars} in all.`,
        '- Do not write any output.',
        '',
        'Reply with only a JSON object: {"files": [{"path": "input/...", "content": "..."}]}',
      ].join('\n'),
    },
  ];
}

export function checkerMessages(
  plan: LlmTaskPlan,
  intent: Intent,
  files: GymTask['files'],
  limits: LlmSynthLimits,
): ChatMessage[] {
  const listing = files.map((f) => `### ${f.path}\n${fenced(f.content)}`).join('\n\n');
  return [
    { role: 'system', content: SYSTEM },
    {
      role: 'user',
      content: [
        header(plan, 'Step 3 of 3: the checker and the reference solution'),
        '',
        'The request:',
        fenced(intent.prompt),
        '',
        'The input files:',
        '',
        listing,
        '',
        `1. "checks": 1 to ${limits.maxChecks} checks that together score 1 exactly when the request is done right. The kinds:`,
        ...Object.values(CHECK_DOCS).map((d) => `   - ${d}`),
        '   Names are unique. Compute expected values exactly from the input files. Paths are relative to the workspace.',
        '   Every check must FAIL on the untouched workspace and on empty files at every path the request names:',
        '   use word_count with min 1 (not file_exists) for outputs, and never check that something is absent or that an input parses.',
        `2. "actions": 1 to ${limits.maxActions} tool calls that solve the task from the starting workspace, as an agent would make them ({"name": ..., "arguments": {...}}):`,
        TOOL_DOCS,
        '   exec runs bash in the workspace (python3 standard library only; no network).',
        '',
        'Reply with only a JSON object: {"checks": [...], "actions": [...]}',
      ].join('\n'),
    },
  ];
}

const SHAPES = {
  intent: '{"title": "...", "prompt": "..."}',
  files: '{"files": [{"path": "input/...", "content": "..."}]}',
  checker: '{"checks": [...], "actions": [...]}',
} as const;

function unusableReply(error: string, shape: string): string {
  return `That reply could not be used: ${error}. Reply again with only the JSON object ${shape}.`;
}

function gateRepair(problems: readonly string[]): string {
  const cut = (s: string) => (s.length > 1200 ? `${s.slice(0, 1200)} …` : s);
  return [
    'The validation gate ran this task and rejected it:',
    ...problems.slice(0, 8).map((p) => `- ${cut(p)}`),
    '',
    'The gate requires: the untouched workspace scores 0; empty files at every path the request names score 0; your actions, run with the real tools in a fresh copy of the workspace, score exactly 1 (every check passes).',
    'Keep the request and the input files as they are. Correct the checks and/or the actions.',
    `Reply with only the JSON object ${SHAPES.checker}.`,
  ].join('\n');
}

// ---- the model -------------------------------------------------------------------------------------------

/** A request that failed after the client's retries (transport, HTTP error, empty answer). */
export class LlmRequestError extends StepwiseError {
  override readonly name = 'LlmRequestError';
  constructor(message: string) {
    super(message, 502, 'llm_request_failed', undefined, true);
  }
}

interface Conversation {
  ask(messages: readonly ChatMessage[], requestSeed: number): Promise<string>;
}

function openAiConversation(endpoint: LlmEndpoint, counter: { calls: number }): Conversation {
  const client = new OpenAI({
    baseURL: endpoint.baseURL,
    apiKey: endpoint.apiKey,
    timeout: endpoint.timeoutMs ?? 120_000,
    maxRetries: endpoint.maxRetries ?? 1,
  });
  return {
    async ask(messages, requestSeed) {
      counter.calls++;
      try {
        const completion = await client.chat.completions.create({
          model: endpoint.model,
          messages: messages.map((m) => ({ role: m.role, content: m.content })),
          temperature: endpoint.temperature ?? 0.7,
          max_tokens: endpoint.maxTokens ?? 4096,
          seed: requestSeed,
        });
        return completion.choices[0]?.message?.content ?? '';
      } catch (error) {
        throw new LlmRequestError(`the model request failed: ${(error as Error).message}`);
      }
    },
  };
}

// ---- one candidate ---------------------------------------------------------------------------------------

type Outcome = { ok: true; task: GymTask } | { ok: false; reason: DropReason; detail: string };

interface CandidateContext {
  plan: LlmTaskPlan;
  seed: SynthSeed;
  model: string;
  llm: Conversation;
  repairRounds: number;
  limits: LlmSynthLimits;
  gate: GateOptions;
}

/** Asks until a reply reads, with up to `repairRounds` follow-ups that name what was wrong. */
async function askUntilRead<T>(
  ctx: CandidateContext,
  stage: string,
  messages: ChatMessage[],
  read: (reply: string) => Read<T>,
  shape: string,
): Promise<{ value: T } | { reason: DropReason; detail: string }> {
  let last: { reason: DropReason; detail: string } = { reason: 'invalid_json', detail: '' };
  for (let round = 0; round <= ctx.repairRounds; round++) {
    const reply = await ctx.llm.ask(messages, hashSeed('llm-synth', ctx.plan.id, stage, round));
    const result = read(reply);
    if ('value' in result) return result;
    last = { reason: result.reason, detail: `${stage}: ${result.error}` };
    messages.push(
      { role: 'assistant', content: reply },
      { role: 'user', content: unusableReply(result.error, shape) },
    );
  }
  return last;
}

function buildTask(
  ctx: CandidateContext,
  intent: Intent,
  files: GymTask['files'],
  checker: Checker,
  rounds: number,
) {
  return GymTask.parse({
    id: ctx.plan.id,
    prompt: intent.prompt,
    files,
    verifier: { kind: 'checks', checks: checker.checks },
    // No rubric: the gate proves the checks decide alone.
    weights: { code: 1, rubric: 0 },
    referenceActions: checker.actions,
    category: ctx.plan.category,
    persona: ctx.plan.persona.role,
    provenance: {
      source: 'llm-synth',
      generator: 'stepwise-llm-synth',
      version: LLM_SYNTH_VERSION,
      model: ctx.model,
      seed: ctx.seed,
      index: ctx.plan.index,
      rounds,
      persona: ctx.plan.persona.id,
      focus: ctx.plan.focus,
      title: intent.title,
    },
  });
}

async function synthesizeOne(ctx: CandidateContext): Promise<Outcome> {
  try {
    const intent = await askUntilRead(
      ctx,
      'intent',
      intentMessages(ctx.plan),
      (r) => readIntent(r, ctx.limits),
      SHAPES.intent,
    );
    if (!('value' in intent)) return { ok: false, ...intent };
    const files = await askUntilRead(
      ctx,
      'files',
      filesMessages(ctx.plan, intent.value, ctx.limits),
      (r) => readFiles(r, intent.value.prompt, ctx.limits),
      SHAPES.files,
    );
    if (!('value' in files)) return { ok: false, ...files };

    // The checker's rounds: a reply that does not read, or a candidate the gate rejects, is sent back.
    const messages = checkerMessages(ctx.plan, intent.value, files.value, ctx.limits);
    let last: { reason: DropReason; detail: string } = { reason: 'gate_failed', detail: '' };
    for (let round = 1; round <= ctx.repairRounds + 1; round++) {
      const reply = await ctx.llm.ask(messages, hashSeed('llm-synth', ctx.plan.id, 'checker', round));
      const checker = readChecker(reply, ctx.limits);
      let followUp: string;
      if ('value' in checker) {
        const task = buildTask(ctx, intent.value, files.value, checker.value, round);
        const gate = await gateTask(task, ctx.gate);
        if (gate.ok) return { ok: true, task };
        last = { reason: 'gate_failed', detail: `gate (round ${round}): ${gate.problems.join(' | ')}` };
        followUp = gateRepair(gate.problems);
      } else {
        last = { reason: checker.reason, detail: `checker (round ${round}): ${checker.error}` };
        followUp = unusableReply(checker.error, SHAPES.checker);
      }
      messages.push({ role: 'assistant', content: reply }, { role: 'user', content: followUp });
    }
    return { ok: false, ...last };
  } catch (error) {
    if (error instanceof LlmRequestError) return { ok: false, reason: 'llm_error', detail: error.message };
    throw error;
  }
}

// ---- the run ---------------------------------------------------------------------------------------------

function countFrom(value: number | undefined, fallback: number, field: string, min: number, max: number) {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < min || v > max)
    throw new ValidationError(`${field} must be an integer from ${min} to ${max}`, field);
  return v;
}

/**
 * `n` candidates for a seed through the model, the gate and dedup; returns the accepted tasks (in
 * index order) and what happened to the rest. Needs the sandbox (the gate runs the reference actions).
 */
export async function synthesizeWithLlm(
  options: LlmSynthOptions,
): Promise<{ tasks: GymTask[]; stats: LlmSynthStats }> {
  const n = countFrom(options.n, 0, 'n', 1, MAX_TASKS);
  const seed = parseSeed(options.seed);
  const repairRounds = countFrom(options.repairRounds, 2, 'repairRounds', 0, 10);
  const concurrency = countFrom(options.concurrency, 4, 'concurrency', 1, 64);
  const threshold = options.dedupThreshold ?? 0.8;
  if (!(threshold > 0 && threshold <= 1))
    throw new ValidationError('dedupThreshold must be in (0, 1]', 'dedupThreshold');
  if (!options.llm.baseURL) throw new ValidationError('the LLM base URL is required', 'llm.baseURL');
  if (!options.llm.model) throw new ValidationError('the LLM model is required', 'llm.model');
  if (!options.gate?.score) {
    const sandbox = checkSandbox();
    if (!sandbox.ok) throw new Error(`the gate needs the sandbox, which is unavailable: ${sandbox.reason}`);
  }
  const limits = { ...DEFAULT_LLM_SYNTH_LIMITS, ...options.limits };
  const counter = { calls: 0 };
  const llm = openAiConversation(options.llm, counter);

  const outcomes: Outcome[] = new Array(n);
  const plans = Array.from({ length: n }, (_, i) => llmTaskPlan(seed, i));
  let next = 0;
  let done = 0;
  const worker = async () => {
    while (next < n) {
      const i = next++;
      outcomes[i] = await synthesizeOne({
        plan: plans[i]!,
        seed,
        model: options.llm.model,
        llm,
        repairRounds,
        limits,
        gate: options.gate ?? {},
      });
      options.onProgress?.(++done, n);
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, n) }, worker));

  const stats: LlmSynthStats = {
    requested: n,
    accepted: 0,
    dropped: Object.fromEntries(DROP_REASONS.map((r) => [r, 0])) as Record<DropReason, number>,
    rounds: {},
    llmCalls: counter.calls,
    drops: [],
  };
  const drop = (index: number, reason: DropReason, detail: string) => {
    stats.dropped[reason]++;
    stats.drops.push({ index, id: plans[index]!.id, reason, detail: detail.slice(0, 600) });
  };
  const passed: GymTask[] = [];
  for (const [i, outcome] of outcomes.entries()) {
    if (outcome.ok) passed.push(outcome.task);
    else drop(i, outcome.reason, outcome.detail);
  }
  const { kept, duplicates } = dropNearDuplicates(passed, threshold);
  for (const d of duplicates) {
    drop(
      Number(d.task.provenance.index),
      'duplicate',
      `near-duplicate of ${d.of} (similarity ${d.similarity.toFixed(2)})`,
    );
  }
  stats.drops.sort((a, b) => a.index - b.index);
  for (const t of kept) {
    const r = String(t.provenance.rounds);
    stats.rounds[r] = (stats.rounds[r] ?? 0) + 1;
  }
  stats.accepted = kept.length;
  return { tasks: kept, stats };
}

// ---- the manifest ----------------------------------------------------------------------------------------

export interface LlmSynthManifest
  extends Omit<SynthManifest, 'generator' | 'counts' | 'templates_used' | 'templates_available'> {
  generator: { name: 'stepwise-llm-synth'; version: number };
  mode: 'llm';
  counts: {
    by_category: Record<string, number>;
    by_persona: Record<string, number>;
    by_difficulty: Record<string, number>;
  };
  llm: {
    model: string;
    repair_rounds: number;
    requested: number;
    accepted: number;
    dropped: Record<DropReason, number>;
    rounds: Record<string, number>;
    llm_calls: number;
    drops: LlmSynthDrop[];
  };
}

/** The manifest of an LLM run: the procedural manifest's hash and files, with the run's counts. */
export function llmManifestOf(
  base: SynthManifest,
  tasks: readonly GymTask[],
  stats: LlmSynthStats,
  llm: { model: string; repairRounds: number },
): LlmSynthManifest {
  const { templates_used: _used, templates_available: _available, counts, ...rest } = base;
  const byPersona: Record<string, number> = {};
  for (const t of tasks) {
    const p = String(t.provenance.persona ?? 'unknown');
    byPersona[p] = (byPersona[p] ?? 0) + 1;
  }
  return {
    ...rest,
    generator: { name: 'stepwise-llm-synth', version: LLM_SYNTH_VERSION },
    mode: 'llm',
    counts: {
      by_category: counts.by_category,
      by_persona: Object.fromEntries(
        Object.entries(byPersona).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
      ),
      by_difficulty: counts.by_difficulty,
    },
    llm: {
      model: llm.model,
      repair_rounds: llm.repairRounds,
      requested: stats.requested,
      accepted: stats.accepted,
      dropped: stats.dropped,
      rounds: stats.rounds,
      llm_calls: stats.llmCalls,
      drops: stats.drops,
    },
  };
}

/** Rewrites `<outDir>/manifest.json` (written by `writeSynthOutput`) as the LLM run's manifest. */
export async function writeLlmManifest(
  outDir: string,
  manifestFile: string,
  manifest: LlmSynthManifest,
): Promise<void> {
  await writeFile(join(outDir, manifestFile), `${JSON.stringify(manifest, null, 2)}\n`);
}
