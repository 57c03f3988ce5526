/**
 * Curation benchmark, part 1: reward-job throughput in process. N completed trajectories (two text
 * steps each) are stored first; then a RewardService starts with the `rule` plugin (a numeric match
 * of the final answer) and scores them all from the event log (backfill): scheduling, claiming,
 * running, writing signals and marking jobs done, through the store's SQLite file. Reported: reward
 * jobs per second until the queue is empty, with and without a combination (which adds one combine
 * job per trajectory and writes the reward).
 *
 *   npm run bench:curation                      1k and 10k trajectories
 *   npm run bench:curation -- --quick           200 and 1k
 *   npm run bench:curation -- --concurrency 16  reward workers (default 4)
 *   npm run bench:curation -- --sync normal     SQLite synchronous mode of the store (default full, as `serve`)
 *   npm run bench:curation -- --sizes 5000 --modes rule   other sizes; only one mode (rule, combination)
 *
 * Prints a markdown report; does not write BENCHMARKS.md (run it on a quiet machine and paste).
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import { newStep } from '../src/domain/index.js';
import { DataPool } from '../src/pool/data-pool.js';
import { RewardService, type RewardsConfigFile, resolveRewardsConfig } from '../src/rewards/index.js';
import { openSqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { codeVersion, fix, int, log, machineInfo } from './support.js';

const args = process.argv.slice(2);
const flag = (name: string) => args.includes(name);
const option = (name: string, fallback: string) => {
  const at = args.indexOf(name);
  return at >= 0 && args[at + 1] !== undefined ? args[at + 1]! : fallback;
};

const quick = flag('--quick');
const sizes = option('--sizes', quick ? '200,1000' : '1000,10000')
  .split(',')
  .map((x) => Number(x));
if (sizes.some((x) => !Number.isInteger(x) || x < 1))
  throw new Error('--sizes must be integers, e.g. 1000,10000');
const modes = option('--modes', 'rule,combination').split(',');
const concurrency = Number(option('--concurrency', '4'));
const sync = option('--sync', 'full').toUpperCase() as 'FULL' | 'NORMAL';
if (!Number.isInteger(concurrency) || concurrency < 1)
  throw new Error('--concurrency must be an integer >= 1');
if (sync !== 'FULL' && sync !== 'NORMAL') throw new Error('--sync must be full or normal');

interface Row {
  trajectories: number;
  combination: boolean;
  jobs: number;
  seconds: number;
  functionJobsPerSecond: number;
  jobsPerSecond: number;
}

async function seed(pool: DataPool, n: number): Promise<void> {
  const batch = 500;
  for (let start = 0; start < n; start += batch) {
    const ids: string[] = [];
    for (let i = start; i < Math.min(n, start + batch); i++) {
      const id = `bench-${i}`;
      ids.push(id);
      await pool.createTrajectory({ id, groupId: `g-${i}`, channel: 'train', nRollouts: 1, metadata: {} });
    }
    const steps = ids.flatMap((id, k) =>
      [0, 1].map((index) =>
        newStep({
          trajectoryId: id,
          groupId: `g-${start + k}`,
          index,
          promptIds: [1, 2, 3, 4, 5, 6, 7, 8],
          responseIds: [9, 10, 11, 12],
          isLast: index === 1,
          messages: [{ role: 'user', content: 'What is six times seven?' }],
          responseText: index === 1 ? `The answer is ${k % 2 === 0 ? 42 : 41}.` : 'Let me think.',
        }),
      ),
    );
    await pool.submitSteps(steps, { channel: 'train', nRollouts: 1 });
    for (const id of ids) await pool.completeTrajectory(id, { reward: null, status: 'complete' });
  }
}

async function run(n: number, combination: boolean): Promise<Row> {
  const dir = mkdtempSync(join(os.tmpdir(), 'bench-curation-'));
  const store = await openSqliteStore({ path: join(dir, 'bench.db'), synchronous: sync });
  const pool = new DataPool({ store, sweepIntervalMs: 60_000 });
  try {
    log(`seeding ${int(n)} trajectories`);
    await seed(pool, n);
    const file: RewardsConfigFile = {
      functions: { answer: { plugin: 'rule', params: { kind: 'numeric', expected: 42 } } },
      channels: {
        train: { functions: ['answer'], ...(combination ? { combination: '0.9 * answer + 0.1' } : {}) },
      },
      workers: { concurrency, poll_ms: 20 },
      backfill: true,
    };
    const expected = combination ? 2 * n : n;
    log(
      `scoring ${int(n)} trajectories (${combination ? 'rule + combination' : 'rule'}, ${concurrency} workers)`,
    );
    const started = performance.now();
    const rewards = (await RewardService.open({ pool, config: resolveRewardsConfig(file) })).start();
    let seconds: number;
    for (;;) {
      const counts = await rewards.queue.counts();
      if (counts.failed > 0) throw new Error(`${counts.failed} reward jobs failed`);
      if (counts.done >= expected && counts.pending === 0 && counts.running === 0) {
        seconds = (performance.now() - started) / 1000;
        break;
      }
      await new Promise((r) => setTimeout(r, 50));
    }
    await rewards.close();
    return {
      trajectories: n,
      combination,
      jobs: expected,
      seconds,
      functionJobsPerSecond: n / seconds,
      jobsPerSecond: expected / seconds,
    };
  } finally {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

const loadAtStart = os.loadavg();
const codeAtStart = codeVersion();
const rows: Row[] = [];
for (const n of sizes) {
  if (modes.includes('rule')) rows.push(await run(n, false));
  if (modes.includes('combination')) rows.push(await run(n, true));
}

const report = [
  '### Reward jobs (rule plugin, in process)',
  '',
  ...machineInfo(`npm run bench:curation -- ${args.join(' ')}`.trim(), loadAtStart, codeAtStart, {
    stack: `SQLite store (synchronous ${sync}) + reward job queue on the same file (synchronous NORMAL)`,
    noise: 'the benchmark and the workers',
    extra: [`- Reward workers: ${concurrency}`],
  }),
  '',
  '| trajectories | scoring | jobs | time (s) | trajectories scored / s | jobs / s |',
  '|---:|---|---:|---:|---:|---:|',
  ...rows.map(
    (r) =>
      `| ${int(r.trajectories)} | ${r.combination ? 'rule + combination (writes reward)' : 'rule'} | ${int(r.jobs)} | ${fix(r.seconds)} | ${int(r.functionJobsPerSecond)} | ${int(r.jobsPerSecond)} |`,
  ),
  '',
  'Time runs from starting the reward service until its queue is empty: following the event log',
  '(backfill), queueing, claiming, running the rule, writing the signals (and the combined signal and',
  'reward), and marking the jobs done.',
].join('\n');
console.log(report);
