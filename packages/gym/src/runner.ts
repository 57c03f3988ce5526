import { createHash } from 'node:crypto';
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { fromZodError, ValidationError } from '@stepwise/core';
import type { z } from 'zod';
import { type AgentSpec, agentEntry } from './agents.js';
import { verifierVersion } from './evidence.js';
import { runSample, type SampleEnv, type SampleJob, type SampleResult, SampleResultLine } from './sample.js';
import type { GymTask } from './tasks/schema.js';

// `stepwise gym run`: every task × N samples through the gateway, a task's samples one group; failures are
// the agent's or the infrastructure's. docs/gym.md#running-tasks-stepwise-gym-run
// One sample (`runSample`, what the distributed workers run) is sample.ts.

export type { AgentSpec } from './agents.js';
export type { SampleResult } from './sample.js';

export interface GymRunOptions extends SampleEnv {
  tasks: readonly GymTask[];
  samples: number;
  concurrency: number;
  /** Groups are `<runId>.<task id>`: the same id resumes the same groups. */
  runId: string;
  channel?: string;
  /** Finished samples, one JSON line each; read on start to skip them. */
  stateFile: string;
  onSample?: (result: SampleResult, done: number, total: number) => void;
  /** The group of a task's samples (default `<runId>.<task id>`); guided passes name theirs (guide.ts). */
  groupOf?: (task: GymTask) => string;
  /** Trajectory metadata beside the runner's own keys (e.g. ActGuide's `guidance`). */
  metadataOf?: (task: GymTask, sample: number) => Record<string, unknown>;
  /** ActGuide-RL: every trajectory of the run is guided (or a probe) by this hint (guide.ts). */
  guidance?: SampleJob['guidance'];
  /**
   * ActGuide-RL: a group whose complete rollouts all score at most this waits in `pending_guidance`
   * (not leasable) instead of becoming ready, until the guide releases it (docs/actguide.md).
   */
  holdForGuidance?: number;
}

export interface GymSummary {
  samples: number;
  skipped: number;
  meanScore: number;
  infraFailed: number;
  agentFailed: number;
  verifierFailed: number;
  groups: { allZero: number; allOne: number; mixed: number };
}

/** A stable run id from the task set and the settings that shape the groups. */
export function defaultRunId(tasks: readonly GymTask[], samples: number, agent: AgentSpec): string {
  const hash = createHash('sha256');
  for (const t of tasks) hash.update(t.id).update('\0');
  hash.update(`${samples}\0${agentEntry(agent).runKey(agent)}`);
  return `gym-${hash.digest('hex').slice(0, 12)}`;
}

/** One episode's seed: the same sample of the same task in the same run gets the same seed. */
export const sampleSeed = (runId: string, taskId: string, sample: number) =>
  createHash('sha256').update(`${runId}\0${taskId}\0${sample}`).digest().readUInt32LE(0);

/** The key a sample's result is counted under: one result per (task, sample) of a run. */
export const sampleKey = (taskId: string, sample: number) => `${taskId}\0${sample}`;

/**
 * The finished samples of a state file by `sampleKey`; the last line of a key wins. A line that is
 * JSON but no sample's result (another file, another format) is refused, naming the line and field.
 */
export function readSampleState(path: string): Map<string, SampleResult> {
  const done = new Map<string, SampleResult>();
  // A line torn by a crash mid-write is skipped: that sample runs again.
  for (const r of readStateLines(path, SampleResultLine)) done.set(sampleKey(r.taskId, r.sample), r);
  return done;
}

/**
 * The records of a JSON-lines state file, in order (none when it does not exist): a line that is not
 * JSON was torn by a crash mid-write and is skipped; one that is JSON but not `schema` is refused.
 */
export function readStateLines<T>(path: string, schema: z.ZodType<T>): T[] {
  if (!existsSync(path)) return [];
  const records: T[] = [];
  for (const [i, line] of readFileSync(path, 'utf8').split('\n').entries()) {
    if (line.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch {
      continue;
    }
    const parsed = schema.safeParse(value);
    if (!parsed.success) throw stateLineError(path, i + 1, parsed.error);
    records.push(parsed.data);
  }
  return records;
}

/** A state file's line that is no record of its kind: names the file, the line and the field. */
export function stateLineError(path: string, line: number, error: z.ZodError): ValidationError {
  const named = fromZodError(error);
  return new ValidationError(`state file ${path} line ${line}: ${named.message}`, named.field);
}

export async function runGym(
  options: GymRunOptions,
): Promise<{ results: SampleResult[]; summary: GymSummary }> {
  const done = readSampleState(options.stateFile);
  mkdirSync(options.workDir, { recursive: true });
  const queue = pendingSamples(options, done);
  const total = options.tasks.length * options.samples;
  const results: SampleResult[] = [...done.values()].filter((r) =>
    options.tasks.some((t) => t.id === r.taskId),
  );
  let finished = results.length;
  let next = 0;
  const env = sampleEnvOf(options);
  const worker = async () => {
    while (next < queue.length && !options.signal?.aborted) {
      const { task, sample } = queue[next++]!;
      const result = await runSample(sampleJobOf(options, task, sample), env).catch((error: Error) =>
        unexpectedFailure(task, sample, options, error),
      );
      appendFileSync(options.stateFile, `${JSON.stringify(result)}\n`);
      results.push(result);
      options.onSample?.(result, ++finished, total);
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(options.concurrency, queue.length)) }, worker));
  return { results, summary: summarize(results, total - queue.length) };
}

/** A sample the infrastructure failed before it could run or report: masked from training, score 0. */
export function infraFailedResult(
  task: GymTask,
  sample: number,
  groupId: string,
  reason: string,
): SampleResult {
  return {
    taskId: task.id,
    category: task.category,
    sample,
    groupId,
    trajectoryUid: null,
    status: 'infra_failed',
    score: 0,
    code: null,
    rubric: null,
    verifierFailed: false,
    agent: 'failed',
    reason,
    toolCalls: 0,
    toolErrors: 0,
    durationMs: 0,
  };
}

/** runSample never throws; should it all the same, that one sample fails, not the whole run. */
function unexpectedFailure(
  task: GymTask,
  sample: number,
  options: GymRunOptions,
  error: Error,
): SampleResult {
  const groupId = options.groupOf?.(task) ?? `${options.runId}.${task.id}`;
  return infraFailedResult(task, sample, groupId, `${error.name}: ${error.message}`);
}

/** The (task, sample) pairs of a run not yet in `done`, tasks by id, samples in order. */
export function pendingSamples(
  options: Pick<GymRunOptions, 'tasks' | 'samples'>,
  done: ReadonlyMap<string, SampleResult>,
): { task: GymTask; sample: number }[] {
  const queue: { task: GymTask; sample: number }[] = [];
  for (const task of [...options.tasks].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)))
    for (let sample = 0; sample < options.samples; sample++)
      if (!done.has(sampleKey(task.id, sample))) queue.push({ task, sample });
  return queue;
}

export function sampleJobOf(options: GymRunOptions, task: GymTask, sample: number): SampleJob {
  return {
    task,
    sample,
    runId: options.runId,
    groupId: options.groupOf?.(task) ?? `${options.runId}.${task.id}`,
    nRollouts: options.samples,
    seed: sampleSeed(options.runId, task.id, sample),
    channel: options.channel,
    guidance: options.guidance,
    holdForGuidance: options.holdForGuidance,
    metadata: options.metadataOf?.(task, sample),
  };
}

export function sampleEnvOf(options: GymRunOptions): SampleEnv {
  const { gatewayUrl, apiKey, model, agent, workDir, keepWorkspaces, sampleTimeoutMs, limits } = options;
  return {
    gatewayUrl,
    apiKey,
    model,
    agent,
    workDir,
    keepWorkspaces,
    sampleTimeoutMs,
    limits,
    unsafeNoSandbox: options.unsafeNoSandbox,
    ...(options.rootfs !== undefined ? { rootfs: options.rootfs } : {}),
    judge: options.judge,
    ...(options.evidence !== undefined ? { evidence: options.evidence } : {}),
    verifierVersion: options.verifierVersion ?? verifierVersion(options.tasks),
  };
}

export function summarize(results: readonly SampleResult[], skipped: number): GymSummary {
  const scored = results.filter((r) => r.status === 'complete');
  const byGroup = new Map<string, number[]>();
  for (const r of scored) byGroup.set(r.groupId, [...(byGroup.get(r.groupId) ?? []), r.score]);
  const groups = { allZero: 0, allOne: 0, mixed: 0 };
  for (const scores of byGroup.values()) {
    if (scores.every((s) => s === 0)) groups.allZero++;
    else if (scores.every((s) => s === 1)) groups.allOne++;
    else groups.mixed++;
  }
  return {
    samples: results.length,
    skipped,
    meanScore: scored.length === 0 ? 0 : scored.reduce((a, r) => a + r.score, 0) / scored.length,
    infraFailed: results.length - scored.length,
    agentFailed: scored.filter((r) => r.agent === 'failed').length,
    verifierFailed: scored.filter((r) => r.verifierFailed).length,
    groups,
  };
}
