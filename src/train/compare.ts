import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { extname, join, resolve } from 'node:path';
import { ValidationError } from '@stepwise/core/domain/errors.js';
import { storeLocation } from '@stepwise/core/store/open-store.js';
import { runTrain, type TrainOptions, type TrainResult } from './loop.js';
import { LEARNABLE_WINDOW, type SchedulePolicy, type ScheduleReport } from './schedule.js';

/*
 * `stepwise train --compare-schedulers`: the RL loop twice from one warm-up on the mixed task set
 * (always solved, learnable, never solved), with zero-variance groups dropped, once per scheduler,
 * and what each spent to reach the target on the learnable prompts (docs/trainers.md, "The scheduler").
 */

export const COMPARED: readonly SchedulePolicy[] = ['in_order', 'difficulty'];
export const COMPARE_TARGET = 0.8;

export interface ComparedRun {
  policy: SchedulePolicy;
  out: string;
  report: ScheduleReport;
  updates: number;
  /** The eval round's mean reward: the final policy on fresh copy (learnable) tasks. */
  final_policy_mean: number;
  learnable_by_version: TrainResult['learnableByVersion'];
  stopped: string | null;
  seconds: number;
}

export interface CompareReport {
  target: number;
  window: number;
  settings: Record<string, unknown>;
  runs: ComparedRun[];
  seconds: number;
}

/**
 * Runs the loop once per policy in `policies`, each in OUT/<policy>: the first warms up (unless
 * `init` is given), the others start from its warmed-up weights. Writes OUT/compare.json.
 */
export async function compareSchedulers(
  o: TrainOptions,
  policies: readonly SchedulePolicy[] = COMPARED,
): Promise<CompareReport> {
  const started = performance.now();
  const out = resolve(o.out);
  if (existsSync(join(out, 'compare.json')))
    throw new ValidationError(
      `out: ${out} already holds a comparison (compare.json); choose another directory`,
      'out',
    );
  mkdirSync(out, { recursive: true });
  const target = o.targetReward ?? COMPARE_TARGET;
  // Dropping all-equal groups is what makes the scheduler matter: the trainer's batches hold only
  // groups with a signal either way, and what differs is the rollouts spent to fill them. Rounds are
  // asynchronous: admission control over-samples by the drop rate (docs/datapool.md#admission-control).
  const common: TrainOptions = {
    ...o,
    tasks: 'mixed',
    zeroVariance: 'drop',
    async: o.async ?? 'abort',
    targetReward: target,
  };
  let init = o.init;
  const runs: ComparedRun[] = [];
  for (const policy of policies) {
    const runOut = join(out, policy);
    const print = (line: string) => o.print(`${policy.padEnd(10)} ${line}`);
    const result = await runTrain({
      ...common,
      ...runStore(o, policy),
      out: runOut,
      schedule: policy,
      init,
      print,
    });
    // The later runs start from the first one's warm-up (the same weights; a preset run has none).
    if (init === undefined && existsSync(join(runOut, 'warmup', 'config.json')))
      init = join(runOut, 'warmup');
    runs.push({
      policy,
      out: runOut,
      report: result.schedule!,
      updates: result.updates.length,
      final_policy_mean: result.evalMean,
      learnable_by_version: result.learnableByVersion,
      stopped: result.stopped,
      seconds: result.seconds,
    });
  }
  const report: CompareReport = {
    target,
    window: LEARNABLE_WINDOW,
    settings: compareSettings(common),
    runs,
    seconds: (performance.now() - started) / 1000,
  };
  writeFileSync(join(out, 'compare.json'), `${JSON.stringify(report, null, 2)}\n`);
  for (const line of compareTable(report)) o.print(line);
  return report;
}

function compareSettings(o: TrainOptions): Record<string, unknown> {
  return {
    seed: o.seed,
    versions: o.versions,
    groups: o.groups ?? null,
    rollouts: o.rollouts,
    prompts_per_kind: o.promptsPerKind ?? null,
    warmup_steps: o.warmupSteps,
    init: o.init ?? null,
    lr: o.lr,
    epochs: o.epochs,
    max_staleness: o.maxStaleness,
    async: o.async ?? null,
    concurrency: o.concurrency,
    update: o.update,
    max_rollouts: o.maxRollouts ?? null,
  };
}

/** The comparison as a short table, one row per scheduler. */
export function compareTable(report: CompareReport): string[] {
  const head = `rollouts to ${report.target} on the learnable set (mean of its last ${report.window})`;
  const rows = report.runs.map((run) => {
    const r = run.report;
    const reached = r.reached
      ? `${r.rollouts_to_target} (${r.learnable_rollouts_to_target} learnable)`
      : `not reached (best ${r.best_window_mean?.toFixed(3) ?? '-'})`;
    const zv = r.zero_variance;
    return [
      run.policy.padEnd(10),
      reached.padEnd(26),
      `${zv.fraction === null ? '-' : zv.fraction.toFixed(2)} (${zv.dropped}/${zv.reached_lease})`.padEnd(16),
      String(r.rollouts).padEnd(8),
      String(run.updates).padEnd(7),
      run.final_policy_mean.toFixed(3).padEnd(7),
      `${run.seconds.toFixed(0)} s`,
    ].join(' ');
  });
  return [
    `compare   ${head}; zero-variance groups dropped / groups that reached a lease`,
    `compare   ${['scheduler'.padEnd(10), 'rollouts to target'.padEnd(26), 'zero-variance'.padEnd(16), 'rollouts', 'updates', 'final ', 'time'].join(' ')}`,
    ...rows.map((row) => `compare   ${row}`),
  ];
}

/**
 * Each compared run's own store under `--db`: a PostgreSQL schema `<pg-schema>_<policy>`, or a SQLite
 * file `<stem>-<policy><ext>`; without `--db`, each run's folder holds its own.
 */
function runStore(o: TrainOptions, policy: string): Pick<TrainOptions, 'db' | 'pgSchema'> {
  if (o.db === undefined) return {};
  const location = storeLocation(o.db, o.pgSchema);
  if (location.kind === 'postgres') return { db: o.db, pgSchema: `${location.schema ?? 'public'}_${policy}` };
  const ext = extname(o.db);
  return { db: `${o.db.slice(0, o.db.length - ext.length)}-${policy}${ext}` };
}
