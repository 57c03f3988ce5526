/**
 * Gym benchmark: how fast a sandbox starts, how many samples per minute the runner gets through with
 * the sim engine, and what the runner (agent loop + gateway + pool) costs over executing the same
 * tool calls directly.
 *
 *   npm run bench:gym              full run (~3-5 minutes), recorded in bench/results/gym.*
 *   npm run bench:gym -- --quick   fewer tasks and starts, prints only
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { startServer } from '../packages/core/src/server/server.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox, runInSandbox } from '../packages/gym/src/sandbox/index.js';
import { scheduledRunner } from '../packages/gym/src/scheduled.js';
import { referenceTasks, workspaceFor } from '../packages/gym/src/tasks/index.js';
import type { GymTask } from '../packages/gym/src/tasks/schema.js';
import { runTool } from '../packages/gym/src/tools/index.js';
import { verify } from '../packages/gym/src/verify/index.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { codeVersion, fix, int, log, machineInfo, percentile, recordRun, round } from './support.js';

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

/** Starts `n` sandboxes one after another, each running `true`; returns their wall times in ms. */
async function sandboxStarts(n: number, dir: string): Promise<number[]> {
  const workspace = join(dir, 'start-ws');
  mkdirSync(workspace, { recursive: true });
  const times: number[] = [];
  for (let i = 0; i < n + 3; i++) {
    const started = performance.now();
    const result = await runInSandbox({ workspace, mountDir: '/root/.openclaw/workspace' }, 'true');
    if (result.exitCode !== 0) throw new Error(`sandbox start failed: ${result.stderr}`);
    if (i >= 3) times.push(performance.now() - started); // 3 warm-up starts
  }
  return times;
}

/** The same samples without agent loop, gateway or pool: reference actions run straight through the tools. */
async function direct(tasks: readonly GymTask[], concurrency: number, dir: string): Promise<number> {
  const started = performance.now();
  let next = 0;
  const worker = async () => {
    while (next < tasks.length) {
      const i = next++;
      const task = tasks[i]!;
      const workspace = join(dir, `direct-${i}`);
      await workspaceFor(task, workspace);
      const sandbox = { workspace, mountDir: task.mountDir };
      for (const action of task.referenceActions ?? [])
        await runTool(action.name, action.arguments, { workspace, mountDir: task.mountDir, sandbox });
      const verdict = await verify(task, workspace, {});
      if (verdict.score !== 1) throw new Error(`${task.id}: reference actions scored ${verdict.score}`);
      rmSync(workspace, { recursive: true, force: true });
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  return performance.now() - started;
}

/** A server in process on a fresh store, the sim playing the tasks' reference actions without mistakes. */
function simServer(tasks: readonly GymTask[], dir: string) {
  return startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: referenceTasks(tasks), errorRate: 0 },
  });
}

/** One sample of each task, the built-in agent, at `concurrency`: the list walk's and the scheduler's. */
function runOptions(
  tasks: readonly GymTask[],
  concurrency: number,
  gatewayUrl: string,
  dir: string,
): GymRunOptions {
  return {
    tasks,
    samples: 1,
    concurrency,
    gatewayUrl,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 16 },
    runId: `bench-${concurrency}`,
    stateFile: join(dir, 'state.jsonl'),
    workDir: join(dir, 'work'),
    sampleTimeoutMs: 300_000,
  };
}

interface RunFigures {
  concurrency: number;
  samples: number;
  ms: number;
  /** The same samples taken from the pool's prompt scheduler (one group per prompt). */
  scheduledMs: number;
  /** The list walk keeping no evidence for re-verification (`--evidence-mb 0`): the baseline of its cost. */
  noEvidenceMs: number;
  directMs: number;
  meanScore: number;
  steps: number;
}

async function gymRun(tasks: readonly GymTask[], concurrency: number, dir: string): Promise<RunFigures> {
  const runDir = mkdtempSync(join(dir, `run-${concurrency}-`));
  const server = await simServer(tasks, runDir);
  try {
    const started = performance.now();
    const { results, summary } = await runGym(runOptions(tasks, concurrency, server.url, runDir));
    const ms = performance.now() - started;
    if (summary.infraFailed > 0)
      throw new Error(`${summary.infraFailed} samples failed in the infrastructure`);
    const stats = await server.pool.stats('train');
    const scheduledMs = await freshRun('scheduled', tasks, concurrency, runDir, (o) =>
      scheduledRunner({ groups: tasks.length })({ ...o, channel: 'train' }),
    );
    const noEvidenceMs = await freshRun('no-evidence', tasks, concurrency, runDir, (o) =>
      runGym({ ...o, evidence: false }),
    );
    const directMs = await direct(tasks, concurrency, runDir);
    return {
      concurrency,
      samples: results.length,
      ms,
      scheduledMs,
      noEvidenceMs,
      directMs,
      meanScore: summary.meanScore,
      steps: stats.produced.steps,
    };
  } finally {
    await server.close();
    rmSync(runDir, { recursive: true, force: true });
  }
}

/**
 * The same samples run another way on a fresh server (the scheduler's: each task one group, asked
 * for in turn; or the list walk keeping no evidence): its wall time.
 */
async function freshRun(
  label: string,
  tasks: readonly GymTask[],
  concurrency: number,
  dir: string,
  run: (options: GymRunOptions) => Promise<{ results: unknown[]; summary: { infraFailed: number } }>,
): Promise<number> {
  const runDir = mkdtempSync(join(dir, `${label}-${concurrency}-`));
  const server = await simServer(tasks, runDir);
  try {
    const started = performance.now();
    const { results, summary } = await run(runOptions(tasks, concurrency, server.url, runDir));
    const ms = performance.now() - started;
    if (results.length !== tasks.length || summary.infraFailed > 0)
      throw new Error(
        `${label} run: ${results.length} samples, ${summary.infraFailed} failed in the infrastructure`,
      );
    return ms;
  } finally {
    await server.close();
    rmSync(runDir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write('usage: npm run bench:gym [-- --quick]\n');
    return;
  }
  const check = checkSandbox();
  if (!check.ok) throw new Error(`the sandbox is unavailable: ${check.reason}`);
  const quick = args.includes('--quick');
  const command =
    process.env.npm_lifecycle_event === 'bench:gym'
      ? `npm run bench:gym${args.length ? ` -- ${args.join(' ')}` : ''}  (tsx bench/gym.ts)`
      : `tsx bench/gym.ts${args.length ? ` ${args.join(' ')}` : ''}`;
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-gym-'));
  try {
    const starts = await sandboxStarts(quick ? 20 : 100, dir);
    log(`sandbox start: p50 ${fix(median(starts), 1)} ms, p99 ${fix(percentile(starts, 99), 1)} ms`);
    const tasks = synthesize({ n: quick ? 24 : 96, seed: 11 });
    const runs: RunFigures[] = [];
    for (const concurrency of [8, 32]) {
      const r = await gymRun(tasks, concurrency, dir);
      runs.push(r);
      log(
        `concurrency ${concurrency}: ${r.samples} samples in ${fix(r.ms / 1000, 1)} s (${fix((60_000 * r.samples) / r.ms, 0)}/min); scheduled ${fix(r.scheduledMs / 1000, 1)} s (${fix((60_000 * r.samples) / r.scheduledMs, 0)}/min); no evidence ${fix(r.noEvidenceMs / 1000, 1)} s; direct ${fix(r.directMs / 1000, 1)} s`,
      );
    }
    const lines = [
      '## Gym benchmark (`bench/gym.ts`)',
      '',
      ...machineInfo(command, loadAtStart, codeAtStart, {
        stack: `bubblewrap sandbox, in-process server with the sim engine`,
        noise: 'runner, server, sandboxes and verifiers',
      }),
      '',
      '### Sandbox start',
      '',
      `${starts.length} sandboxes started one after another, each running \`true\` in a workspace (bubblewrap with the supervisor, limits and a private /tmp; from the call to the exit status): **p50 ${fix(median(starts), 1)} ms, p99 ${fix(percentile(starts, 99), 1)} ms**.`,
      '',
      '### Runner throughput and overhead',
      '',
      `${tasks.length} synthesized tasks (all six categories), one sample each, built-in agent, sim \`reference\` policy without injected mistakes (every sample solves its task). "Direct" runs the same reference tool calls straight through the tools and the same verifier — no agent loop, gateway, LLM calls or pool — at the same concurrency.`,
      '',
      '| concurrency | samples | gym wall time | samples/min | steps stored | mean score | direct wall time | gym / direct |',
      '|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...runs.map(
        (r) =>
          `| ${r.concurrency} | ${r.samples} | ${fix(r.ms / 1000, 1)} s | ${int((60_000 * r.samples) / r.ms)} | ${int(r.steps)} | ${fix(r.meanScore, 3)} | ${fix(r.directMs / 1000, 1)} s | ${fix(r.ms / r.directMs, 2)}× |`,
      ),
      '',
      '### The prompt scheduler against the list walk',
      '',
      "The same samples with their work from the pool's prompt scheduler (`stepwise gym run --groups`: each worker asks `POST /v1/channels/train/prompts/next` for one prompt, runs it as a group, and the group's settling frees it), on a fresh server, right after the list walk.",
      '',
      '| concurrency | list walk samples/min | scheduled samples/min | scheduled / list wall time |',
      '|---:|---:|---:|---:|',
      ...runs.map(
        (r) =>
          `| ${r.concurrency} | ${int((60_000 * r.samples) / r.ms)} | ${int((60_000 * r.samples) / r.scheduledMs)} | ${fix(r.scheduledMs / r.ms, 2)}× |`,
      ),
      '',
      '### Keeping evidence for re-verification',
      '',
      'The list walk again on a fresh server keeping no evidence (`--evidence-mb 0`), against the default, which reads each final workspace, hashes its files and uploads the blobs the store lacks and the manifest (docs/gym.md#re-verification).',
      '',
      '| concurrency | with evidence samples/min | without samples/min | with / without wall time |',
      '|---:|---:|---:|---:|',
      ...runs.map(
        (r) =>
          `| ${r.concurrency} | ${int((60_000 * r.samples) / r.ms)} | ${int((60_000 * r.samples) / r.noEvidenceMs)} | ${fix(r.ms / r.noEvidenceMs, 2)}× |`,
      ),
      '',
      `Each sample makes ${fix(runs[0]!.steps / runs[0]!.samples, 1)} LLM calls on average (one per tool call plus the closing answer). Most of a sample's time is the sandboxed \`exec\` calls and the verifier on ${os.cpus().length} cores; the difference to "direct" is the agent loop, the gateway's capture and the pool's commits.`,
      '',
    ];
    const report = lines.join('\n');
    process.stdout.write(`${report}\n`);
    if (quick) return;
    const each = (f: (r: RunFigures) => number) => Object.fromEntries(runs.map((r) => [r.concurrency, f(r)]));
    const figures = {
      code: codeAtStart,
      tasks: tasks.length,
      sandbox_start_ms: { p50: round(median(starts), 1), p99: round(percentile(starts, 99), 1) },
      samples_per_min: each((r) => round((60_000 * r.samples) / r.ms, 0)),
      scheduled_samples_per_min: each((r) => round((60_000 * r.samples) / r.scheduledMs, 0)),
      scheduled_vs_list: each((r) => round(r.scheduledMs / r.ms)),
      evidence_vs_none: each((r) => round(r.ms / r.noEvidenceMs)),
      gym_wall_s: each((r) => round(r.ms / 1000, 1)),
      direct_wall_s: each((r) => round(r.directMs / 1000, 1)),
      gym_vs_direct: each((r) => round(r.ms / r.directMs)),
      mean_score: each((r) => round(r.meanScore, 3)),
    };
    log(`wrote ${recordRun('gym', figures, report).join(', ')}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
