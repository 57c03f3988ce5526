/**
 * Scale-out benchmark: the same workload on PostgreSQL and on SQLite, every server a real
 * `stepwise serve` / `stepwise gateway` process on loopback.
 *   1. ingest: whole 8-step trajectories over `POST /v1/steps` from 32 concurrent clients, through
 *      1 vs 3 server processes sharing one database;
 *   2. leases: draining pre-filled ready groups (lease + ack over HTTP) with 1 vs 4 consumers.
 * Prints a markdown report; a full run is recorded in bench/results/scale.jsonl (figures) and
 * scale.md (report).
 *
 *   npm run bench:scale              full run (~3 minutes)
 *   npm run bench:scale -- --quick   shorter runs, prints only
 *
 * PostgreSQL: STEPWISE_PG_URL (else STEPWISE_TEST_PG_URL, else postgres://postgres@127.0.0.1:5432/test);
 * each run uses a fresh schema and drops it afterwards.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { redactUrl } from '../packages/core/src/store/postgres/postgres-store.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import {
  killAllServerProcesses,
  type ServerProcess,
  startServerProcess,
} from '../test/support/server-process.js';
import { codeVersion, exitOnHelp, fix, int, log, machineInfo, recordRun, round } from './support.js';

const PG_URL =
  process.env.STEPWISE_PG_URL ??
  process.env.STEPWISE_TEST_PG_URL ??
  'postgres://postgres@127.0.0.1:5432/test';
const CONCURRENCY = 32;
const STEPS = 8;
const ROLLOUTS = 4;

type Backend = 'postgres' | 'sqlite';

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** N server processes over one fresh database: the first creates it, the others join. */
async function startServers(
  backend: Backend,
  n: number,
): Promise<{ urls: string[]; servers: ServerProcess[]; stop(): Promise<void> }> {
  const schema = `stepwise_bench_${process.pid}_${Date.now().toString(36)}`;
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-scale-'));
  const db = join(dir, 'pool.db');
  const common = ['--n-rollouts', String(ROLLOUTS), '--max-body-mb', '64'];
  const args = backend === 'postgres' ? ['--pg', PG_URL, '--pg-schema', schema, ...common] : common;
  const servers = [await startServerProcess(db, args, {}, 'serve')];
  for (let i = 1; i < n; i++) {
    servers.push(await startServerProcess(db, args, {}, backend === 'sqlite' ? 'gateway' : 'serve'));
  }
  return {
    urls: servers.map((s) => s.url),
    servers,
    async stop() {
      await killAllServerProcesses();
      rmSync(dir, { recursive: true, force: true });
      if (backend === 'postgres') {
        const client = new pg.Client({ connectionString: PG_URL });
        await client.connect();
        await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
        await client.end();
      }
    },
  };
}

/** Request bodies: whole trajectories with a placeholder id, serialized once. */
function templates(count: number): string[] {
  const random = seededRandom(7);
  return Array.from({ length: count }, () =>
    JSON.stringify({
      n_rollouts: ROLLOUTS,
      steps: syntheticTrajectory({
        trajectoryUid: '__T__',
        promptUid: '__G__',
        steps: STEPS,
        systemTokens: 128,
        observationTokens: 64,
        responseTokens: 32,
        policyVersion: 0,
        withLogprobs: true,
        random,
      }),
    }),
  );
}

function post(agent: http.Agent, url: string, path: string, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      new URL(path, url),
      {
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

interface IngestRun {
  stepsPerSec: number;
  errors: number;
}

/** CONCURRENCY clients, each sending whole trajectories (round-robin over the servers) for `seconds`. */
async function ingest(urls: string[], seconds: number, prefix: string): Promise<IngestRun> {
  const bodies = templates(64);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let sent = 0;
  let steps = 0;
  let errors = 0;
  const started = performance.now();
  const until = started + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async (_, c) => {
      while (performance.now() < until) {
        const n = sent++;
        const body = bodies[n % bodies.length]!.replaceAll('__T__', `${prefix}-${n}`).replaceAll(
          '__G__',
          `${prefix}-g${Math.floor(n / ROLLOUTS)}`,
        );
        const status = await post(agent, urls[(c + n) % urls.length]!, '/v1/steps', body).catch(() => 0);
        if (status === 200) steps += STEPS;
        else errors++;
      }
    }),
  );
  agent.destroy();
  return { stepsPerSec: steps / ((performance.now() - started) / 1000), errors };
}

interface LeaseRun {
  groupsPerSec: number;
  groups: number;
  duplicates: number;
}

/** Fills `groups` ready groups, then `consumers` loops lease and ack them (1 group a lease) until none is left. */
async function drain(urls: string[], groups: number, consumers: number): Promise<LeaseRun> {
  const bodies = templates(16);
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  let next = 0;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      for (;;) {
        const n = next++;
        if (n >= groups * ROLLOUTS) return;
        const body = bodies[n % bodies.length]!.replaceAll('__T__', `fill-${n}`).replaceAll(
          '__G__',
          `fill-g${Math.floor(n / ROLLOUTS)}`,
        );
        const status = await post(agent, urls[n % urls.length]!, '/v1/steps', body);
        if (status !== 200) throw new Error(`filling the pool: HTTP ${status}`);
      }
    }),
  );
  agent.destroy();
  const seen = new Map<string, number>();
  const started = performance.now();
  await Promise.all(
    Array.from({ length: consumers }, async (_, c) => {
      const client = new StepwiseClient({ baseUrl: urls[c % urls.length]! });
      for (;;) {
        const batch = await client.lease({ batchSize: 1, nRollouts: ROLLOUTS, consumer: `c${c}`, waitMs: 0 });
        if (!batch) return;
        for (const g of batch.groups) seen.set(g.group_id, (seen.get(g.group_id) ?? 0) + 1);
        await client.ack(batch.lease_id);
      }
    }),
  );
  const seconds = (performance.now() - started) / 1000;
  const duplicates = [...seen.values()].filter((n) => n > 1).length;
  return { groupsPerSec: seen.size / seconds, groups: seen.size, duplicates };
}

const INGEST_CONFIGS: { backend: Backend; servers: number }[] = [
  { backend: 'postgres', servers: 1 },
  { backend: 'postgres', servers: 3 },
  { backend: 'sqlite', servers: 1 },
  { backend: 'sqlite', servers: 3 },
];

const LEASE_CONFIGS: { backend: Backend; servers: number; consumers: number }[] = [
  { backend: 'postgres', servers: 1, consumers: 1 },
  { backend: 'postgres', servers: 1, consumers: 4 },
  { backend: 'postgres', servers: 3, consumers: 4 },
  { backend: 'sqlite', servers: 1, consumers: 1 },
  { backend: 'sqlite', servers: 1, consumers: 4 },
];

async function pgServerVersion(): Promise<string> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  const v = (await client.query('SHOW server_version')).rows[0].server_version as string;
  await client.end();
  return v;
}

/** Part 1: each ingest set-up `reps` times, each on a fresh database; runs by `backend/servers`. */
async function ingestRuns(seconds: number, reps: number): Promise<Map<string, IngestRun[]>> {
  const runs = new Map<string, IngestRun[]>();
  for (let rep = 0; rep < reps; rep++) {
    for (const cfg of INGEST_CONFIGS) {
      const key = `${cfg.backend}/${cfg.servers}`;
      const cluster = await startServers(cfg.backend, cfg.servers);
      try {
        const run = await ingest(cluster.urls, seconds, `r${rep}`);
        log(`ingest ${key} rep ${rep + 1}: ${int(run.stepsPerSec)} steps/s, ${run.errors} errors`);
        runs.set(key, [...(runs.get(key) ?? []), run]);
      } finally {
        await cluster.stop();
      }
    }
  }
  return runs;
}

/** Part 2: each lease set-up `reps` times, each on a fresh database; runs by `backend/servers/consumers`. */
async function leaseRuns(leaseGroups: number, reps: number): Promise<Map<string, LeaseRun[]>> {
  const runs = new Map<string, LeaseRun[]>();
  for (let rep = 0; rep < reps; rep++) {
    for (const cfg of LEASE_CONFIGS) {
      const key = `${cfg.backend}/${cfg.servers}/${cfg.consumers}`;
      const cluster = await startServers(cfg.backend, cfg.servers);
      try {
        const run = await drain(cluster.urls, leaseGroups, cfg.consumers);
        log(`lease ${key} rep ${rep + 1}: ${int(run.groupsPerSec)} groups/s, ${run.duplicates} served twice`);
        runs.set(key, [...(runs.get(key) ?? []), run]);
      } finally {
        await cluster.stop();
      }
    }
  }
  return runs;
}

/** A run's settings and what it measured, for its report and its figures. */
interface Scale {
  quick: boolean;
  seconds: number;
  reps: number;
  leaseGroups: number;
  loadAtStart: number[];
  codeAtStart: string;
  pgVersion: string;
  ingest: Map<string, IngestRun[]>;
  lease: Map<string, LeaseRun[]>;
}

/** Median steps/s of an ingest set-up and groups/s of a lease set-up, by key. */
function rates(scale: Scale) {
  return {
    ingestRate: (key: string) => median((scale.ingest.get(key) ?? []).map((r) => r.stepsPerSec)),
    leaseRate: (key: string) => median((scale.lease.get(key) ?? []).map((r) => r.groupsPerSec)),
  };
}

/** The report printed (and recorded as scale.md): the set-up, then the ingest and lease tables. */
function reportLines(scale: Scale): string[] {
  const { quick, seconds, reps, leaseGroups } = scale;
  const { ingestRate, leaseRate } = rates(scale);
  const lines = [
    '## Scale-out: PostgreSQL and SQLite, several server processes (`npm run bench:scale`)',
    '',
    ...machineInfo(`npm run bench:scale${quick ? ' -- --quick' : ''}`, scale.loadAtStart, scale.codeAtStart, {
      stack: `PostgreSQL ${scale.pgVersion} on loopback (${redactUrl(PG_URL)}, default settings), SQLite via better-sqlite3 (synchronous=FULL)`,
      noise: 'the benchmark client, every server process and PostgreSQL',
    }),
    '',
    `Every server is a real \`stepwise serve\` process (SQLite: one \`serve\` and the others \`stepwise gateway\` over the same file); the benchmark process is the client. Medians of ${reps} runs, each on a fresh database (a new schema, or a new file).`,
    '',
    `### 1. Ingest: whole ${STEPS}-step trajectories over \`POST /v1/steps\``,
    '',
    `${CONCURRENCY} concurrent clients (node:http keep-alive), each sending its next trajectory when the last is answered, round-robin over the servers, for ${seconds} s. Steps of 128 system + 64 observation tokens a turn, 32 response tokens with logprobs; groups of ${ROLLOUTS}.`,
    '',
    '| backend | server processes | steps/s (median) | runs | errors | vs 1 process |',
    '|---|---:|---:|---|---:|---:|',
  ];
  for (const cfg of INGEST_CONFIGS) {
    const key = `${cfg.backend}/${cfg.servers}`;
    const runs = scale.ingest.get(key) ?? [];
    const base = ingestRate(`${cfg.backend}/1`);
    lines.push(
      `| ${cfg.backend} | ${cfg.servers} | **${int(ingestRate(key))}** | ${runs.map((r) => int(r.stepsPerSec)).join(' / ')} | ${runs.reduce((n, r) => n + r.errors, 0)} | ${fix(ingestRate(key) / base)}x |`,
    );
  }
  lines.push(
    '',
    `PostgreSQL vs SQLite through one process: ${fix(ingestRate('postgres/1') / ingestRate('sqlite/1'))}x; through three: ${fix(ingestRate('postgres/3') / ingestRate('sqlite/3'))}x.`,
    '',
    '### 2. Leases: draining ready groups',
    '',
    `${leaseGroups} ready groups of ${ROLLOUTS} trajectories (${STEPS} steps each) filled beforehand; then each consumer (\`StepwiseClient\`) leases one group at a time (\`wait_ms: 0\`) and acks it, until a lease comes back empty. Consumers are spread over the server processes. "served twice" counts groups that reached more than one consumer (must be 0).`,
    '',
    '| backend | server processes | consumers | groups/s (median) | runs | served twice | vs 1 consumer |',
    '|---|---:|---:|---:|---|---:|---:|',
  );
  for (const cfg of LEASE_CONFIGS) {
    const key = `${cfg.backend}/${cfg.servers}/${cfg.consumers}`;
    const runs = scale.lease.get(key) ?? [];
    const base = leaseRate(`${cfg.backend}/1/1`);
    lines.push(
      `| ${cfg.backend} | ${cfg.servers} | ${cfg.consumers} | **${fix(leaseRate(key), 0)}** | ${runs.map((r) => fix(r.groupsPerSec, 0)).join(' / ')} | ${runs.reduce((n, r) => n + r.duplicates, 0)} | ${fix(leaseRate(key) / base)}x |`,
    );
  }
  return lines;
}

/** The figures recorded in scale.jsonl. */
function figures(scale: Scale) {
  const { ingestRate, leaseRate } = rates(scale);
  return {
    code: scale.codeAtStart,
    ingest_steps_per_s: Object.fromEntries(
      INGEST_CONFIGS.map((c) => [
        `${c.backend}_${c.servers}`,
        round(ingestRate(`${c.backend}/${c.servers}`), 0),
      ]),
    ),
    postgres_vs_sqlite_ingest: {
      1: round(ingestRate('postgres/1') / ingestRate('sqlite/1')),
      3: round(ingestRate('postgres/3') / ingestRate('sqlite/3')),
    },
    lease_groups_per_s: Object.fromEntries(
      LEASE_CONFIGS.map((c) => {
        const key = `${c.backend}/${c.servers}/${c.consumers}`;
        return [key.replaceAll('/', '_'), round(leaseRate(key), 0)];
      }),
    ),
    served_twice: [...scale.lease.values()].flat().reduce((n, r) => n + r.duplicates, 0),
  };
}

async function main(): Promise<void> {
  exitOnHelp(import.meta.url);
  const quick = process.argv.includes('--quick');
  const seconds = quick ? 4 : 10;
  const reps = quick ? 1 : 2;
  const leaseGroups = quick ? 300 : 1_000;
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();
  const pgVersion = await pgServerVersion();
  const ingest = await ingestRuns(seconds, reps);
  const lease = await leaseRuns(leaseGroups, reps);
  const scale: Scale = {
    quick,
    seconds,
    reps,
    leaseGroups,
    loadAtStart,
    codeAtStart,
    pgVersion,
    ingest,
    lease,
  };
  const report = `${reportLines(scale).join('\n')}\n`;
  process.stdout.write(report);
  if (quick) return;
  log(`wrote ${recordRun('scale', figures(scale), report).join(', ')}`);
}

main().catch(async (error) => {
  console.error(error);
  await killAllServerProcesses();
  process.exit(1);
});
