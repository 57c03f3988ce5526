import { setMaxListeners } from 'node:events';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import type { CleanerReport, InjectionMode, SignalWire } from '@stepwise/core';
import { cleanerMetadata, type StepwiseClient, StepwiseError, StepwiseHttpError } from '@stepwise/core';
import { APIConnectionError, APIError } from 'openai';
import { z } from 'zod';
import type { AgentOutcome } from './agent/builtin.js';
import { AgentFailed } from './agent/external.js';
import { GatewayUnavailable } from './agent/installed.js';
import { type AgentSpec, agentEntry } from './agents.js';
import {
  captureWorkspace,
  DEFAULT_EVIDENCE_BOUNDS,
  type EvidenceBounds,
  uploadEvidence,
} from './evidence.js';
import { trajectoryOfBaseUrl } from './gateway-urls.js';
import { DEFAULT_LIMITS, SandboxError, type SandboxLimits } from './sandbox/index.js';
import { removeTree } from './sandbox/workspace-tree.js';
import {
  createWorkspaceVolume,
  sweepDeadWorkspaces,
  type WorkspaceVolume,
} from './sandbox/workspace-volume.js';
import { serverClient } from './server-client.js';
import { workspaceFor } from './tasks/index.js';
import type { GymTask } from './tasks/schema.js';
import { type JudgeConfig, type VerifyResult, verify } from './verify/index.js';

// One sample of a gym run (`runSample`): its trajectory, workspace, agent, verifier and scores. Apart from
// runner.ts (the run: its queue, state file and summary) because the distributed workers
// (distributed/worker.ts) run exactly this, one sample at a time.

export interface SampleResult {
  taskId: string;
  category: string;
  sample: number;
  groupId: string;
  trajectoryUid: string | null;
  status: 'complete' | 'infra_failed';
  score: number;
  code: number | null;
  rubric: number | null;
  verifierFailed: boolean;
  agent: 'finished' | 'max_turns' | 'failed';
  reason: string | null;
  toolCalls: number;
  toolErrors: number;
  durationMs: number;
  /** What the sandboxed agent tried beyond its own LLM routes, refused by the bridge (docs/security.md). */
  gatewayRefused?: string[];
}

/** A sample's result as the runner writes it (a state file's line; a rollout job's output). */
export const SampleResultLine = z.object({
  taskId: z.string(),
  category: z.string(),
  sample: z.number().int().min(0),
  groupId: z.string(),
  trajectoryUid: z.string().nullable(),
  status: z.enum(['complete', 'infra_failed']),
  score: z.number(),
  code: z.number().nullable(),
  rubric: z.number().nullable(),
  verifierFailed: z.boolean(),
  agent: z.enum(['finished', 'max_turns', 'failed']),
  reason: z.string().nullable(),
  toolCalls: z.number().int().min(0),
  toolErrors: z.number().int().min(0),
  durationMs: z.number().min(0),
  gatewayRefused: z.array(z.string()).optional(),
}) satisfies z.ZodType<SampleResult>;

/** Where and how this process runs samples: the gateway, the agent, the sandbox, the judge. */
export interface SampleEnv {
  /** Origin of a Stepwise server with the gateway routes (`http://127.0.0.1:8100`). */
  gatewayUrl: string;
  apiKey?: string;
  /** Model name sent by the agent (the gateway passes it to the engine). */
  model: string;
  agent: AgentSpec;
  /** Workspaces are made under here (and removed after verification unless `keepWorkspaces`). */
  workDir: string;
  keepWorkspaces?: boolean;
  sampleTimeoutMs: number;
  limits?: Partial<SandboxLimits>;
  unsafeNoSandbox?: boolean;
  /** A hermetic sandbox root (sandbox/rootfs.ts) for agents' tools and verifiers; default the host's /usr. */
  rootfs?: string;
  judge?: JudgeConfig;
  signal?: AbortSignal;
  /**
   * What the verifier read is kept for re-verification within these bounds (default
   * DEFAULT_EVIDENCE_BOUNDS); false: not kept.
   */
  evidence?: EvidenceBounds | false;
  /** The version the verifier's signals carry (`verifierVersion` of the run's task set). */
  verifierVersion?: string;
}

/** One sample as the run decided it: everything about it that does not depend on where it runs. */
export interface SampleJob {
  task: GymTask;
  sample: number;
  runId: string;
  groupId: string;
  /** Size of the group, sent as `n_rollouts`. */
  nRollouts: number;
  /** The built-in agent's seed (`sampleSeed`). */
  seed: number;
  channel?: string;
  guidance?: { kind: 'guided' | 'probe'; k: number; hint: string; mode?: InjectionMode };
  holdForGuidance?: number;
  /** Trajectory metadata beside the runner's own keys. */
  metadata?: Record<string, unknown>;
}

/** Points where a caller of `runSample` keeps its own records (the distributed workers do). */
export interface SampleHooks {
  /** The trajectory exists at the gateway; the agent has not started. */
  onTrajectory?: (trajectory: { trajectoryUid: string; baseUrl: string }) => Promise<void>;
  /**
   * The sample's outcome is known and its signals are stored; called before the trajectory is
   * completed with it. Throwing closes the trajectory `infra_failed` instead.
   */
  beforeComplete?: (result: SampleResult) => Promise<void>;
}

class InfraError extends StepwiseError {
  override readonly name = 'InfraError';
  constructor(message: string) {
    super(message, 502, 'gateway_failed', undefined, true);
  }
}

/** A call to the server's own API; any failure of it is the infrastructure's, worded as where and what. */
async function onServer<T>(
  env: Pick<SampleEnv, 'gatewayUrl' | 'apiKey'>,
  call: (server: StepwiseClient) => Promise<T>,
): Promise<T> {
  try {
    return await call(serverClient(env.gatewayUrl, env.apiKey));
  } catch (error) {
    if (error instanceof StepwiseHttpError)
      throw new InfraError(
        `${error.url} answered ${error.status}: ${(error.responseBody ?? error.message).slice(0, 300)}`,
      );
    throw new InfraError(
      `the gateway at ${new URL(env.gatewayUrl).origin} is unreachable (${(error as Error).message})`,
    );
  }
}

/** Is this failure the infrastructure's (sandbox, gateway, engine) rather than the agent's? */
function isInfra(error: unknown): boolean {
  if (error instanceof InfraError || error instanceof SandboxError || error instanceof GatewayUnavailable)
    return true;
  if (error instanceof APIConnectionError) return true;
  return error instanceof APIError && (error.status === undefined || error.status >= 500);
}

/**
 * One sample: init its trajectory, a fresh workspace, the agent, the verifier, the scores as signals,
 * and the trajectory completed with the score. A failure of the infrastructure (gateway, sandbox,
 * engine) comes back as a result with status `infra_failed`, its trajectory (if any) closed as such.
 */
export async function runSample(
  job: SampleJob,
  options: SampleEnv,
  hooks: SampleHooks = {},
): Promise<SampleResult> {
  const { task, sample } = job;
  const started = performance.now();
  const base = sampleBase(job);
  mkdirSync(options.workDir, { recursive: true });
  // A process killed mid-sample left its workspace mounted on the host: unmounted before this one.
  if (!options.unsafeNoSandbox) await sweepDeadWorkspaces(options.workDir);
  const dir = mkdtempSync(join(options.workDir, `${task.id}-${sample}-`));
  const workspace = join(dir, 'workspace');
  let volume: WorkspaceVolume | null = null;
  let trajectory: { trajectory_uid: string; base_url: string } | null = null;
  // What CLEANER rolled back, however the agent ended: stored before the trajectory is completed.
  const cleaner: { report: CleanerReport | null } = { report: null };
  const recordCleaner = async () => {
    if (trajectory && cleaner.report)
      await mergeMetadata(options, trajectory.base_url, { cleaner: cleanerMetadata(cleaner.report) });
  };
  // The runner owns the episode: it completes it and scores it by id, never under the agent's base_url.
  const complete = async (reward: number | null, status: 'complete' | 'infra_failed') => {
    if (!trajectory) return;
    const id = trajectory.trajectory_uid;
    await onServer(options, (server) => server.completeTrajectory(id, { reward, status }));
  };
  // The outcome goes to the caller's records first, then into the trajectory.
  const finish = async (result: SampleResult): Promise<SampleResult> => {
    await hooks.beforeComplete?.(result);
    await complete(result.score, 'complete');
    return result;
  };
  try {
    trajectory = await initSampleTrajectory(job, options);
    base.trajectoryUid = trajectory.trajectory_uid;
    await hooks.onTrajectory?.({ trajectoryUid: trajectory.trajectory_uid, baseUrl: trajectory.base_url });
    volume = await createWorkspaceVolume(workspace, workspaceQuota(options.limits), {
      mount: !options.unsafeNoSandbox,
    });
    await workspaceFor(task, workspace);
    const sandbox = sampleSandbox(options);
    const { outcome, agentError } = await runAgent(job, options, {
      baseUrl: trajectory.base_url,
      workspace,
      sandbox,
      cleaner,
    });
    // A failure to store it is the infrastructure's: a trajectory completed without it would be
    // served with its failed attempts.
    await recordCleaner();
    if (outcome === null) {
      // An agent that fails scores 0: a real outcome to learn from, not an infrastructure fault.
      return await finish({
        ...base,
        status: 'complete',
        score: 0,
        agent: 'failed',
        reason: agentError,
        durationMs: performance.now() - started,
      });
    }
    await keepEvidence(options, trajectory, workspace, outcome.answer ?? '');
    // The verifier's own files fit however full the agent left the workspace.
    await volume.grow(VERIFIER_ROOM);
    const verdict = await verify(task, workspace, {
      sandbox,
      judge: options.judge,
      finalMessage: outcome.answer ?? '',
    }).catch((error: unknown) => unreadableWorkspace(error));
    await storeVerdict(options, trajectory.trajectory_uid, task, verdict, outcome.gatewayRefused);
    return await finish(verifiedResult(base, verdict, outcome, started));
  } catch (error) {
    // The infrastructure failed: close the trajectory so serving masks it, and say why.
    const reason = `${(error as Error).name}: ${(error as Error).message}`;
    await recordCleaner().catch(() => {});
    await complete(null, 'infra_failed').catch(() => {});
    return {
      ...base,
      status: 'infra_failed',
      score: 0,
      agent: 'failed',
      reason,
      durationMs: performance.now() - started,
    };
  } finally {
    if (!options.keepWorkspaces) await removeWorkspace(dir, volume);
    else await keepWorkspace(volume);
  }
}

/** What a sample's result says whatever its outcome; `trajectoryUid` is filled in once it exists. */
type SampleBase = Omit<SampleResult, 'status' | 'score' | 'agent' | 'reason' | 'durationMs'>;

function sampleBase(job: SampleJob): SampleBase {
  return {
    taskId: job.task.id,
    category: job.task.category,
    sample: job.sample,
    groupId: job.groupId,
    trajectoryUid: null,
    code: null,
    rubric: null,
    verifierFailed: false,
    toolCalls: 0,
    toolErrors: 0,
  };
}

/** The sample's trajectory at the gateway: in its group, with the run's guidance, hold and metadata. */
function initSampleTrajectory(job: SampleJob, options: SampleEnv) {
  const { task, sample } = job;
  return onServer(options, (server) =>
    server.initTrajectory({
      groupId: job.groupId,
      nRollouts: job.nRollouts,
      ...(job.channel ? { channel: job.channel } : {}),
      ...(job.guidance
        ? {
            [job.guidance.kind]: true,
            guidanceK: job.guidance.k,
            guidanceHint: job.guidance.hint,
            ...(job.guidance.mode ? { guidanceMode: job.guidance.mode } : {}),
          }
        : {}),
      ...(job.holdForGuidance !== undefined ? { holdForGuidance: job.holdForGuidance } : {}),
      // A channel's staleness budget may hold the sample here (admission control) until the run stops.
      ...(options.signal ? { signal: options.signal } : {}),
      metadata: {
        ...job.metadata,
        task_id: task.id,
        sample,
        category: task.category,
        run_id: job.runId,
      },
    }),
  );
}

/** The sandbox the agent's tools and the verifier run in. */
function sampleSandbox(options: SampleEnv) {
  return {
    limits: options.limits,
    unsafeNoSandbox: options.unsafeNoSandbox,
    ...(options.rootfs !== undefined ? { rootfs: options.rootfs } : {}),
  };
}

/**
 * The agent's episode in the workspace, under the sample's timeout: its outcome, or (outcome null) why
 * the agent failed. A failure of the infrastructure before the timeout throws.
 */
async function runAgent(
  job: SampleJob,
  options: SampleEnv,
  at: {
    baseUrl: string;
    workspace: string;
    sandbox: ReturnType<typeof sampleSandbox>;
    cleaner: { report: CleanerReport | null };
  },
): Promise<{ outcome: AgentOutcome | null; agentError: string | null }> {
  const { task } = job;
  const { workspace, sandbox, cleaner } = at;
  let outcome: AgentOutcome | null = null;
  let agentError: string | null = null;
  const timeout = AbortSignal.timeout(options.sampleTimeoutMs);
  // Every LLM call of the sample listens on it: a long episode is not a listener leak.
  setMaxListeners(0, timeout);
  try {
    const run = {
      baseUrl: at.baseUrl,
      apiKey: options.apiKey,
      model: options.model,
      task,
      workspace,
      sandbox,
      timeoutMs: options.sampleTimeoutMs,
    };
    const { agent } = options;
    outcome = await agentEntry(agent).run(agent, run, {
      seed: job.seed,
      signal: timeout,
      onCleanerReport: (report) => {
        cleaner.report = report;
      },
      mergeMetadata: (metadata) => mergeMetadata(options, run.baseUrl, metadata),
    });
  } catch (error) {
    if (isInfra(error) && !timeout.aborted) throw error;
    agentError =
      error instanceof AgentFailed
        ? error.message
        : timeout.aborted
          ? `the agent did not finish within ${options.sampleTimeoutMs} ms`
          : `the agent failed: ${(error as Error).message}`;
  }
  return { outcome, agentError };
}

/** Stores a verdict on trajectory `id`, with what the gateway bridge refused the agent (if anything). */
async function storeVerdict(
  options: SampleEnv,
  id: string,
  task: GymTask,
  verdict: VerifyResult,
  refused: string[] | undefined,
): Promise<void> {
  // The scores land as signals on the trajectory: the verifier's code score with its sub-scores,
  // the judge's rubric score when there is one, and the combined score (also the reward).
  const version = options.verifierVersion ? { version: options.verifierVersion } : {};
  const signals: Omit<SignalWire, 'trajectory_uid'>[] = [
    {
      ...version,
      name: 'code',
      value: verdict.code,
      source: 'verifier',
      details: {
        verifier: task.verifier.kind,
        verifier_failed: verdict.verifierFailed,
        reason: verdict.reason,
        subscores: verdict.subscores,
      },
    },
    {
      ...version,
      name: 'score',
      value: verdict.score,
      source: 'verifier',
      details: { weights: task.weights },
    },
  ];
  if (verdict.rubric !== null)
    signals.push({ ...version, name: 'rubric', value: verdict.rubric, source: 'judge' });
  await onServer(options, (server) => server.addSignals(signals.map((s) => ({ ...s, trajectory_uid: id }))));
  if (refused)
    await onServer(options, (server) =>
      server.reportRefusals(id, {
        attempts: refused.slice(0, 100),
        count: refused.length,
        reason: "outside the trajectory's LLM routes: refused by the sandbox's gateway bridge",
      }),
    );
}

/** The result of a sample whose agent ended and whose workspace was verified. */
function verifiedResult(
  base: SampleBase,
  verdict: VerifyResult,
  outcome: AgentOutcome,
  started: number,
): SampleResult {
  return {
    ...base,
    status: 'complete',
    score: verdict.score,
    code: verdict.code,
    rubric: verdict.rubric,
    verifierFailed: verdict.verifierFailed,
    agent: outcome.ended === 'answer' ? 'finished' : 'max_turns',
    reason: verdict.reason,
    toolCalls: outcome.toolCalls,
    toolErrors: outcome.toolErrors,
    durationMs: performance.now() - started,
    ...(outcome.gatewayRefused ? { gatewayRefused: outcome.gatewayRefused } : {}),
  };
}

/** Room the verifier gets on top of the agent's quota, for the files it brings (ClawGym's reward/). */
export const VERIFIER_ROOM = { bytes: 64 * 1024 * 1024, inodes: 4_096 };

export function workspaceQuota(limits: Partial<SandboxLimits> | undefined) {
  return {
    bytes: (limits?.diskMb ?? DEFAULT_LIMITS.diskMb) * 1024 * 1024,
    inodes: limits?.inodes ?? DEFAULT_LIMITS.inodes,
  };
}

/** Errors a workspace the agent built can cause in whatever reads it on the host. */
const WORKSPACE_FAULTS = new Set([
  'ENAMETOOLONG',
  'ELOOP',
  'EACCES',
  'EPERM',
  'ENOTDIR',
  'EISDIR',
  'ENOENT',
  'EEXIST',
  'ENOSPC',
  'EDQUOT',
  'EFBIG',
  'EMLINK',
  'ENXIO',
  'EINVAL',
]);

/**
 * A workspace the host cannot read (paths past PATH_MAX, a tree deeper than a recursive reader's stack,
 * permissions, no room left for the verifier's files) is the agent's doing: it scores 0. Anything else
 * (the sandbox, a bug) stays the infrastructure's.
 */
export function unreadableWorkspace(error: unknown): VerifyResult {
  const e = error as NodeJS.ErrnoException;
  const fault =
    (typeof e?.code === 'string' && WORKSPACE_FAULTS.has(e.code) && !(error instanceof SandboxError)) ||
    (error instanceof RangeError && /call stack/i.test(error.message));
  if (!fault) throw error;
  return {
    score: 0,
    code: 0,
    rubric: null,
    verifierFailed: false,
    judgeFailed: false,
    reason: `the workspace could not be read: ${e.code ?? e.message}`,
    subscores: {},
    details: {},
  };
}

/** A kept workspace volume becomes a plain folder (no memory held, removable); never throws. */
async function keepWorkspace(volume: WorkspaceVolume | null): Promise<void> {
  const problem = volume ? await volume.keep() : null;
  if (problem !== null) process.emitWarning(`stepwise gym: ${problem}`);
}

/** Removes a sample's folder whatever the agent left in it; never throws (a warning says what is left). */
export async function removeWorkspace(dir: string, volume: WorkspaceVolume | null): Promise<void> {
  const unmounted = volume ? await volume.release() : null;
  const rest = unmounted ?? (await removeTree(dir));
  if (rest !== null) process.emitWarning(`stepwise gym: could not remove ${dir}: ${rest}`);
}

/**
 * Keeps the workspace the verifier is about to read, and the final message (docs/gym.md#re-verification).
 * One past the bounds is not kept and the trajectory's metadata says why; a failure to store it is
 * the infrastructure's.
 */
async function keepEvidence(
  options: SampleEnv,
  trajectory: { trajectory_uid: string; base_url: string },
  workspace: string,
  finalMessage: string,
): Promise<void> {
  if (options.evidence === false) return;
  const captured = await captureWorkspace(workspace, options.evidence ?? DEFAULT_EVIDENCE_BOUNDS);
  if (!captured.kept) {
    await mergeMetadata(options, trajectory.base_url, { evidence: { kept: false, reason: captured.reason } });
    return;
  }
  await onServer(options, (server) =>
    uploadEvidence(server, trajectory.trajectory_uid, captured, finalMessage),
  );
}

/** Merges metadata into the trajectory of `baseUrl` through the owner's route. */
async function mergeMetadata(options: SampleEnv, baseUrl: string, metadata: Record<string, unknown>) {
  const id = trajectoryOfBaseUrl(baseUrl);
  await onServer(options, (server) => server.mergeTrajectoryMetadata(id, metadata));
}
