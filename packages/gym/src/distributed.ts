import { appendFileSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  agentWire,
  type RolloutJobData,
  rolloutJobId,
  rolloutJobKey,
  SampleResultWire,
} from './distributed/jobs.js';
import type { EndedJob, JobSettings, QueuedRollout, RolloutQueue } from './distributed/queue.js';
import { verifierVersion } from './evidence.js';
import {
  type GymRunOptions,
  type GymSummary,
  infraFailedResult,
  pendingSamples,
  readSampleState,
  type SampleResult,
  sampleJobOf,
  summarize,
} from './runner.js';
import type { GymTask } from './tasks/schema.js';

// `stepwise gym run --distributed`: runGym's run with its samples on rollout workers through the
// PostgreSQL rollout queue; this process enqueues, waits and takes each result once.
// docs/distributed.md#how-it-works

export { DEFAULT_QUEUE_SCHEMA, RolloutQueue, type RolloutQueueOptions } from './distributed/queue.js';
export {
  type RolloutWorker,
  type RolloutWorkerEvent,
  type RolloutWorkerOptions,
  startRolloutWorker,
} from './distributed/worker.js';

export interface DistributedRunSettings extends Partial<JobSettings> {
  queue: RolloutQueue;
  /** How often the coordinator looks for ended jobs (default 1000 ms). */
  pollMs?: number;
  /** Told once the run's jobs are in the queue. */
  onEnqueued?: (counts: { pending: number; created: number; existing: number }) => void;
}

/** The agent's wall-clock limit plus room for the workspace, the verifier and a judge. */
export const defaultLeaseSeconds = (sampleTimeoutMs: number) => Math.ceil(sampleTimeoutMs / 1000) + 300;

export const DEFAULT_JOB_RETRIES = 2;
export const DEFAULT_RETRY_DELAY_SECONDS = 5;

interface RunJob extends QueuedRollout {
  task: GymTask;
  sample: number;
}

/** The sample's result from its ended job (see the module comment). */
function resultOf(job: RunJob, ended: EndedJob, recorded: SampleResult | undefined): SampleResult {
  if (recorded) return recorded;
  let reason: string;
  if (ended.state === 'completed') {
    const parsed = SampleResultWire.safeParse(ended.output);
    if (parsed.success && parsed.data.taskId === job.task.id && parsed.data.sample === job.sample)
      return parsed.data;
    reason = 'the rollout job completed without a result for this sample';
  } else {
    // The last failure's { message } (queue.ts); a job cancelled by hand may have none.
    const output = ended.output as { message?: unknown } | null;
    const message = output?.message ?? JSON.stringify(output);
    reason = `the rollout job ${ended.state === 'failed' ? 'failed' : 'was cancelled'} after ${ended.retryCount + 1} attempt(s): ${String(message)}`;
  }
  return infraFailedResult(job.task, job.sample, job.data.groupId, reason);
}

/** Puts the run's pending samples in the queue; returns them with the enqueue counts. */
export async function enqueueRun(
  options: GymRunOptions,
  settings: DistributedRunSettings,
  done: ReadonlyMap<string, SampleResult> = readSampleState(options.stateFile),
): Promise<{ jobs: RunJob[]; created: number; existing: number }> {
  const pending = pendingSamples(options, done);
  const shas = await settings.queue.saveTasks([...new Map(pending.map((p) => [p.task.id, p.task])).values()]);
  const agent = agentWire(options.agent);
  const version = verifierVersion(options.tasks);
  const jobs: RunJob[] = pending.map(({ task, sample }) => {
    const s = sampleJobOf(options, task, sample);
    const data: RolloutJobData = {
      v: 1,
      runId: s.runId,
      taskId: task.id,
      taskSha256: shas.get(task.id)!,
      sample,
      seed: s.seed,
      groupId: s.groupId,
      nRollouts: s.nRollouts,
      ...(s.channel ? { channel: s.channel } : {}),
      ...(s.metadata ? { metadata: s.metadata } : {}),
      ...(s.guidance ? { guidance: s.guidance } : {}),
      gatewayUrl: options.gatewayUrl,
      model: options.model,
      agent,
      sampleTimeoutMs: options.sampleTimeoutMs,
      ...(options.judge ? { judge: { baseURL: options.judge.baseURL, model: options.judge.model } } : {}),
      verifierVersion: options.verifierVersion ?? version,
      ...(options.evidence !== undefined
        ? { evidenceBytes: options.evidence === false ? 0 : options.evidence.maxBytes }
        : {}),
    };
    return {
      id: rolloutJobId(s.runId, s.groupId, task.id, sample),
      key: rolloutJobKey(s.groupId, sample),
      data,
      task,
      sample,
    };
  });
  const counts = await settings.queue.enqueue(jobs, {
    leaseSeconds: settings.leaseSeconds ?? defaultLeaseSeconds(options.sampleTimeoutMs),
    retryLimit: settings.retryLimit ?? DEFAULT_JOB_RETRIES,
    retryDelaySeconds: settings.retryDelaySeconds ?? DEFAULT_RETRY_DELAY_SECONDS,
  });
  return { jobs, ...counts };
}

export async function runGymDistributed(
  options: GymRunOptions,
  settings: DistributedRunSettings,
): Promise<{ results: SampleResult[]; summary: GymSummary }> {
  const { queue } = settings;
  const done = readSampleState(options.stateFile);
  const total = options.tasks.length * options.samples;
  const results: SampleResult[] = [...done.values()].filter((r) =>
    options.tasks.some((t) => t.id === r.taskId),
  );
  let finished = results.length;
  const { jobs, created, existing } = await enqueueRun(options, settings, done);
  settings.onEnqueued?.({ pending: jobs.length, created, existing });
  const waiting = new Map(jobs.map((j) => [j.id, j]));
  while (waiting.size > 0 && !options.signal?.aborted) {
    const ended = (await queue.ended([...waiting.keys()])).filter((e) => waiting.has(e.id));
    if (ended.length > 0) {
      const recorded = await queue.results(ended.map((e) => e.id));
      for (const e of ended) {
        const job = waiting.get(e.id);
        if (!job) continue;
        waiting.delete(e.id);
        const result = resultOf(job, e, recorded.get(e.id));
        appendFileSync(options.stateFile, `${JSON.stringify(result)}\n`);
        results.push(result);
        options.onSample?.(result, ++finished, total);
      }
    }
    if (waiting.size > 0)
      await sleep(
        settings.pollMs ?? 1_000,
        undefined,
        options.signal ? { signal: options.signal } : {},
      ).catch(() => {});
  }
  return { results, summary: summarize(results, total - jobs.length) };
}

/** `runGym`'s stand-in for `gym run --distributed` (and `guide`, `bench`) over an open queue. */
export function distributedRunner(
  settings: DistributedRunSettings,
): (options: GymRunOptions) => Promise<{ results: SampleResult[]; summary: GymSummary }> {
  return (options) => runGymDistributed(options, settings);
}
