import { mkdirSync, mkdtempSync } from 'node:fs';
import { join } from 'node:path';
import type { Evidence, EvidenceSummary, Signal, SignalInput, Trajectory } from '@stepwise/core';
import { materializeWorkspace, verifierVersion } from './evidence.js';
import { removeWorkspace, unreadableWorkspace, VERIFIER_ROOM, workspaceQuota } from './sample.js';
import type { SandboxLimits } from './sandbox/index.js';
import { createWorkspaceVolume, sweepDeadWorkspaces } from './sandbox/workspace-volume.js';
import type { GymTask } from './tasks/schema.js';
import { type JudgeConfig, type VerifyResult, verify } from './verify/index.js';

/*
 * `stepwise rewards reverify` (docs/gym.md#re-verification): a new verifier version scores stored
 * episodes again from their evidence, without any inference. The new scores are signals of the new
 * version beside the old ones (nothing is overwritten); the report says how many rewards changed
 * and which way. A channel's serving is moved to them only by pinning it (ChannelConfig.reward_pin).
 */

/** What reverify reads and writes of a store; a DataPool is one. */
export interface ReverifyStore {
  listEvidence(query: {
    channel?: string | null;
    after?: string | null;
    limit?: number;
  }): Promise<EvidenceSummary[]>;
  getEvidence(trajectoryId: string): Promise<Evidence | null>;
  evidenceBlobs(sha256s: string[]): Promise<Map<string, Uint8Array>>;
  getTrajectory(id: string): Promise<Trajectory | null>;
  getSignals(trajectoryId: string): Promise<Signal[]>;
  addSignals(signals: SignalInput[]): Promise<Signal[]>;
}

export interface ReverifyOptions {
  /** The task set with the new verifiers. */
  tasks: readonly GymTask[];
  /** The version the new signals carry (default: `verifierVersion(tasks)`). */
  version?: string;
  /** Only this channel's trajectories (default: all with evidence). */
  channel?: string | null;
  /** Compare with this version's score (default: each trajectory's current score before the run). */
  against?: string | null;
  /** Score and report, write nothing. */
  dryRun?: boolean;
  /** Score again trajectories that already have a score of this version. */
  force?: boolean;
  /** Episodes verified at once (default 2). */
  concurrency?: number;
  /** Where the rebuilt workspaces go while they are verified. */
  workDir: string;
  limits?: Partial<SandboxLimits>;
  unsafeNoSandbox?: boolean;
  rootfs?: string;
  judge?: JudgeConfig;
  onProgress?: (done: number, total: number) => void;
}

export interface ScoreChange {
  trajectory_uid: string;
  task_id: string;
  before: number;
  after: number;
}

export interface ReverifyReport {
  version: string;
  against: string | null;
  dry_run: boolean;
  /** Trajectories with evidence looked at. */
  examined: number;
  /** Scored by the new version (written unless a dry run). */
  rescored: number;
  /** Of those with an earlier score to compare: went up, went down, stayed. */
  up: number;
  down: number;
  unchanged: number;
  /** Rescored with no earlier score to compare. */
  first_score: number;
  /** The new verifier failed (its own fault): scored 0 as the runner does, counted here too. */
  verifier_failed: number;
  skipped: { already_at_version: number; no_task: number; not_in_task_set: number };
  /** The infrastructure failed (sandbox, store): nothing written for these. */
  failed: { trajectory_uid: string; reason: string }[];
  /** Every score that changed. */
  changes: ScoreChange[];
}

const PAGE = 200;

/** Scores every stored episode with evidence (of `channel`) under the new verifiers. */
export async function reverify(store: ReverifyStore, options: ReverifyOptions): Promise<ReverifyReport> {
  const version = options.version ?? verifierVersion(options.tasks);
  const report: ReverifyReport = {
    version,
    against: options.against ?? null,
    dry_run: options.dryRun ?? false,
    examined: 0,
    rescored: 0,
    up: 0,
    down: 0,
    unchanged: 0,
    first_score: 0,
    verifier_failed: 0,
    skipped: { already_at_version: 0, no_task: 0, not_in_task_set: 0 },
    failed: [],
    changes: [],
  };
  const tasks = new Map(options.tasks.map((t) => [t.id, t]));
  mkdirSync(options.workDir, { recursive: true });
  if (!options.unsafeNoSandbox) await sweepDeadWorkspaces(options.workDir);
  const total = await countEvidence(store, options.channel ?? null);
  for (let after: string | null = null; ; ) {
    const page = await store.listEvidence({ channel: options.channel ?? null, after, limit: PAGE });
    if (page.length === 0) break;
    after = page.at(-1)!.trajectoryId;
    await inParallel(page, options.concurrency ?? 2, async (row) => {
      await reverifyOne(store, row.trajectoryId, tasks, version, options, report).catch((error: unknown) => {
        report.failed.push({ trajectory_uid: row.trajectoryId, reason: (error as Error).message });
      });
      report.examined++;
      options.onProgress?.(report.examined, total);
    });
  }
  report.changes.sort((a, b) => (a.trajectory_uid < b.trajectory_uid ? -1 : 1));
  return report;
}

/** How many trajectories have evidence (for progress: ids only, 10,000 a page). */
async function countEvidence(store: ReverifyStore, channel: string | null): Promise<number> {
  let total = 0;
  for (let after: string | null = null; ; ) {
    const page = await store.listEvidence({ channel, after, limit: 10_000 });
    if (page.length === 0) return total;
    total += page.length;
    after = page.at(-1)!.trajectoryId;
  }
}

/** The task id a gym trajectory ran (its own, or its metadata's). */
function taskIdOf(trajectory: Trajectory): string | null {
  if (trajectory.taskId) return trajectory.taskId;
  const id = trajectory.metadata.task_id;
  return typeof id === 'string' && id !== '' ? id : null;
}

/** The latest trajectory-level verifier `score` (of `version`, when given) in a signal history. */
function latestScore(history: readonly Signal[], version: string | null): Signal | null {
  let found: Signal | null = null;
  for (const s of history)
    if (s.stepIndex === null && s.name === 'score' && s.source === 'verifier')
      if (version === null || s.version === version) found = s;
  return found;
}

async function reverifyOne(
  store: ReverifyStore,
  id: string,
  tasks: ReadonlyMap<string, GymTask>,
  version: string,
  options: ReverifyOptions,
  report: ReverifyReport,
): Promise<void> {
  const trajectory = await store.getTrajectory(id);
  const taskId = trajectory && taskIdOf(trajectory);
  if (!taskId) return void report.skipped.no_task++;
  const task = tasks.get(taskId);
  if (!task) return void report.skipped.not_in_task_set++;
  const history = await store.getSignals(id);
  if (!options.force && latestScore(history, version)) return void report.skipped.already_at_version++;
  const before = latestScore(history, options.against ?? null);
  const evidence = (await store.getEvidence(id))!;
  const verdict = await verifyEvidence(task, evidence, store, options);
  report.rescored++;
  if (verdict.verifierFailed) report.verifier_failed++;
  if (before === null) report.first_score++;
  else if (verdict.score > before.value) report.up++;
  else if (verdict.score < before.value) report.down++;
  else report.unchanged++;
  if (before !== null && verdict.score !== before.value)
    report.changes.push({ trajectory_uid: id, task_id: taskId, before: before.value, after: verdict.score });
  if (!options.dryRun) await store.addSignals(verdictSignals(id, task, verdict, version, before));
}

/** Rebuilds the kept workspace in a fresh volume, as the runner made it, and verifies it there. */
async function verifyEvidence(
  task: GymTask,
  evidence: Evidence,
  store: ReverifyStore,
  options: ReverifyOptions,
): Promise<VerifyResult> {
  const shas = evidence.entries.flatMap((e) => (e.type === 'file' ? [e.sha256] : []));
  const blobs = await store.evidenceBlobs(shas);
  const dir = mkdtempSync(join(options.workDir, `${task.id}-reverify-`));
  const workspace = join(dir, 'workspace');
  const quota = workspaceQuota(options.limits);
  // Room for what was kept even under a smaller quota than the run's, and for the verifier's files.
  const volume = await createWorkspaceVolume(
    workspace,
    {
      bytes: Math.max(quota.bytes, evidence.bytes) + VERIFIER_ROOM.bytes,
      inodes: Math.max(quota.inodes, evidence.entries.length) + VERIFIER_ROOM.inodes,
    },
    { mount: !options.unsafeNoSandbox },
  );
  try {
    await materializeWorkspace(workspace, evidence.entries, blobs);
    const sandbox = {
      limits: options.limits,
      unsafeNoSandbox: options.unsafeNoSandbox,
      ...(options.rootfs !== undefined ? { rootfs: options.rootfs } : {}),
    };
    return await verify(task, workspace, {
      sandbox,
      judge: options.judge,
      finalMessage: evidence.finalMessage ?? '',
    }).catch((error: unknown) => unreadableWorkspace(error));
  } finally {
    await removeWorkspace(dir, volume);
  }
}

/** The verdict as the runner stores it (runSample's storeVerdict), marked as a re-verification. */
function verdictSignals(
  id: string,
  task: GymTask,
  verdict: VerifyResult,
  version: string,
  before: Signal | null,
): SignalInput[] {
  const reverified = {
    reverified: true,
    previous: before && { value: before.value, version: before.version },
  };
  const signals: SignalInput[] = [
    {
      trajectoryId: id,
      stepIndex: null,
      name: 'code',
      value: verdict.code,
      source: 'verifier',
      version,
      details: {
        verifier: task.verifier.kind,
        verifier_failed: verdict.verifierFailed,
        reason: verdict.reason,
        subscores: verdict.subscores,
        ...reverified,
      },
    },
    {
      trajectoryId: id,
      stepIndex: null,
      name: 'score',
      value: verdict.score,
      source: 'verifier',
      version,
      details: { weights: task.weights, ...reverified },
    },
  ];
  if (verdict.rubric !== null)
    signals.push({
      trajectoryId: id,
      stepIndex: null,
      name: 'rubric',
      value: verdict.rubric,
      source: 'judge',
      version,
      details: reverified,
    });
  return signals;
}

/** Runs `work` over `items`, at most `limit` at once. */
async function inParallel<T>(
  items: readonly T[],
  limit: number,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const lane = async () => {
    while (next < items.length) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, lane));
}
