import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { RunningServer } from '@stepwise/core/server/server.js';
import type { SampleResult } from '@stepwise/gym/runner.js';
import { DEFAULT_ADAM_EPS, DEFAULT_CLIP, DEFAULT_PROMPTS_PER_KIND } from './defaults.js';
import { PYTHON_CLIENT_DIR } from './python.js';
import { rewardCurveHtml } from './report.js';
import { scheduleReport } from './schedule.js';
import { COPY_TARGETS, taskKind } from './tasks.js';
import type { TrainerEvents } from './trainer-events.js';
import type { Rounds, TrainOptions, TrainResult, VersionReward } from './types.js';

// What a `stepwise train` run leaves behind: rewards by policy version, train.json and the reward curve.

const STEPWISE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** The run's result from its rounds: rewards by version, and for a registered set what was spent. */
export async function summarize(
  c: Pick<Rounds, 'o' | 'pool' | 'samples' | 'fixed' | 'ledger'>,
  channel: string,
  r: { events: TrainerEvents; stopped: string | null; started: number; evalMean: number },
): Promise<TrainResult> {
  const versions = await versionsOf(c.pool, c.samples);
  const rewardByVersion = rewardsByVersion(c.samples, versions);
  const kinds = new Map((c.fixed ?? []).map((t) => [t.id, taskKind(t)]));
  const learnable = c.samples.filter(
    (s) => s.channel === channel && kinds.get(s.result.taskId) === 'learnable',
  );
  const staleDropped = (await c.pool.stats(channel)).dropped.stale ?? 0;
  const schedule =
    c.fixed === null
      ? null
      : await scheduleReport(c.pool, channel, {
          policy: c.o.schedule ?? 'walk',
          ledger: c.ledger,
          tasks: c.fixed,
        });
  return {
    out: resolve(c.o.out),
    rewardByVersion,
    updates: r.events.updates,
    staleDropped,
    schedule,
    learnableByVersion: c.o.tasks === 'mixed' ? rewardsByVersion(learnable, versions) : null,
    stopped: r.stopped,
    evalMean: r.evalMean,
    seconds: (performance.now() - r.started) / 1000,
  };
}

/** The policy version that generated each complete rollout (its oldest step's), by trajectory. */
export async function versionsOf(
  pool: RunningServer['pool'],
  samples: { result: SampleResult }[],
): Promise<Map<string, number>> {
  const versions = new Map<string, number>();
  for (const { result } of samples) {
    if (result.status !== 'complete' || !result.trajectoryUid) continue;
    const steps = await pool.getTrajectorySteps(result.trajectoryUid);
    if (steps.length > 0) versions.set(result.trajectoryUid, Math.min(...steps.map((s) => s.policyVersion)));
  }
  return versions;
}

/** Mean reward by the policy version that generated each complete rollout. */
export function rewardsByVersion(
  samples: { result: SampleResult }[],
  versions: ReadonlyMap<string, number>,
): VersionReward[] {
  const byVersion = new Map<number, number[]>();
  for (const { result } of samples) {
    const version = result.trajectoryUid ? versions.get(result.trajectoryUid) : undefined;
    if (version === undefined) continue;
    byVersion.set(version, [...(byVersion.get(version) ?? []), result.score]);
  }
  return [...byVersion.entries()]
    .sort(([a], [b]) => a - b)
    .map(([version, rewards]) => ({
      version,
      rollouts: rewards.length,
      meanReward: rewards.reduce((a, b) => a + b, 0) / rewards.length,
    }));
}

export function writeOutputs(
  result: TrainResult,
  o: TrainOptions,
  c: {
    python: string;
    engineUrl: string;
    startVersion: number;
    groups: number;
  },
): void {
  const versions = pythonVersions(c.python);
  const manifest = {
    reward_by_version: result.rewardByVersion.map((v) => v.meanReward),
    versions: result.rewardByVersion.map((v) => v.version),
    rollouts_by_version: result.rewardByVersion.map((v) => v.rollouts),
    seed: o.seed,
    updates: o.update,
    settings: settingsOf(o, c),
    model: versions.model,
    software: {
      stepwise: STEPWISE_VERSION,
      node: process.versions.node,
      ...versions.packages,
    },
    stale_groups_dropped: result.staleDropped,
    trainer_updates: result.updates,
    // A registered task set: what the training rounds spent, by kind, and the learnable curve.
    schedule: result.schedule,
    learnable_by_version: result.learnableByVersion,
    stopped: result.stopped,
    seconds: result.seconds,
  };
  writeFileSync(join(result.out, 'train.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const points = result.rewardByVersion.map((v) => ({ x: v.version, y: v.meanReward }));
  writeFileSync(
    join(result.out, 'reward.html'),
    rewardCurveHtml(
      `stepwise train: mean reward by policy version (seed ${o.seed})`,
      [
        {
          label: o.update ? 'RL updates' : 'no updates (control)',
          points,
          color: o.update ? '#1f77b4' : '#888',
        },
      ],
      [
        `Copy tasks (${c.groups} per round, ${o.rollouts} rollouts each) with the tiny Qwen3-architecture model; ${o.init === undefined ? `warm-up ${o.warmupSteps} SFT steps` : `started from ${o.init}`}; max_staleness ${o.maxStaleness}.`,
        'Each rollout counts toward the policy version that generated its first step.',
      ],
    ),
  );
}

/** The settings train.json records. */
function settingsOf(o: TrainOptions, c: { startVersion: number; groups: number }) {
  return {
    versions: o.versions,
    target_reward: o.targetReward ?? null,
    rollouts: o.rollouts,
    task:
      o.tasks === 'mixed'
        ? 'mixed: always solved, copy input.txt to answer.md (learnable), never solved (src/train/tasks.ts)'
        : 'copy input.txt to answer.md with one exec call (src/train/tasks.ts)',
    warmup_targets: COPY_TARGETS,
    groups: c.groups,
    warmup_steps: o.init === undefined ? o.warmupSteps : 0,
    init: o.init === undefined ? null : resolve(o.init),
    warmup_lr: o.warmupLr,
    lr: o.lr,
    adam_eps: o.adamEps ?? DEFAULT_ADAM_EPS,
    clip: o.clip ?? DEFAULT_CLIP,
    epochs: o.epochs,
    max_staleness: o.maxStaleness,
    async: o.async ?? null,
    concurrency: o.concurrency,
    start_version: c.startVersion,
    schedule: o.schedule ?? null,
    tasks: o.tasks ?? 'copy',
    prompts_per_kind:
      o.schedule || o.tasks === 'mixed' ? (o.promptsPerKind ?? DEFAULT_PROMPTS_PER_KIND) : null,
    zero_variance: o.zeroVariance ?? 'keep',
    max_rollouts: o.maxRollouts ?? null,
  };
}

/** The model config and package versions of the training side, from its own interpreter. */
function pythonVersions(python: string): { model: unknown; packages: Record<string, string> } {
  const script = [
    'import json, sys, torch, transformers',
    'from stepwise_client.models import PRESETS',
    'print(json.dumps({"model": {"preset": "tiny", **PRESETS["tiny"], "architecture": "Qwen3ForCausalLM"},',
    ' "packages": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}}))',
  ].join('\n');
  const run = spawnSync(python, ['-c', script], { encoding: 'utf8', cwd: PYTHON_CLIENT_DIR });
  if (run.status !== 0) return { model: { preset: 'tiny' }, packages: {} };
  return JSON.parse(run.stdout) as { model: unknown; packages: Record<string, string> };
}
