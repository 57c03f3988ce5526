import { lstat, mkdir, readdir, readFile, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { parseOrThrow, ValidationError } from '@stepwise/core';
import { z } from 'zod';
import { makeDirs, readTree, recordedMode, taskFileFromBytes, writeTaskFiles } from './files.js';
import {
  CLAWGYM_ENTRY_FORMAT,
  detectPythonJsonFormat,
  type PythonJsonFormat,
  pythonJsonDumps,
} from './python-json.js';
import { DEFAULT_MOUNT_DIR, GymTask, TaskFile, type Verifier } from './schema.js';
import { rubricFromRules, rubricOf, validationModeOf, weightsOf } from './syn-rules.js';

/*
 * ClawGym's task folder form: `data_entry.json` (task_id, user_query, input_mount_dir, metadata),
 * `input_files/` (the starting workspace, may be absent) and `reward/` (the script verifier). A folder
 * converts to a GymTask and back without loss: `provenance.clawgym` keeps what the GymTask fields do not
 * (the entry's key order, extra fields, metadata and layout; empty directories; stray files).
 */

export const ENTRY_FILE = 'data_entry.json';
export const INPUT_DIR = 'input_files';
export const REWARD_DIR = 'reward';
export const REWARD_ENTRY = 'reward/reward.sh';

const KNOWN_KEYS = ['task_id', 'user_query', 'input_mount_dir', 'metadata'] as const;

const DataEntry = z.looseObject({
  task_id: z.string().min(1),
  user_query: z.string().min(1),
  input_mount_dir: z.string().startsWith('/').optional(),
  metadata: z.unknown().optional(),
});

/** What `provenance.clawgym` holds; parsed again before a task is written back as a folder. */
export const ClawGymProvenance = z.strictObject({
  /** The entry's keys in their original order. */
  entryKeys: z.array(z.string()),
  /** Entry fields other than task_id, user_query, input_mount_dir and metadata. */
  extra: z.record(z.string(), z.unknown()),
  /** The entry's `metadata` as found (absent when the entry had none). */
  metadata: z.unknown().optional(),
  /** The entry's JSON layout. */
  format: z.strictObject({
    indent: z.number().int().min(0).nullable(),
    ensureAscii: z.boolean(),
    trailingNewline: z.boolean(),
  }),
  /** The entry's original text, kept only when no layout reproduces it (e.g. `1.0`, a BOM). */
  entryRaw: z.string().optional(),
  /** Whether `input_files/` existed (it may exist and be empty). */
  inputDir: z.boolean(),
  /** Empty directories, relative to the task folder (`input_files/output`). */
  emptyDirs: z.array(z.string()),
  /** Files of the folder outside data_entry.json, input_files/ and reward/. */
  otherFiles: z.array(TaskFile),
});
export type ClawGymProvenance = z.infer<typeof ClawGymProvenance>;

// ignoreBOM: a BOM is part of the text to write back.
const strictUtf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

async function isDir(path: string): Promise<boolean> {
  try {
    return (await lstat(path)).isDirectory();
  } catch {
    return false;
  }
}

/** True when `dir` looks like a ClawGym task folder (has a data_entry.json). */
export async function isClawGymFolder(dir: string): Promise<boolean> {
  try {
    return (await stat(join(dir, ENTRY_FILE))).isFile();
  } catch {
    return false;
  }
}

/** Loads one ClawGym task folder. Errors name the folder and the offending field. */
export async function readClawGymFolder(dir: string): Promise<GymTask> {
  const where = basename(dir);
  let raw: string;
  try {
    raw = strictUtf8.decode(await readFile(join(dir, ENTRY_FILE)));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code) throw err;
    throw new ValidationError(`${where}/${ENTRY_FILE}: not valid UTF-8`, ENTRY_FILE);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw.replace(/^\uFEFF/, ''));
  } catch (err) {
    throw new ValidationError(
      `${where}/${ENTRY_FILE}: not valid JSON (${(err as Error).message})`,
      ENTRY_FILE,
    );
  }
  const entry = parseOrThrow(DataEntry, parsed, `${where}/${ENTRY_FILE}`);
  const entryObject = parsed as Record<string, unknown>;

  const inputDir = await isDir(join(dir, INPUT_DIR));
  const input = inputDir ? await readTree(join(dir, INPUT_DIR)) : { files: [], emptyDirs: [] };
  // ClawGym-SynData's skill2task entries say how the task is validated; a rubric-only one may have
  // no reward/ at all (then there is no code verifier and the judge alone scores).
  const mode = 'validation_mode' in entryObject ? validationModeOf(entryObject.validation_mode) : null;
  const hasReward = await isDir(join(dir, REWARD_DIR));
  const reward = hasReward ? await readTree(join(dir, REWARD_DIR), REWARD_DIR) : { files: [], emptyDirs: [] };
  const hasEntry = reward.files.some((f) => f.path === REWARD_ENTRY);
  const otherFiles: TaskFile[] = [];
  let verifier: Verifier;
  if (hasEntry) verifier = { kind: 'script', files: reward.files, entry: REWARD_ENTRY, timeoutMs: 120_000 };
  else if (mode === 'rubric') {
    verifier = { kind: 'none' };
    otherFiles.push(...reward.files);
  } else if (!hasReward) {
    throw new ValidationError(`${where}: has no ${REWARD_DIR}/ folder (the verifier)`, REWARD_DIR);
  } else throw new ValidationError(`${where}: ${REWARD_ENTRY} is missing`, REWARD_ENTRY);
  for (const name of (await readdir(dir)).sort()) {
    if (name === ENTRY_FILE || name === INPUT_DIR || name === REWARD_DIR) continue;
    const st = await lstat(join(dir, name));
    if (st.isDirectory()) otherFiles.push(...(await readTree(join(dir, name), name)).files);
    else if (st.isFile()) {
      otherFiles.push(taskFileFromBytes(name, await readFile(join(dir, name)), recordedMode(st.mode)));
    } else
      throw new ValidationError(`${where}/${name}: only regular files and directories are allowed`, name);
  }

  const weights = weightsOf(entryObject.reward_aggregation, mode, `${where}: reward_aggregation`);
  const entryRubric = rubricOf(entryObject, where);
  const format = detectPythonJsonFormat(raw, entryObject);
  const extra = Object.fromEntries(
    Object.entries(entryObject).filter(([k]) => !(KNOWN_KEYS as readonly string[]).includes(k)),
  );
  const provenance: ClawGymProvenance = {
    entryKeys: Object.keys(entryObject),
    extra,
    ...('metadata' in entryObject ? { metadata: entryObject.metadata } : {}),
    format: format ?? CLAWGYM_ENTRY_FORMAT,
    ...(format ? {} : { entryRaw: raw }),
    inputDir,
    emptyDirs: [...input.emptyDirs.map((d) => `${INPUT_DIR}/${d}`), ...reward.emptyDirs],
    otherFiles,
  };
  const metadata = entry.metadata;
  const category =
    typeof metadata === 'object' &&
    metadata !== null &&
    typeof (metadata as { category?: unknown }).category === 'string'
      ? (metadata as { category: string }).category
      : '';
  return parseOrThrow(
    GymTask,
    {
      id: entry.task_id,
      prompt: entry.user_query,
      files: input.files,
      mountDir: entry.input_mount_dir ?? DEFAULT_MOUNT_DIR,
      verifier,
      // What an LLM judge scores: skill2task's `rules` (or legacy `rubrics`) in the entry, else
      // the Hugging Face converter's `metadata.rule`.
      rubric:
        entryRubric.length > 0
          ? entryRubric
          : rubricFromRules(
              (metadata as { rule?: unknown } | null | undefined)?.rule,
              `${where}: metadata.rule`,
            ),
      ...(weights ? { weights } : {}),
      category,
      provenance: { source: 'clawgym', clawgym: provenance },
    },
    where,
  );
}

function clawGymProvenanceOf(task: GymTask): ClawGymProvenance | null {
  const value = task.provenance.clawgym;
  if (value === undefined) return null;
  return parseOrThrow(ClawGymProvenance, value, `${task.id}.provenance.clawgym`);
}

/** The data_entry.json object of a task: the original keys in order, current values from the task. */
function entryObjectOf(task: GymTask, prov: ClawGymProvenance | null): Record<string, unknown> {
  let metadata: unknown = prov ? prov.metadata : { category: task.category, grading_type: 'automated' };
  if (typeof metadata === 'object' && metadata !== null && !Array.isArray(metadata)) {
    const m = metadata as Record<string, unknown>;
    if ('category' in m || task.category !== '') metadata = { ...m, category: task.category };
  }
  const current: Record<string, unknown> = {
    ...(prov?.extra ?? {}),
    task_id: task.id,
    user_query: task.prompt,
    // An entry without input_mount_dir stays without one while the task keeps the default.
    ...(task.mountDir !== DEFAULT_MOUNT_DIR || !prov || prov.entryKeys.includes('input_mount_dir')
      ? { input_mount_dir: task.mountDir }
      : {}),
    ...(metadata !== undefined ? { metadata } : {}),
  };
  const keys = prov?.entryKeys ?? ['task_id', 'user_query', 'metadata', 'input_mount_dir'];
  const ordered: Record<string, unknown> = {};
  for (const k of keys) if (k in current) ordered[k] = current[k];
  for (const k of Object.keys(current)) if (!(k in ordered)) ordered[k] = current[k];
  return ordered;
}

/** The text of a task's data_entry.json. */
export function entryTextOf(task: GymTask): string {
  const prov = clawGymProvenanceOf(task);
  const entry = entryObjectOf(task, prov);
  if (prov?.entryRaw !== undefined) {
    try {
      if (isDeepStrictEqual(JSON.parse(prov.entryRaw.replace(/^\uFEFF/, '')), entry)) return prov.entryRaw;
    } catch {
      // An unparseable raw entry cannot have come from readClawGymFolder; write the task's values.
    }
  }
  return pythonJsonDumps(entry, (prov?.format as PythonJsonFormat | undefined) ?? CLAWGYM_ENTRY_FORMAT);
}

/**
 * Writes a task as a ClawGym folder at `dir` (created; must be absent or empty). Only script verifiers
 * whose files all live under `reward/` have a folder form.
 */
export async function writeClawGymFolder(task: GymTask, dir: string): Promise<void> {
  const verifier = task.verifier;
  if (verifier.kind === 'none') return writeFolder(task, dir, []);
  if (verifier.kind !== 'script') {
    throw new ValidationError(
      `${task.id}: only a script verifier has the ClawGym folder form`,
      'verifier.kind',
    );
  }
  const outside = verifier.files.find((f) => !f.path.startsWith(`${REWARD_DIR}/`));
  if (outside || !verifier.entry.startsWith(`${REWARD_DIR}/`)) {
    throw new ValidationError(
      `${task.id}: a ClawGym folder keeps the verifier under ${REWARD_DIR}/ (${outside?.path ?? verifier.entry})`,
      'verifier.files',
    );
  }
  return writeFolder(task, dir, verifier.files);
}

async function writeFolder(task: GymTask, dir: string, verifierFiles: TaskFile[]): Promise<void> {
  const prov = clawGymProvenanceOf(task);
  await mkdir(dir, { recursive: true });
  if ((await readdir(dir)).length > 0) {
    throw new ValidationError(`${dir}: must be absent or empty to write a task folder`, 'dir');
  }
  await writeFile(join(dir, ENTRY_FILE), entryTextOf(task), 'utf8');
  if (task.files.length > 0 || (prov?.inputDir ?? false)) {
    await mkdir(join(dir, INPUT_DIR));
    await writeTaskFiles(join(dir, INPUT_DIR), task.files);
  }
  await writeTaskFiles(dir, verifierFiles);
  await makeDirs(dir, prov?.emptyDirs ?? []);
  await writeTaskFiles(dir, prov?.otherFiles ?? []);
}
