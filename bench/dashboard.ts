/**
 * `npm run bench:dashboard`: server time to render each dashboard view over a store of 1M steps
 * (issue 8: p95 <= 300 ms). The store is filled once straight through the store (100,000
 * trajectories x 10 steps in groups of 8, with the messages an agent would have sent) and kept in
 * tmp/ for later runs. Each view is requested repeatedly over HTTP on loopback from one client;
 * the JSON list API (`GET /v1/trajectories`) is measured in the same run as the baseline.
 *
 *   npm run bench:dashboard [-- --steps N] [--requests N] [--write]
 *
 * `--write` records the run: its figures in bench/results/dashboard.jsonl, its report in dashboard.md.
 */
import { existsSync, mkdirSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { type NewStep, newStep } from '../packages/core/src/domain/index.js';
import { poolOps } from '../packages/core/src/pool/core.js';
import { startServer } from '../packages/core/src/server/server.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { SubmitRequest } from '../packages/core/src/store/store.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import {
  codeVersion,
  exitOnHelp,
  fix,
  int,
  log,
  machineInfo,
  percentile,
  recordRun,
  round,
  verdict,
} from './support.js';

exitOnHelp(import.meta.url);
const { values: args } = parseArgs({
  options: {
    steps: { type: 'string', default: '1000000' },
    requests: { type: 'string', default: '40' },
    write: { type: 'boolean', default: false },
  },
});
const STEPS = Number(args.steps);
const REQUESTS = Number(args.requests);
const STEPS_PER_TRAJECTORY = 10;
const ROLLOUTS = 8;
const TARGET_MS = 300;

const ROOT = resolve(import.meta.dirname, '..');
const DIR = join(ROOT, 'tmp', 'bench-dashboard');

/** One trajectory: a growing chat (system, task, then call / tool result pairs), tokens random. */
function trajectory(k: number, random: () => number): NewStep[] {
  const id = `t${k}`;
  const group = `g${Math.floor(k / ROLLOUTS)}`;
  const tokens = (n: number) => Array.from({ length: n }, () => Math.floor(random() * 151_000));
  const messages: Record<string, unknown>[] = [
    { role: 'system', content: 'You are a careful agent working in a sandboxed workspace.' },
    { role: 'user', content: `Task ${k % 500}: summarise the files under data/ into report.md.` },
  ];
  let history = tokens(300);
  const steps: NewStep[] = [];
  const reward = random() < 0.5 ? 1 : 0;
  for (let i = 0; i < STEPS_PER_TRAJECTORY; i++) {
    const prompt = history.concat(tokens(40));
    const response = tokens(60);
    const last = i === STEPS_PER_TRAJECTORY - 1;
    const call = {
      id: `call_${i}`,
      type: 'function',
      function: { name: 'read', arguments: `{"path":"data/${i}.txt"}` },
    };
    steps.push(
      newStep({
        trajectoryId: id,
        groupId: group,
        index: i,
        promptIds: prompt,
        responseIds: response,
        responseLogprobs: response.map(() => -random() * 3),
        reward: last ? reward : null,
        policyVersion: Math.floor(k / 20_000),
        isLast: last,
        tokenSource: 'engine',
        finishReason: last ? 'stop' : 'tool_calls',
        messages: [...messages],
        responseText: last ? 'The report is written.' : '',
        toolCalls: last ? null : [call],
      }),
    );
    messages.push({ role: 'assistant', content: null, tool_calls: [call] });
    messages.push({ role: 'tool', tool_call_id: call.id, content: `contents of file ${i}` });
    history = prompt.concat(response);
  }
  return steps;
}

async function fill(path: string): Promise<number> {
  const partial = `${path}.partial`;
  rmSync(partial, { force: true });
  const store = poolOps(await openSqliteStore({ path: partial, synchronous: 'NORMAL' }));
  const random = seededRandom('bench-dashboard');
  const trajectories = Math.ceil(STEPS / STEPS_PER_TRAJECTORY);
  const t0 = performance.now();
  let lastLog = t0;
  for (let k0 = 0; k0 < trajectories; k0 += 256) {
    const requests: SubmitRequest[] = [];
    for (let k = k0; k < Math.min(k0 + 256, trajectories); k++) {
      const group = Math.floor(k / ROLLOUTS);
      const channel = group % 10 === 0 ? 'eval' : 'train';
      // Opened as a gym run opens them: the metadata names the run, the task and its category.
      await store.createTrajectory(
        {
          id: `t${k}`,
          groupId: `g${group}`,
          channel,
          nRollouts: ROLLOUTS,
          metadata: {
            run_id: `run-${Math.floor(k / 25_000)}`,
            task_id: `task-${group % 500}`,
            category: `cat-${group % 7}`,
          },
        },
        Date.now(),
      );
      requests.push({ channel, nRollouts: ROLLOUTS, steps: trajectory(k, random) });
    }
    const outcomes = await store.submitBatch(requests, Date.now());
    for (const o of outcomes) if (!o.ok) throw o.error;
    if (performance.now() - lastLog > 10_000) {
      lastLog = performance.now();
      log(`filled ${int((k0 + 256) * STEPS_PER_TRAJECTORY)} steps`);
    }
  }
  // Labels and leases the list filters and the history read.
  await store.addLabels(
    Array.from({ length: 200 }, (_, i) => ({
      trajectory_uid: `t${i * 37}`,
      trainable: false,
      tags: ['bad'],
    })),
    Date.now(),
  );
  for (let i = 0; i < 20; i++) {
    const batch = await store.leaseBatch(
      {
        channel: 'train',
        batchSize: 4,
        nRollouts: ROLLOUTS,
        maxStaleness: null,
        consumer: `trainer-${i % 2}`,
        ttlMs: 60_000,
      },
      Date.now(),
    );
    if (batch && i % 3 !== 0) await store.ackLease(batch.lease.id, Date.now());
  }
  await store.close();
  for (const suffix of ['', '-wal', '-shm'])
    if (existsSync(`${partial}${suffix}`)) renameSync(`${partial}${suffix}`, `${path}${suffix}`);
  return (performance.now() - t0) / 1000;
}

interface ViewResult {
  name: string;
  path: string;
  p50: number;
  p95: number;
  max: number;
  bytes: number;
}

async function measure(url: string, name: string, path: string): Promise<ViewResult> {
  const times: number[] = [];
  let bytes = 0;
  // Two warm-up requests (statements prepared, tokenizer loaded), then the measured ones.
  for (let i = 0; i < REQUESTS + 2; i++) {
    const t0 = performance.now();
    const res = await fetch(`${url}${path}`);
    const body = await res.arrayBuffer();
    const ms = performance.now() - t0;
    if (!res.ok)
      throw new Error(`${path}: HTTP ${res.status}: ${Buffer.from(body).toString('utf8').slice(0, 300)}`);
    if (i >= 2) times.push(ms);
    bytes = body.byteLength;
  }
  return {
    name,
    path,
    p50: percentile(times, 50),
    p95: percentile(times, 95),
    max: Math.max(...times),
    bytes,
  };
}

async function main(): Promise<void> {
  const loadAtStart = os.loadavg();
  const code = codeVersion();
  mkdirSync(DIR, { recursive: true });
  const db = join(DIR, `store-v3-${STEPS}.db`);
  let fillSeconds: number | null = null;
  if (!existsSync(db)) {
    log(`filling ${int(STEPS)} steps into ${db} (kept for later runs)`);
    fillSeconds = await fill(db);
    log(`filled in ${fix(fillSeconds, 1)} s`);
  }
  const server = await startServer({ dbPath: db, port: 0, engines: [] });
  try {
    const stats = await server.pool.stats(null);
    const mid = `t${Math.floor(STEPS / STEPS_PER_TRAJECTORY / 2)}`;
    const views: [string, string][] = [
      ['baseline: JSON API, trajectories page 1', '/v1/trajectories?limit=50'],
      ['overview', '/dashboard'],
      ['overview, one channel', '/dashboard?channel=eval'],
      ['events', '/dashboard/events'],
      ['trajectories, page 1', '/dashboard/trajectories'],
      ['trajectories, page 1,000', '/dashboard/trajectories?page=1000'],
      [
        'trajectories, filtered (channel, reward, tag)',
        '/dashboard/trajectories?channel=train&reward_min=1&tag=bad',
      ],
      ['trajectory detail (10 steps)', `/dashboard/trajectories/${mid}`],
      [
        'group (8 trajectories, prefix tree)',
        `/dashboard/groups/train/g${Math.floor(STEPS / STEPS_PER_TRAJECTORY / 2 / ROLLOUTS) + 1}`,
      ],
      [
        'batches (next-batch preview, lease history)',
        '/dashboard/batches?channel=train&batch_size=8&n_rollouts=8',
      ],
      ['gym', '/dashboard/gym'],
    ];
    const results: ViewResult[] = [];
    for (const [name, path] of views) {
      const r = await measure(server.url, name, path);
      log(`${name}: p50 ${fix(r.p50, 1)} ms, p95 ${fix(r.p95, 1)} ms`);
      results.push(r);
    }
    const lines = [
      '## Dashboard benchmark (`bench/dashboard.ts`)',
      '',
      ...machineInfo('npm run bench:dashboard', loadAtStart, code, {
        stack: 'SQLite store (synchronous FULL), server in process, one client on loopback',
        noise: 'the server and the client',
      }),
      `- Store: ${int(stats.produced.steps)} steps, ${int(stats.produced.trajectories)} trajectories (10 steps each, groups of 8, two channels), 200 labelled, 20 leases; ${fillSeconds === null ? 'reused from an earlier run' : `filled in ${fix(fillSeconds, 1)} s`}`,
      `- ${REQUESTS} requests a view after 2 warm-up requests; nearest-rank percentiles; target p95 <= ${TARGET_MS} ms`,
      '',
      '| view | path | p50 (ms) | p95 (ms) | max (ms) | HTML bytes | p95 target |',
      '|---|---|---:|---:|---:|---:|---|',
      ...results.map(
        (r) =>
          `| ${r.name} | \`${r.path}\` | ${fix(r.p50, 1)} | ${fix(r.p95, 1)} | ${fix(r.max, 1)} | ${int(r.bytes)} | ${r.name.startsWith('baseline') ? '—' : verdict(r.p95 <= TARGET_MS)} |`,
      ),
    ];
    const report = lines.join('\n');
    console.log(report);
    if (args.write) {
      const each = (f: (r: ViewResult) => number) => Object.fromEntries(results.map((r) => [r.name, f(r)]));
      const figures = {
        code,
        steps: stats.produced.steps,
        view_p50_ms: each((r) => round(r.p50, 1)),
        view_p95_ms: each((r) => round(r.p95, 1)),
      };
      log(`wrote ${recordRun('dashboard', figures, report).join(', ')}`);
    }
  } finally {
    await server.close();
  }
}

await main();
