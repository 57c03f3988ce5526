import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';
import { NotFoundError, parseOrThrow, StepwiseError, StepwiseHttpError } from '@stepwise/core';
import { isInstalledKind, requireInstall } from '../agent/installs.js';
import type { AgentSpec } from '../agents.js';
import { DEFAULT_EVIDENCE_BOUNDS } from '../evidence.js';
import { trajectoryOfBaseUrl } from '../gateway-urls.js';
import { defaultToolsDir } from '../install-kit/index.js';
import { runSample, type SampleEnv, type SampleJob, type SampleResult } from '../sample.js';
import type { SandboxLimits } from '../sandbox/index.js';
import { serverClient } from '../server-client.js';
import type { GymTask } from '../tasks/schema.js';
import { type AgentWire, RolloutJobData, rolloutJobKey } from './jobs.js';
import {
  type AttemptRecord,
  AttemptSuperseded,
  type FetchedRollout,
  type RolloutAttempt,
  type RolloutQueue,
} from './queue.js';

// `stepwise worker rollouts`: N slots, each running one leased job's sample with the runner's `runSample`.
// How attempts and takeovers count each sample once: docs/distributed.md#how-it-works

export interface RolloutWorkerOptions {
  queue: RolloutQueue;
  /** Samples run at once. */
  concurrency: number;
  /** Replaces every job's gateway (the coordinator's) with this one. */
  gatewayUrl?: string;
  /** Bearer key for the gateway (agent scope). */
  apiKey?: string;
  /** Key of the LLM judge that jobs name. */
  judgeApiKey?: string;
  /** Sample workspaces are made under here. */
  workDir: string;
  keepWorkspaces?: boolean;
  limits?: Partial<SandboxLimits>;
  unsafeNoSandbox?: boolean;
  /** Where `stepwise tools install openclaw` put OpenClaw, for jobs with the openclaw agent. */
  toolsDir?: string;
  /** How long an idle slot waits before asking for a job again (default 1000 ms). */
  pollMs?: number;
  /** This worker's name in attempt records and trajectory metadata (default host:pid). */
  name?: string;
  onEvent?: (event: RolloutWorkerEvent) => void;
}

interface JobRef {
  jobId: string;
  key: string;
  /** 1 for the first attempt. */
  attempt: number;
}

export type RolloutWorkerEvent =
  | ({ kind: 'started'; trajectoryUid: string } & JobRef)
  | ({ kind: 'finished'; result: SampleResult; ownResult: boolean; completed: boolean } & JobRef)
  | ({ kind: 'replayed'; result: SampleResult; completed: boolean } & JobRef)
  | ({ kind: 'retrying'; reason: string } & JobRef)
  /** This attempt outlived its lease and a retry took the job over: its work is dropped. */
  | ({ kind: 'superseded' } & JobRef)
  | { kind: 'error'; jobId: string | null; message: string };

export interface RolloutWorkerStats {
  /** Attempts that ran a sample. */
  ran: number;
  /** Jobs completed with a result recorded earlier, without running again. */
  replayed: number;
  /** Attempts failed over to a retry. */
  retried: number;
  errors: number;
}

export interface RolloutWorker {
  readonly name: string;
  readonly stats: Readonly<RolloutWorkerStats>;
  /** Takes no new job; resolves when the running ones have ended. */
  stop(): Promise<void>;
}

/** The agent a job names, with this worker's install of it (of the job's version, or refused). */
function resolveAgent(agent: AgentWire, toolsDir: string | undefined): AgentSpec {
  if (!isInstalledKind(agent.kind)) return agent as AgentSpec;
  const { version, ...rest } = agent as Extract<AgentWire, { version: string }>;
  return { ...rest, install: requireInstall(agent.kind, { dir: toolsDir, version }) } as AgentSpec;
}

/** What a worker's slots share: its options, its name, its counters and where its events go. */
interface WorkerContext {
  options: RolloutWorkerOptions;
  queue: RolloutQueue;
  name: string;
  stats: RolloutWorkerStats;
  emit: (event: RolloutWorkerEvent) => void;
}

export function startRolloutWorker(options: RolloutWorkerOptions): RolloutWorker {
  const { queue } = options;
  const name = options.name ?? `${hostname()}:${process.pid}`;
  const pollMs = options.pollMs ?? 1_000;
  const stats: RolloutWorkerStats = { ran: 0, replayed: 0, retried: 0, errors: 0 };
  const emit = (event: RolloutWorkerEvent) => {
    if (event.kind === 'error') stats.errors++;
    options.onEvent?.(event);
  };
  const stopping = new AbortController();
  const worker: WorkerContext = { options, queue, name, stats, emit };
  const slots = Promise.all(
    Array.from({ length: Math.max(1, options.concurrency) }, () => runSlot(worker, pollMs, stopping.signal)),
  );
  return {
    name,
    stats,
    async stop() {
      stopping.abort();
      await slots;
    },
  };
}

/** One slot: fetches a job, runs it, and again, until the worker stops. */
async function runSlot(worker: WorkerContext, pollMs: number, stopping: AbortSignal): Promise<void> {
  const { queue, emit } = worker;
  while (!stopping.aborted) {
    let job: FetchedRollout | null = null;
    try {
      job = await queue.fetch();
    } catch (error) {
      emit({ kind: 'error', jobId: null, message: `fetching a job: ${(error as Error).message}` });
    }
    if (!job) {
      await sleep(pollMs, undefined, { signal: stopping }).catch(() => {});
      continue;
    }
    try {
      await handleJob(worker, job);
    } catch (error) {
      const message = (error as Error).message;
      emit({ kind: 'error', jobId: job.id, message });
      // Failing it hands it to a retry now; if even that fails, its lease runs out and the queue does.
      await queue.fail(job.id, message, job.retryCount).catch(() => {});
    }
  }
}

/** Closes an earlier attempt's trajectory; one already closed or unknown is fine. */
async function closeTrajectory(
  apiKey: string | undefined,
  gateway: string,
  baseUrl: string,
  body: { reward: number | null; status: 'complete' | 'infra_failed' },
): Promise<void> {
  const server = serverClient(gateway, apiKey);
  try {
    await server.completeTrajectory(trajectoryOfBaseUrl(baseUrl), body);
  } catch (error) {
    if (!(error instanceof StepwiseHttpError)) throw error;
    if (error.status !== 404 && error.status !== 409)
      throw new StepwiseError(
        `closing trajectory ${baseUrl}: the gateway answered ${error.status}: ${(error.responseBody ?? error.message).slice(0, 200)}`,
        502,
        'gateway_failed',
      );
  }
}

/** Runs one leased job: replays a result recorded earlier, or runs its sample and settles the job. */
async function handleJob(worker: WorkerContext, job: FetchedRollout): Promise<void> {
  const { options, queue } = worker;
  const data = parseOrThrow(RolloutJobData, job.data, 'job');
  const ref: JobRef = {
    jobId: job.id,
    key: rolloutJobKey(data.groupId, data.sample),
    attempt: job.retryCount + 1,
  };
  const gateway = options.gatewayUrl ?? data.gatewayUrl;
  // Earlier attempts without a result can record none from now on; their trajectories are closed.
  const prior = await queue.takeOver(job.id);
  const recorded = prior.find((a) => a.result !== null);
  if (recorded?.result) {
    await replayRecorded(worker, job, ref, gateway, prior, recorded, recorded.result);
    return;
  }
  for (const a of prior)
    await closeTrajectory(options.apiKey, gateway, a.baseUrl, { reward: null, status: 'infra_failed' });

  const task = await queue.loadTask(data.taskSha256);
  if (!task || task.id !== data.taskId)
    throw new NotFoundError(
      `task ${data.taskId} (sha256 ${data.taskSha256}) is not in the queue's task table`,
    );
  const env = sampleEnv(options, data, gateway);
  const sample = sampleJob(data, task, job, ref, worker.name);
  worker.stats.ran++;
  const { result, attempt } = await runAttempt(worker, job, ref, sample, env);
  await settleAttempt(worker, job, ref, result, attempt);
}

/** Completes the job with the result an earlier attempt recorded, closing every attempt's trajectory. */
async function replayRecorded(
  worker: WorkerContext,
  job: FetchedRollout,
  ref: JobRef,
  gateway: string,
  prior: readonly RolloutAttempt[],
  recorded: RolloutAttempt,
  result: SampleResult,
): Promise<void> {
  const { options } = worker;
  if (result.status === 'complete')
    await closeTrajectory(options.apiKey, gateway, recorded.baseUrl, {
      reward: result.score,
      status: 'complete',
    });
  for (const a of prior)
    if (a !== recorded)
      await closeTrajectory(options.apiKey, gateway, a.baseUrl, { reward: null, status: 'infra_failed' });
  const completed = await worker.queue.complete(job.id, result, job.retryCount);
  worker.stats.replayed++;
  worker.emit({ kind: 'replayed', ...ref, result, completed });
}

function sampleEnv(options: RolloutWorkerOptions, data: RolloutJobData, gateway: string): SampleEnv {
  return {
    gatewayUrl: gateway,
    apiKey: options.apiKey,
    model: data.model,
    agent: resolveAgent(data.agent, options.toolsDir),
    workDir: options.workDir,
    keepWorkspaces: options.keepWorkspaces,
    sampleTimeoutMs: data.sampleTimeoutMs,
    limits: options.limits,
    unsafeNoSandbox: options.unsafeNoSandbox,
    judge: data.judge ? { ...data.judge, apiKey: options.judgeApiKey ?? 'EMPTY' } : undefined,
    ...(data.verifierVersion ? { verifierVersion: data.verifierVersion } : {}),
    ...(data.evidenceBytes !== undefined
      ? {
          evidence:
            data.evidenceBytes === 0 ? false : { ...DEFAULT_EVIDENCE_BOUNDS, maxBytes: data.evidenceBytes },
        }
      : {}),
  };
}

function sampleJob(
  data: RolloutJobData,
  task: GymTask,
  job: FetchedRollout,
  ref: JobRef,
  name: string,
): SampleJob {
  return {
    task,
    sample: data.sample,
    runId: data.runId,
    groupId: data.groupId,
    nRollouts: data.nRollouts,
    seed: data.seed,
    channel: data.channel,
    guidance: data.guidance,
    // Which job and attempt made the trajectory: a retry's trajectory says so.
    metadata: { ...data.metadata, rollout_job: { id: job.id, attempt: ref.attempt, worker: name } },
  };
}

/** Runs the sample, recording this attempt as soon as its trajectory exists. */
async function runAttempt(
  worker: WorkerContext,
  job: FetchedRollout,
  ref: JobRef,
  sample: SampleJob,
  env: SampleEnv,
): Promise<{ result: SampleResult; attempt: AttemptRecord | null }> {
  const { queue, name } = worker;
  let attempt: AttemptRecord | null = null;
  const result = await runSample(sample, env, {
    onTrajectory: async (t) => {
      attempt = {
        trajectoryUid: t.trajectoryUid,
        baseUrl: t.baseUrl,
        retryCount: job.retryCount,
        worker: name,
      };
      await queue.recordAttempt(job.id, attempt);
      worker.emit({ kind: 'started', ...ref, trajectoryUid: t.trajectoryUid });
    },
    beforeComplete: (r) => queue.recordResult(job.id, attempt!, r),
  });
  return { result, attempt };
}

/** After the run: completes the job with the result on record, hands it to a retry, or leaves it to one. */
async function settleAttempt(
  worker: WorkerContext,
  job: FetchedRollout,
  ref: JobRef,
  result: SampleResult,
  attempt: AttemptRecord | null,
): Promise<void> {
  const { queue, emit } = worker;
  let stored = (await queue.results([job.id])).get(job.id);
  if (!stored && attempt && (await queue.isAbandoned(job.id, attempt.trajectoryUid))) {
    // This attempt outlived its lease and a retry owns the job now: leave the job to it.
    emit({ kind: 'superseded', ...ref });
    return;
  }
  if (!stored) {
    // Nothing recorded: the infrastructure failed this attempt. Another may do better, until the last.
    if (job.retryCount < job.retryLimit) {
      await queue.fail(job.id, result.reason ?? 'infrastructure failure', job.retryCount);
      worker.stats.retried++;
      emit({ kind: 'retrying', ...ref, reason: result.reason ?? 'infrastructure failure' });
      return;
    }
    try {
      if (attempt) await queue.recordResult(job.id, attempt, result);
      stored = result;
    } catch (error) {
      if (!(error instanceof AttemptSuperseded)) throw error;
      const winner = (await queue.results([job.id])).get(job.id);
      if (!winner) {
        emit({ kind: 'superseded', ...ref });
        return;
      }
      stored = winner;
    }
  }
  const completed = await queue.complete(job.id, stored, job.retryCount);
  emit({
    kind: 'finished',
    ...ref,
    result: stored,
    ownResult: stored.trajectoryUid === result.trajectoryUid,
    completed,
  });
}
