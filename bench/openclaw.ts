/**
 * OpenClaw benchmark: what our layers (the gateway's capture and the bubblewrap sandbox) cost the
 * stock OpenClaw agent, per task in wall time and peak RSS, against OpenClaw talking to the sim
 * directly on the host; and how many OpenClaw samples this machine runs at once before it stops
 * gaining (or starts failing).
 *
 *   npm run bench:openclaw              full run (~10 minutes), recorded in bench/results/openclaw.*
 *   npm run bench:openclaw -- --quick   fewer tasks and levels, prints only
 *
 * Needs `stepwise tools install openclaw` (or STEPWISE_TOOLS_DIR pointing at an install) and bubblewrap.
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { type RunningSimServer, startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { installOpenClaw, type OpenClawInstall } from '../packages/gym/src/agent/openclaw/install.js';
import { runOpenClawAgent } from '../packages/gym/src/agent/openclaw/run.js';
import { defaultToolsDir } from '../packages/gym/src/install-kit/index.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks, workspaceFor } from '../packages/gym/src/tasks/index.js';
import type { GymTask } from '../packages/gym/src/tasks/schema.js';
import { verify } from '../packages/gym/src/verify/index.js';
import { synthesize } from '../packages/gym-synth/src/index.js';
import { codeVersion, fix, int, log, machineInfo, recordRun, round } from './support.js';

const TIMEOUT_MS = 300_000;

const median = (values: number[]) => {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length === 0 ? Number.NaN : s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
};

type Mode = 'direct' | 'gateway' | 'sandbox+gateway';

interface TaskRun {
  mode: Mode;
  taskId: string;
  ms: number;
  rssKb: number | null;
  score: number;
}

/** `/proc/meminfo` MemAvailable, KiB. */
async function memAvailableKb(): Promise<number> {
  const { readFileSync } = await import('node:fs');
  const m = /MemAvailable:\s+(\d+)/.exec(readFileSync('/proc/meminfo', 'utf8'));
  return m ? Number(m[1]) : Number.NaN;
}

const MODES = ['direct', 'gateway', 'sandbox+gateway'] as const;

/** What every run shares: the OpenClaw install, the scratch folder, the sim and the server over it. */
interface Setup {
  install: OpenClawInstall;
  dir: string;
  sim: RunningSimServer;
  server: RunningServer;
}

/** One concurrency level of the sweep. */
interface Level {
  concurrency: number;
  samples: number;
  ms: number;
  failed: number;
  minAvailMb: number;
}

/** One task under one set-up: its workspace, OpenClaw's run (timed, RSS measured) and the verdict. */
async function oneTask(setup: Setup, mode: Mode, task: GymTask, tag: string): Promise<TaskRun> {
  const { install, dir, sim, server } = setup;
  const workspace = join(dir, `${mode.replace('+', '-')}-${tag}`);
  mkdirSync(workspace, { recursive: true });
  await workspaceFor(task, workspace);
  let baseUrl: string;
  if (mode === 'direct') baseUrl = `${sim.url}/v1`;
  else {
    const res = await fetch(`${server.url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ group_id: `bench-${mode.replace('+', '-')}-${tag}` }),
    });
    baseUrl = ((await res.json()) as { base_url: string }).base_url;
  }
  const run = await runOpenClawAgent({
    install,
    baseUrl,
    model: 'sim-qwen3',
    task,
    workspace,
    sandbox: { unsafeNoSandbox: mode !== 'sandbox+gateway' },
    timeoutMs: TIMEOUT_MS,
    measureRss: true,
  });
  if (!run.ok) throw new Error(`${mode} ${task.id}: ${run.reason}`);
  const verdict = await verify(task, workspace, {});
  rmSync(workspace, { recursive: true, force: true });
  return { mode, taskId: task.id, ms: run.durationMs, rssKb: run.peakRssKb, score: verdict.score };
}

/** Per task, the three set-ups one after another (interleaved, so drift hits all three alike). */
async function taskRuns(setup: Setup, tasks: GymTask[], reps: number): Promise<TaskRun[]> {
  const runs: TaskRun[] = [];
  for (let rep = 0; rep < reps; rep++) {
    for (const [i, task] of tasks.entries()) {
      for (const mode of MODES) {
        const run = await oneTask(setup, mode, task, `${rep}-${i}`);
        runs.push(run);
        log(
          `${mode.padEnd(16)} ${task.id}: ${fix(run.ms / 1000, 1)} s, peak RSS ${run.rssKb === null ? '?' : `${int(run.rssKb / 1024)} MiB`}, score ${run.score}`,
        );
      }
    }
  }
  return runs;
}

/** The full set-up (runner, gateway, sandbox) at rising concurrency, with the lowest MemAvailable seen. */
async function concurrencySweep(setup: Setup, tasks: GymTask[], quick: boolean): Promise<Level[]> {
  const { install, dir, server } = setup;
  const levels = quick ? [1, 2] : [1, 2, 3, 4];
  const samples = quick ? 2 : 2;
  const sweep: Level[] = [];
  for (const concurrency of levels) {
    let minAvail = await memAvailableKb();
    const timer = setInterval(async () => {
      minAvail = Math.min(minAvail, await memAvailableKb());
    }, 200);
    const started = performance.now();
    const { summary } = await runGym({
      tasks: tasks.slice(0, quick ? 2 : 4),
      samples,
      concurrency,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent: { kind: 'openclaw', install },
      runId: `sweep-${concurrency}`,
      stateFile: join(dir, `sweep-${concurrency}.jsonl`),
      workDir: join(dir, 'work'),
      sampleTimeoutMs: TIMEOUT_MS,
    });
    clearInterval(timer);
    const ms = performance.now() - started;
    const failed =
      summary.infraFailed +
      summary.agentFailed +
      (summary.samples - Math.round(summary.meanScore * summary.samples));
    sweep.push({ concurrency, samples: summary.samples, ms, failed, minAvailMb: minAvail / 1024 });
    log(
      `concurrency ${concurrency}: ${summary.samples} samples in ${fix(ms / 1000, 1)} s (${fix((60_000 * summary.samples) / ms, 1)}/min), ${failed} not solved, min MemAvailable ${int(minAvail / 1024)} MiB`,
    );
  }
  return sweep;
}

/** The largest concurrency that solved everything and still gained over the level below (≥ 10%). */
function safeConcurrency(sweep: Level[]): number {
  let safe = sweep[0]!.concurrency;
  for (let i = 1; i < sweep.length; i++) {
    const prev = sweep[i - 1]!;
    const cur = sweep[i]!;
    const gain = prev.ms / prev.samples / (cur.ms / cur.samples);
    if (cur.failed === 0 && gain >= 1.1) safe = cur.concurrency;
    else break;
  }
  return safe;
}

/** Per set-up: its runs, median wall time, median and max peak RSS, and the direct median to compare with. */
function byModeStats(runs: TaskRun[]) {
  const byMode = (mode: Mode) => runs.filter((r) => r.mode === mode);
  const med = (mode: Mode) => median(byMode(mode).map((r) => r.ms));
  const rss = (mode: Mode) => median(byMode(mode).flatMap((r) => (r.rssKb === null ? [] : [r.rssKb])));
  const maxRss = (mode: Mode) =>
    Math.max(...byMode(mode).flatMap((r) => (r.rssKb === null ? [] : [r.rssKb])));
  return { byMode, med, rss, maxRss, base: med('direct') };
}

/** The report printed (and recorded as openclaw.md): both tables and the safe concurrency. */
function reportLines(
  run: { command: string; loadAtStart: number[]; codeAtStart: string; install: OpenClawInstall },
  tasks: GymTask[],
  reps: number,
  runs: TaskRun[],
  sweep: Level[],
): string[] {
  const { install } = run;
  const { byMode, med, rss, maxRss, base } = byModeStats(runs);
  return [
    '## OpenClaw benchmark (`bench/openclaw.ts`)',
    '',
    ...machineInfo(run.command, run.loadAtStart, run.codeAtStart, {
      stack: `OpenClaw ${install.version} on Node ${install.nodeVersion}, bubblewrap sandbox, in-process server with the sim engine (\`reference\` policy)`,
      noise: 'OpenClaw, the server, sandboxes and verifiers',
    }),
    '',
    '### Per task: our layers against OpenClaw talking to the sim directly',
    '',
    `${tasks.length} synthesized tasks × ${reps} rounds, one at a time; each round runs the three set-ups back to back on the same task. "direct": OpenClaw on the host, its provider the sim server's own \`/v1\`. "gateway": on the host, its provider a trajectory's base_url (every call captured as a step). "sandbox+gateway": what \`gym run --agent openclaw\` does — bubblewrap, private HOME and /tmp, the bridged gateway port. Wall time is from the gateway check to OpenClaw's exit; peak RSS is OpenClaw's process (GNU time).`,
    '',
    '| set-up | runs | median wall time | vs direct | median peak RSS | max peak RSS | mean score |',
    '|---|---:|---:|---:|---:|---:|---:|',
    ...MODES.map((mode) => {
      const rs = byMode(mode);
      return `| ${mode} | ${rs.length} | ${fix(med(mode) / 1000, 2)} s | ${fix(med(mode) / base, 2)}× | ${int(rss(mode) / 1024)} MiB | ${int(maxRss(mode) / 1024)} MiB | ${fix(rs.reduce((a, r) => a + r.score, 0) / rs.length, 2)} |`;
    }),
    '',
    '### Concurrency',
    '',
    `\`gym run --agent openclaw\` (runner, gateway, sandbox, verifier) over ${sweep[0]!.samples} samples per level on ${os.cpus().length} cores and ${int(os.totalmem() / 1024 ** 3)} GiB:`,
    '',
    '| concurrency | samples | wall time | samples/min | not solved | min MemAvailable |',
    '|---:|---:|---:|---:|---:|---:|',
    ...sweep.map(
      (s) =>
        `| ${s.concurrency} | ${s.samples} | ${fix(s.ms / 1000, 1)} s | ${fix((60_000 * s.samples) / s.ms, 1)} | ${s.failed} | ${int(s.minAvailMb)} MiB |`,
    ),
    '',
    `Largest safe concurrency here: **${safeConcurrency(sweep)}** (every sample solved, and at least 10% faster per sample than one level lower). OpenClaw is CPU-bound (~11 CPU-seconds per task), so the useful concurrency tracks the core count; memory (~${int(maxRss('sandbox+gateway') / 1024)} MiB peak per run) allows far more.`,
    '',
  ];
}

/** The figures recorded in openclaw.jsonl. */
function figures(codeAtStart: string, install: OpenClawInstall, runs: TaskRun[], sweep: Level[]) {
  const { med, rss, maxRss, base } = byModeStats(runs);
  const each = (f: (mode: Mode) => number) => Object.fromEntries(MODES.map((mode) => [mode, f(mode)]));
  return {
    code: codeAtStart,
    openclaw: install.version,
    task_wall_s_median: each((mode) => round(med(mode) / 1000)),
    task_wall_vs_direct: each((mode) => round(med(mode) / base)),
    peak_rss_mib_median: each((mode) => round(rss(mode) / 1024, 0)),
    peak_rss_mib_max: each((mode) => round(maxRss(mode) / 1024, 0)),
    samples_per_min_by_concurrency: Object.fromEntries(
      sweep.map((s) => [s.concurrency, round((60_000 * s.samples) / s.ms, 1)]),
    ),
    not_solved_by_concurrency: Object.fromEntries(sweep.map((s) => [s.concurrency, s.failed])),
    safe_concurrency: safeConcurrency(sweep),
  };
}

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args.includes('--help') || args.includes('-h')) {
    process.stdout.write('usage: npm run bench:openclaw [-- --quick]\n');
    return;
  }
  const check = checkSandbox();
  if (!check.ok) throw new Error(`the sandbox is unavailable: ${check.reason}`);
  const quick = args.includes('--quick');
  const command =
    process.env.npm_lifecycle_event === 'bench:openclaw'
      ? `npm run bench:openclaw${args.length ? ` -- ${args.join(' ')}` : ''}  (tsx bench/openclaw.ts)`
      : `tsx bench/openclaw.ts${args.length ? ` ${args.join(' ')}` : ''}`;
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();
  const install = await installOpenClaw({ dir: defaultToolsDir(), onProgress: log });
  log(
    `OpenClaw ${install.version} on Node ${install.nodeVersion} (${install.reused ? 'cached' : 'installed now'})`,
  );
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-openclaw-'));
  const tasks = synthesize({ n: 30, seed: 21 }).slice(0, quick ? 2 : 5);
  const reference = referenceTasks(tasks);
  const sim = await startSimServer({ port: 0, policy: 'reference', tasks: reference });
  const server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: reference },
  });
  const setup: Setup = { install, dir, sim, server };
  try {
    const reps = quick ? 1 : 2;
    const runs = await taskRuns(setup, tasks, reps);
    const sweep = await concurrencySweep(setup, tasks, quick);
    const report = reportLines({ command, loadAtStart, codeAtStart, install }, tasks, reps, runs, sweep).join(
      '\n',
    );
    process.stdout.write(`${report}\n`);
    if (quick) return;
    log(`wrote ${recordRun('openclaw', figures(codeAtStart, install, runs, sweep), report).join(', ')}`);
  } finally {
    await server.close();
    await sim.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
