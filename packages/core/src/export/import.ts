import { createHash, type Hash } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { z } from 'zod';
import {
  ChannelName,
  ConflictError,
  fromZodError,
  type LabelInput,
  type NewStep,
  StepWire,
  StepwiseError,
  stepFromWire,
  ValidationError,
} from '../domain/index.js';
import type { PoolOps } from '../pool/core.js';
import { MANIFEST_FILE, ManifestFiles } from './manifest.js';
import { type ParsedTrajectoryLine, TrajectoryLineSchema } from './trajectories.js';

export interface ImportOptions {
  store: PoolOps;
  /** A `trajectories.jsonl` written by `stepwise export trajectories`. */
  file: string;
  /** Called after each trajectory is stored (done, total). */
  onProgress?: (done: number, total: number) => void;
  /** The result of checkImport when the caller ran it already (against a store that was empty). */
  checked?: ImportCheck;
}

export interface ImportResult {
  trajectories: number;
  steps: number;
  labels: number;
  sha256: string;
  /** Whether a manifest beside the file listed it and its digest matched. */
  verified: boolean;
}

interface Plan {
  line: ParsedTrajectoryLine;
  steps: { step: NewStep; createdAt: number }[];
  labels: { input: LabelInput; createdAt: number }[];
}

const Time = z.number().finite().min(0, 'must be >= 0');
/** The fields a stored step carries beyond what an agent submits. */
const StoredStepFields = z.object({
  channel: ChannelName,
  created_at: Time,
  timings: z
    .object({ latency_ms: Time.nullable().optional(), ttft_ms: Time.nullable().optional() })
    .nullable()
    .optional(),
});

export interface ImportCheck {
  /** Trajectories in the file. */
  total: number;
  sha256: string;
  /** Whether a manifest beside the file listed it (and its digest matched). */
  verified: boolean;
}

/**
 * Checks a whole file before anything is written: every line parses, no trajectory repeats or
 * (given a store) already exists there, and the digest matches a manifest beside the file.
 */
export async function checkImport(file: string, store: PoolOps | null): Promise<ImportCheck> {
  const hash = createHash('sha256');
  const seen = new Set<string>();
  for await (const { n, text } of readLines(file, hash)) {
    const id = parseLine(text, n).line.trajectory_uid;
    if (seen.has(id))
      throw new ValidationError(`line ${n}: trajectory ${id} appears twice in the file`, 'trajectory_uid');
    if (store && (await store.getTrajectory(id)))
      throw new ConflictError(`line ${n}: trajectory ${id} already exists in the store`, 'trajectory_uid');
    seen.add(id);
  }
  const sha256 = hash.digest('hex');
  return { total: seen.size, sha256, verified: checkManifest(file, sha256) };
}

/**
 * Loads a full-fidelity export into a store; a bad file changes nothing (see checkImport, which
 * runs first unless the caller already ran it against an empty store). Each trajectory is written
 * as it was made: created at its time, its steps committed in their arrival order at their times,
 * then completed and labelled at theirs.
 */
export async function importTrajectories(options: ImportOptions): Promise<ImportResult> {
  const { store, file } = options;
  const check = options.checked ?? (await checkImport(file, store));
  const result: ImportResult = {
    trajectories: 0,
    steps: 0,
    labels: 0,
    sha256: check.sha256,
    verified: check.verified,
  };
  for await (const { n, text } of readLines(file)) {
    const plan = parseLine(text, n);
    try {
      await apply(store, plan);
    } catch (error) {
      if (error instanceof StepwiseError)
        throw new StepwiseError(`line ${n}: ${error.message}`, error.status, error.code, error.field);
      throw error;
    }
    result.trajectories++;
    result.steps += plan.steps.length;
    result.labels += plan.labels.length;
    options.onProgress?.(result.trajectories, check.total);
  }
  return result;
}

/** The non-empty lines of a file with their 1-based numbers, read in chunks (lines may be large). */
async function* readLines(file: string, hash?: Hash): AsyncGenerator<{ n: number; text: string }> {
  let carry: Buffer[] = [];
  let n = 0;
  const emit = (parts: Buffer[]) => Buffer.concat(parts).toString('utf8');
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    hash?.update(chunk);
    let start = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; nl = chunk.indexOf(10, start)) {
      carry.push(chunk.subarray(start, nl));
      const text = emit(carry);
      carry = [];
      start = nl + 1;
      n++;
      if (text.trim() !== '') yield { n, text };
    }
    if (start < chunk.length) carry.push(chunk.subarray(start));
  }
  n++;
  const rest = emit(carry);
  if (rest.trim() !== '') yield { n, text: rest };
}

/** A manifest beside the file that lists it must agree with its digest. */
function checkManifest(file: string, sha256: string): boolean {
  const path = join(dirname(file), MANIFEST_FILE);
  let raw: unknown;
  try {
    raw = JSON.parse(readFileSync(path, 'utf8'));
  } catch {
    return false;
  }
  const manifest = ManifestFiles.safeParse(raw);
  if (!manifest.success) {
    const error = fromZodError(manifest.error, 'manifest');
    throw new ValidationError(`${error.message} (${path})`, error.field);
  }
  const entry = manifest.data.files?.find((f) => f.name === basename(file));
  if (!entry) return false;
  if (entry.sha256 !== sha256)
    throw new ValidationError(
      `file: its sha256 ${sha256} differs from ${entry.sha256} in ${MANIFEST_FILE} (changed or truncated)`,
      'file',
    );
  return true;
}

function parseLine(text: string, n: number): Plan {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`line ${n}: malformed JSON (${(error as Error).message})`, 'line');
  }
  const parsed = TrajectoryLineSchema.safeParse(raw);
  if (!parsed.success) throw at(n, fromZodError(parsed.error));
  const line = parsed.data;
  if (line.steps.length !== line.n_steps)
    throw new ValidationError(
      `line ${n}: steps: n_steps is ${line.n_steps} but ${line.steps.length} are given`,
      'steps',
    );
  const indexes = new Set<number>();
  const steps = line.steps.map((value, i) => {
    const field = `steps.${i}`;
    if (typeof value !== 'object' || value === null || Array.isArray(value))
      throw new ValidationError(`line ${n}: ${field}: must be an object`, field);
    const { channel, created_at, timings, ...submitted } = value as Record<string, unknown>;
    const stored = StoredStepFields.safeParse({ channel, created_at, timings });
    if (!stored.success) throw at(n, fromZodError(stored.error, field));
    const wire = StepWire.safeParse(submitted);
    if (!wire.success) throw at(n, fromZodError(wire.error, field));
    const mismatch = (name: string, got: string, want: string) =>
      new ValidationError(
        `line ${n}: ${field}.${name}: is '${got}', the trajectory's is '${want}'`,
        `${field}.${name}`,
      );
    if (wire.data.trajectory_uid !== line.trajectory_uid)
      throw mismatch('trajectory_uid', wire.data.trajectory_uid, line.trajectory_uid);
    if (wire.data.prompt_uid !== line.prompt_uid)
      throw mismatch('prompt_uid', wire.data.prompt_uid, line.prompt_uid);
    if (stored.data.channel !== line.channel) throw mismatch('channel', stored.data.channel, line.channel);
    if (indexes.has(wire.data.step_index))
      throw new ValidationError(
        `line ${n}: ${field}.step_index: ${wire.data.step_index} appears twice`,
        `${field}.step_index`,
      );
    indexes.add(wire.data.step_index);
    const step = stepFromWire(wire.data);
    step.latencyMs = stored.data.timings?.latency_ms ?? null;
    step.ttftMs = stored.data.timings?.ttft_ms ?? null;
    return { step, createdAt: stored.data.created_at };
  });
  return { line, steps, labels: labelReplay(line) };
}

function at(n: number, error: ValidationError): ValidationError {
  return new ValidationError(`line ${n}: ${error.message}`, error.field);
}

type FoldedField = 'quality' | 'trainable' | 'note' | 'tags';
const FOLDED: FoldedField[] = ['quality', 'trainable', 'note', 'tags'];

/**
 * The labels to add again, in their order. The audit trail stores a field a label left alone and a
 * field it cleared the same way (null, or no tags), so each such field is replayed as "left alone"
 * unless the exported state in force shows it was cleared: then the last label after the last one
 * that set it clears it.
 */
function labelReplay(line: ParsedTrajectoryLine): Plan['labels'] {
  const inputs = line.labels.map((l) => {
    const input: LabelInput = { trajectory_uid: line.trajectory_uid, step_index: l.step_index };
    if (l.quality !== null) input.quality = l.quality;
    if (l.trainable !== null) input.trainable = l.trainable;
    if (l.tags.length > 0) input.tags = l.tags;
    if (l.note !== null) input.note = l.note;
    if (l.author !== null) input.author = l.author;
    return { input, createdAt: l.created_at };
  });
  const targets = new Set(line.labels.map((l) => l.step_index));
  for (const target of targets) {
    const positions = line.labels.flatMap((l, i) => (l.step_index === target ? [i] : []));
    const state = line.label_state.find((s) => s.step_index === target);
    for (const field of FOLDED) {
      const want = state ? state[field] : field === 'tags' ? [] : null;
      const setting = positions.filter((i) => inputs[i]!.input[field] !== undefined);
      const lastSet = setting.at(-1);
      const folded = lastSet === undefined ? (field === 'tags' ? [] : null) : inputs[lastSet]!.input[field];
      if (JSON.stringify(folded) === JSON.stringify(want)) continue;
      const cleared = want === null || (Array.isArray(want) && want.length === 0);
      const clearer = positions.filter((i) => i > (lastSet ?? -1)).at(-1);
      if (cleared && clearer !== undefined) {
        const input = inputs[clearer]!.input as Record<FoldedField, unknown>;
        input[field] = field === 'tags' ? [] : null;
      }
    }
  }
  return inputs;
}

async function apply(store: PoolOps, plan: Plan): Promise<void> {
  const { line } = plan;
  await store.createTrajectory(
    {
      id: line.trajectory_uid,
      groupId: line.prompt_uid,
      channel: line.channel,
      nRollouts: line.n_rollouts,
      metadata: line.metadata,
      taskId: line.task_id,
      guided: line.guided,
      guidanceK: line.guidance_k,
      probe: line.probe,
      derivedFrom: line.derived_from,
      derivation: line.derivation,
    },
    line.created_at,
  );
  // Arrival order: steps stored in one commit share its time, so each time is one submission.
  const ordered = [...plan.steps].sort((a, b) => a.createdAt - b.createdAt || a.step.index - b.step.index);
  for (let i = 0; i < ordered.length; ) {
    const createdAt = ordered[i]!.createdAt;
    const run: NewStep[] = [];
    for (; i < ordered.length && ordered[i]!.createdAt === createdAt; i++) run.push(ordered[i]!.step);
    const [outcome] = await store.submitBatch(
      [{ channel: line.channel, nRollouts: null, steps: run }],
      createdAt,
    );
    if (outcome && !outcome.ok) throw outcome.error;
  }
  if (line.status !== 'open') {
    const stored = await store.getTrajectory(line.trajectory_uid);
    const at = line.completed_at ?? ordered.at(-1)?.createdAt ?? line.created_at;
    if (stored?.status === 'open') {
      await store.completeTrajectory(line.trajectory_uid, { status: line.status, reward: line.reward }, at);
    } else if (stored && line.reward !== null && stored.reward !== line.reward) {
      // Completed by its last step; the reward came after (the environment's verdict).
      await store.completeTrajectory(line.trajectory_uid, { status: 'complete', reward: line.reward }, at);
    }
  }
  for (const { input, createdAt } of plan.labels) await store.addLabels([input], createdAt);
}
