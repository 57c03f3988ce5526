/**
 * DataPool benchmark: ingest throughput (in process and over HTTP), lease latency against pool size,
 * bytes on disk per step and server memory. Prints a markdown report; records the run's figures in
 * bench/results/pool.jsonl and a full run's report in bench/results/pool.md.
 *
 *   npm run bench:pool                 full run (~3-6 minutes)
 *   npm run bench:pool -- --quick      smaller sizes, prints only
 *   npm run bench:pool -- --only http  some sections (ingest,http,lease,storage); records their figures
 *
 * BENCH_CPU_PROF=DIR writes a .cpuprofile of each HTTP server child process into DIR.
 */

import { type ChildProcess, fork } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import Database from 'better-sqlite3';
import {
  LeaseRequest,
  type NewStep,
  type StepWireInput,
  stepFromWire,
} from '../packages/core/src/domain/index.js';
import { poolOps } from '../packages/core/src/pool/core.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { startServer } from '../packages/core/src/server/server.js';
import { openSqliteStore, type SqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import {
  encodeStep,
  INSERT_STEP_SQL,
  STEP_KEY_SPAN,
  type StepRow,
  type StepTail,
  stepKey,
  stepRowValues,
} from '../packages/core/src/store/step-codec.js';
import type { SubmitRequest } from '../packages/core/src/store/store.js';
import { encodeTokens } from '../packages/core/src/store/token-codec.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import {
  codeVersion,
  exitOnHelp,
  exitWithParent,
  fix,
  int,
  log,
  machineInfo,
  mib,
  nextMessage,
  percentile,
  recordRun,
  round,
  verdict,
} from './support.js';

const THIS_FILE = fileURLToPath(import.meta.url);
const _REPO_ROOT = resolve(dirname(THIS_FILE), '..');

type Sync = 'FULL' | 'NORMAL';

interface Shape {
  steps: number;
  systemTokens: number;
  observationTokens: number;
  responseTokens: number;
  withLogprobs: boolean;
}

/** Realistic small agent steps (sections 1-3). */
const SMALL: Shape = {
  steps: 8,
  systemTokens: 128,
  observationTokens: 64,
  responseTokens: 32,
  withLogprobs: true,
};
/** Long-context trajectories for the storage section. */
const LONG: Shape = {
  steps: 30,
  systemTokens: 128,
  observationTokens: 1_000,
  responseTokens: 200,
  withLogprobs: true,
};
const ROLLOUTS = 4;
const CONCURRENCY = 64;

const TARGETS = {
  inProcess: 50_000,
  http: 10_000,
  leaseP99Ms: 20,
  storageRatio: 1.3,
};

// ---- helpers ------------------------------------------------------------------------------------

function median(values: number[]): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return Number.NaN;
  const mid = s.length >> 1;
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

function pushTo<T>(map: Record<string, T[]>, key: string, value: T): void {
  const list = map[key];
  if (list) list.push(value);
  else map[key] = [value];
}

const kib = (bytes: number) => `${int(bytes / 1024)} KiB`;

function tempDir(tag: string): string {
  return mkdtempSync(join(os.tmpdir(), `stepwise-bench-${tag}-`));
}

function fileBytes(path: string): number {
  return existsSync(path) ? statSync(path).size : 0;
}

function toNewStep(wire: StepWireInput): NewStep {
  return stepFromWire({
    ...wire,
    is_last: wire.is_last ?? false,
    metadata: wire.metadata ?? {},
    token_source: wire.token_source ?? 'submitted',
    tool_results: null, // synthetic steps carry none
  });
}

/** Distinct trajectories (token content) that the benchmark relabels with fresh ids as it needs. */
function templates(count: number, shape: Shape, seed: number): StepWireInput[][] {
  const random = seededRandom(seed);
  return Array.from({ length: count }, (_, t) =>
    syntheticTrajectory({
      trajectoryUid: `tpl-${t}`,
      promptUid: `tpl-group-${t}`,
      steps: shape.steps,
      systemTokens: shape.systemTokens,
      observationTokens: shape.observationTokens,
      responseTokens: shape.responseTokens,
      withLogprobs: shape.withLogprobs,
      policyVersion: 0,
      random,
    }),
  );
}

/** Trajectory k of a run: template k mod n, in group k / ROLLOUTS. Token arrays are shared, not copied. */
function trajectorySteps(tpls: NewStep[][], k: number, prefix: string): NewStep[] {
  const trajectoryId = `${prefix}t${k}`;
  const groupId = `${prefix}g${Math.floor(k / ROLLOUTS)}`;
  return tpls[k % tpls.length]!.map((s) => ({ ...s, trajectoryId, groupId }));
}

/** Rows exactly as the store writes them (same packed blobs), each step encoded against its predecessor. */
function encodeRows(trajectories: NewStep[][], now: number): StepRow[] {
  const rows: StepRow[] = [];
  for (const [seq, steps] of trajectories.entries()) {
    let base: StepTail | null = null;
    for (const step of steps) {
      const key = stepKey(seq + 1, step.index);
      const encoded = encodeStep(step, key, 'train', step.policyVersion ?? 0, base, now);
      rows.push(encoded.row);
      base = encoded.tail;
    }
  }
  return rows;
}

function applyPragmas(db: Database.Database, sync: Sync): void {
  // The same settings openSqliteStore uses.
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${sync}`);
  db.pragma('cache_size = -65536');
  db.pragma('temp_store = MEMORY');
}

/**
 * The store's own DDL for the steps table and its indexes, read from a freshly migrated database,
 * so the raw baseline always has exactly the columns and indexes the store has.
 */
async function storeStepsSchema(): Promise<{ table: string; indexes: string[] }> {
  const dir = tempDir('schema');
  try {
    const store = await openSqliteStore({ path: join(dir, 'schema.db') });
    await store.close();
    const db = new Database(join(dir, 'schema.db'), { readonly: true });
    const rows = db
      .prepare("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'steps' AND sql IS NOT NULL")
      .all() as { type: string; name: string; sql: string }[];
    db.close();
    const indexes = rows.filter((r) => r.type === 'index').map((r) => r.sql);
    return {
      table: rows.find((r) => r.type === 'table')!.sql,
      indexes,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
const STEPS_SCHEMA = await storeStepsSchema();
const STEPS_INSERT = INSERT_STEP_SQL;
const rowValues = stepRowValues;

// ---- 1. in-process ingest -----------------------------------------------------------------------

interface IngestRun {
  stepsPerSec: number;
  commits: number;
  stepsPerCommit: number;
  seconds: number;
}

/** CONCURRENCY submitters, each walking its trajectories and awaiting every submitSteps call. */
async function poolIngest(
  sync: Sync,
  trajectories: NewStep[][],
  perCall: 'step' | 'trajectory',
): Promise<IngestRun> {
  const dir = tempDir('ingest');
  try {
    const store = poolOps(await openSqliteStore({ path: join(dir, 'pool.db'), synchronous: sync }));
    let commits = 0;
    let committedSteps = 0;
    const submitBatch = store.submitBatch.bind(store);
    store.submitBatch = (requests: SubmitRequest[], now: number) => {
      commits++;
      for (const r of requests) committedSteps += r.steps.length;
      return submitBatch(requests, now);
    };
    const pool = new DataPool({ store });
    let next = 0;
    let inserted = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let k = next++; k < trajectories.length; k = next++) {
          const steps = trajectories[k]!;
          if (perCall === 'step') {
            for (const step of steps) {
              const result = await pool.submitSteps([step], { nRollouts: ROLLOUTS });
              inserted += result.inserted;
            }
          } else {
            const result = await pool.submitSteps(steps, { nRollouts: ROLLOUTS });
            inserted += result.inserted;
          }
        }
      }),
    );
    const seconds = (performance.now() - t0) / 1000;
    await pool.close();
    const expected = trajectories.reduce((n, t) => n + t.length, 0);
    if (inserted !== expected) throw new Error(`ingest stored ${inserted} of ${expected} steps`);
    return { stepsPerSec: inserted / seconds, commits, stepsPerCommit: committedSteps / commits, seconds };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The baseline: one prepared INSERT of the same rows, `batch` rows a transaction, nothing else. */
function rawIngest(sync: Sync, rows: unknown[][], batch: number, withIndexes: boolean): number {
  const dir = tempDir('raw');
  try {
    const db = new Database(join(dir, 'raw.db'));
    applyPragmas(db, sync);
    db.exec(STEPS_SCHEMA.table);
    if (withIndexes) for (const ddl of STEPS_SCHEMA.indexes) db.exec(ddl);
    const insert = db.prepare(STEPS_INSERT);
    const commit = db.transaction((slice: unknown[][]) => {
      for (const values of slice) insert.run(values);
    });
    const t0 = performance.now();
    for (let i = 0; i < rows.length; i += batch) commit.immediate(rows.slice(i, i + batch));
    const seconds = (performance.now() - t0) / 1000;
    db.close();
    return rows.length / seconds;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

interface IngestSection {
  trajectories: number;
  reps: number;
  pool: Record<string, IngestRun[]>;
  batch: number;
  raw: Record<string, number[]>;
}

async function benchIngest(quick: boolean): Promise<IngestSection> {
  const count = quick ? 1_000 : 4_000;
  const reps = quick ? 1 : 3;
  const tpls = templates(256, SMALL, 1).map((t) => t.map(toNewStep));
  const trajectories = Array.from({ length: count }, (_, k) => trajectorySteps(tpls, k, ''));
  const pool: Record<string, IngestRun[]> = {};
  const modes: { sync: Sync; perCall: 'step' | 'trajectory' }[] = [
    { sync: 'FULL', perCall: 'step' },
    { sync: 'NORMAL', perCall: 'step' },
    { sync: 'FULL', perCall: 'trajectory' },
    { sync: 'NORMAL', perCall: 'trajectory' },
  ];
  for (let rep = 0; rep < reps; rep++) {
    for (const m of modes) {
      const run = await poolIngest(m.sync, trajectories, m.perCall);
      const key = `${m.sync}/${m.perCall}`;
      pushTo(pool, key, run);
      log(
        `ingest ${key} rep ${rep + 1}: ${int(run.stepsPerSec)} steps/s (${fix(run.stepsPerCommit, 1)} steps/commit)`,
      );
    }
  }
  // The baseline commits as many rows a transaction as the pool did with one step per call.
  const batch = Math.max(
    1,
    Math.round(median([...pool['FULL/step']!, ...pool['NORMAL/step']!].map((r) => r.stepsPerCommit))),
  );
  const rows = encodeRows(trajectories, Date.now()).map(rowValues);
  const raw: Record<string, number[]> = {};
  for (let rep = 0; rep < reps; rep++) {
    for (const sync of ['FULL', 'NORMAL'] as const) {
      for (const withIndexes of [false, true]) {
        const key = `${sync}/${withIndexes ? 'indexed' : 'plain'}`;
        const rate = rawIngest(sync, rows, batch, withIndexes);
        pushTo(raw, key, rate);
        log(`raw insert ${key} batch ${batch} rep ${rep + 1}: ${int(rate)} rows/s`);
      }
    }
  }
  return { trajectories: count, reps, pool, batch, raw };
}

// ---- 2. HTTP ingest (server in its own process) -------------------------------------------------

interface ChildStats {
  rss: number;
  heapUsed: number;
  cpuUserUs: number;
  cpuSystemUs: number;
  commits: number;
  committedSteps: number;
  commitMs: number;
}

type ChildMessage = { type: 'ready'; url: string } | ({ type: 'stats' } & ChildStats);

async function serveChild(dbPath: string): Promise<void> {
  const server = await startServer({ dbPath, host: '127.0.0.1', port: 0 });
  const send = (m: ChildMessage) => process.send?.(m);
  // Count group commits: the pool's coalescer calls store.submitBatch once per transaction.
  const store = server.pool.store;
  const submitBatch = store.submitBatch.bind(store);
  const counts = { commits: 0, committedSteps: 0, commitMs: 0 };
  store.submitBatch = async (requests: SubmitRequest[], now: number) => {
    counts.commits++;
    for (const r of requests) counts.committedSteps += r.steps.length;
    const t0 = performance.now();
    try {
      return await submitBatch(requests, now);
    } finally {
      counts.commitMs += performance.now() - t0;
    }
  };
  process.on('message', (m: { type: string }) => {
    if (m.type === 'stats') {
      const mem = process.memoryUsage();
      const cpu = process.cpuUsage();
      send({
        type: 'stats',
        rss: mem.rss,
        heapUsed: mem.heapUsed,
        cpuUserUs: cpu.user,
        cpuSystemUs: cpu.system,
        ...counts,
      });
    } else if (m.type === 'close') {
      void server.close().then(() => process.exit(0));
    }
  });
  send({ type: 'ready', url: server.url });
}

async function childStats(child: ChildProcess): Promise<ChildStats> {
  const reply = nextMessage<ChildMessage, 'stats'>(child, 'stats');
  child.send({ type: 'stats' });
  return reply;
}

/** Request bodies from templates: the token JSON is serialized once, the ids are spliced in per use. */
class BodyFactory {
  private readonly stepJson: string[][];

  constructor(private readonly tpls: StepWireInput[][]) {
    this.stepJson = tpls.map((steps) =>
      steps.map(({ trajectory_uid: _t, prompt_uid: _p, ...rest }) => JSON.stringify(rest).slice(1)),
    );
  }

  private step(k: number, i: number, prefix: string): string {
    const rest = this.stepJson[k % this.stepJson.length]![i]!;
    return `{"trajectory_uid":"${prefix}t${k}","prompt_uid":"${prefix}g${Math.floor(k / ROLLOUTS)}",${rest}`;
  }

  /** The same step as an object, for the SDK client (which serializes it per call). */
  wireStep(k: number, i: number, prefix: string): StepWireInput {
    const step = this.tpls[k % this.tpls.length]![i]!;
    return {
      ...step,
      trajectory_uid: `${prefix}t${k}`,
      prompt_uid: `${prefix}g${Math.floor(k / ROLLOUTS)}`,
    };
  }

  stepBody(k: number, i: number, prefix: string): string {
    return `{"n_rollouts":${ROLLOUTS},"steps":[${this.step(k, i, prefix)}]}`;
  }

  trajectoryBody(k: number, prefix: string): string {
    const steps = this.stepJson[k % this.stepJson.length]!.map((_, i) => this.step(k, i, prefix));
    return `{"n_rollouts":${ROLLOUTS},"steps":[${steps.join(',')}]}`;
  }
}

interface HttpRun {
  stepsPerSec: number;
  requestsPerSec: number;
  errors: number;
  serverRss: number;
  /** RSS of the freshly started server, before any request */
  serverRssIdle: number;
  serverHeap: number;
  serverCpu: number;
  clientCpu: number;
  stepsPerCommit: number;
  /** share of the run's wall time the server spent inside store.submitBatch (blocking its event loop) */
  commitShare: number;
  commitMs: number;
}

type HttpMode = 'step' | 'trajectory' | 'sdk-step';

const HTTP_MODES: Record<HttpMode, string> = {
  step: '1 step a request, node:http keep-alive agent',
  trajectory: `${SMALL.steps} steps (whole trajectory) a request, node:http keep-alive agent`,
  'sdk-step': '1 step a request, `StepwiseClient.submitSteps` (undici keep-alive)',
};

/** One keep-alive connection per client; the body is sent as is and the answer read to its end. */
function httpPoster(url: string): { post: (body: string) => Promise<void>; close: () => void } {
  const agent = new http.Agent({ keepAlive: true, maxSockets: CONCURRENCY });
  const { hostname, port } = new URL(url);
  const post = (body: string) =>
    new Promise<void>((resolvePost, reject) => {
      const req = http.request(
        {
          host: hostname,
          port,
          path: '/v1/steps',
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () => {
            if (res.statusCode === 200) resolvePost();
            else {
              const text = Buffer.concat(chunks).toString().slice(0, 200);
              reject(new Error(`POST /v1/steps answered ${res.statusCode}: ${text}`));
            }
          });
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  return { post, close: () => agent.destroy() };
}

async function httpIngest(bodies: BodyFactory, mode: HttpMode, seconds: number): Promise<HttpRun> {
  const dir = tempDir('http');
  const profileDir = process.env.BENCH_CPU_PROF;
  if (profileDir) mkdirSync(profileDir, { recursive: true });
  const child = fork(THIS_FILE, ['--serve-child', join(dir, 'pool.db')], {
    execArgv: profileDir
      ? [...process.execArgv, '--cpu-prof', `--cpu-prof-dir=${resolve(profileDir)}`]
      : process.execArgv,
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const poster = { close: () => {} };
  try {
    const { url } = await nextMessage<ChildMessage, 'ready'>(child, 'ready');
    const idle = await childStats(child);
    const raw = httpPoster(url);
    poster.close = raw.close;
    const sdk = new StepwiseClient({ baseUrl: url });
    /** Submits step i of trajectory k (all its steps when i is null); returns the steps sent. */
    const submit = async (k: number, i: number | null, prefix: string): Promise<number> => {
      if (mode === 'sdk-step') {
        await sdk.submitSteps([bodies.wireStep(k, i ?? 0, prefix)], { nRollouts: ROLLOUTS });
        return 1;
      }
      if (i === null) {
        await raw.post(bodies.trajectoryBody(k, prefix));
        return SMALL.steps;
      }
      await raw.post(bodies.stepBody(k, i, prefix));
      return 1;
    };
    // Warm up the connections and the server's code paths (not counted).
    await Promise.all(Array.from({ length: CONCURRENCY }, (_, c) => submit(c, 0, 'warm-')));
    const before = await childStats(child);
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const deadline = t0 + seconds * 1000;
    let next = 0;
    let steps = 0;
    let requests = 0;
    let errors = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        while (performance.now() < deadline) {
          const k = next++;
          try {
            if (mode === 'trajectory') {
              const n = await submit(k, null, '');
              steps += n;
              requests++;
            } else {
              for (let i = 0; i < SMALL.steps && performance.now() < deadline; i++) {
                const n = await submit(k, i, '');
                steps += n;
                requests++;
              }
            }
          } catch (error) {
            errors++;
            if (errors === 1) log(`http error: ${(error as Error).message}`);
          }
        }
      }),
    );
    const elapsed = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const after = await childStats(child);
    const serverCpuUs = after.cpuUserUs + after.cpuSystemUs - (before.cpuUserUs + before.cpuSystemUs);
    const commits = after.commits - before.commits;
    const run: HttpRun = {
      stepsPerSec: steps / elapsed,
      requestsPerSec: requests / elapsed,
      errors,
      serverRss: after.rss,
      serverRssIdle: idle.rss,
      serverHeap: after.heapUsed,
      serverCpu: serverCpuUs / 1e6 / elapsed,
      clientCpu: (cpu.user + cpu.system) / 1e6 / elapsed,
      stepsPerCommit: (after.committedSteps - before.committedSteps) / commits,
      commitShare: (after.commitMs - before.commitMs) / 1000 / elapsed,
      commitMs: (after.commitMs - before.commitMs) / commits,
    };
    const exited = new Promise<void>((r) => child.once('exit', () => r()));
    child.send({ type: 'close' });
    await exited;
    return run;
  } finally {
    poster.close();
    if (child.exitCode === null && child.signalCode === null) child.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

interface HttpSection {
  reps: number;
  seconds: Record<HttpMode, number>;
  runs: Partial<Record<HttpMode, HttpRun[]>>;
}

async function benchHttp(quick: boolean): Promise<HttpSection> {
  const reps = quick ? 1 : 3;
  const seconds: Record<HttpMode, number> = {
    step: quick ? 4 : 10,
    trajectory: quick ? 3 : 5,
    'sdk-step': quick ? 3 : 5,
  };
  const bodies = new BodyFactory(templates(256, SMALL, 2));
  const runs: Record<string, HttpRun[]> = {};
  for (let rep = 0; rep < reps; rep++) {
    for (const mode of Object.keys(HTTP_MODES) as HttpMode[]) {
      const run = await httpIngest(bodies, mode, seconds[mode]);
      pushTo(runs, mode, run);
      log(
        `http ${mode} rep ${rep + 1}: ${int(run.stepsPerSec)} steps/s, server CPU ${fix(run.serverCpu)}, client CPU ${fix(run.clientCpu)}, ${fix(run.stepsPerCommit, 1)} steps/commit, ${fix(run.commitMs)} ms/commit, ${fix(run.commitShare * 100, 0)}% of wall time in submitBatch, RSS ${mib(run.serverRss)}`,
      );
    }
  }
  return { reps, seconds, runs };
}

// ---- 3. lease latency against pool size ---------------------------------------------------------

/** Fills a store with complete groups (ROLLOUTS trajectories of SMALL.steps steps) straight through submitBatch. */
async function fillStore(path: string, groups: number, tpls: NewStep[][], prefix: string): Promise<number> {
  const store = poolOps(await openSqliteStore({ path, synchronous: 'NORMAL' }));
  const trajectories = groups * ROLLOUTS;
  const perBatch = 512;
  const t0 = performance.now();
  let lastLog = t0;
  for (let k0 = 0; k0 < trajectories; k0 += perBatch) {
    const requests: SubmitRequest[] = [];
    for (let k = k0; k < Math.min(k0 + perBatch, trajectories); k++) {
      requests.push({ channel: 'train', nRollouts: ROLLOUTS, steps: trajectorySteps(tpls, k, prefix) });
    }
    const outcomes = await store.submitBatch(requests, Date.now());
    for (const o of outcomes) if (!o.ok) throw o.error;
    if (performance.now() - lastLog > 10_000) {
      lastLog = performance.now();
      log(`  filled ${int((k0 + perBatch) * SMALL.steps)} steps`);
    }
  }
  await store.close();
  return (performance.now() - t0) / 1000;
}

interface LeaseSize {
  steps: number;
  fills: number;
  fillSeconds: number;
  dbBytes: number;
  leases: number;
  lease: number[];
  /** The baseline: reading the served steps' rows (SELECT *, the driver's objects) on a second connection. */
  rawRead: number[];
  ack: number[];
  total: number[];
}

async function leaseAtSize(targetSteps: number, leases: number, warmup: number, tpls: NewStep[][]) {
  const stepsPerGroup = ROLLOUTS * SMALL.steps;
  const groups = Math.ceil(targetSteps / stepsPerGroup);
  const perFill = Math.floor(groups / 4);
  const fills = Math.ceil((leases + warmup) / perFill);
  const result: LeaseSize = {
    steps: groups * stepsPerGroup,
    fills,
    fillSeconds: 0,
    dbBytes: 0,
    leases: 0,
    lease: [],
    rawRead: [],
    ack: [],
    total: [],
  };
  const request = LeaseRequest.parse({ batch_size: 4, n_rollouts: ROLLOUTS, consumer: 'bench' });
  let done = 0;
  for (let fill = 0; fill < fills; fill++) {
    const dir = tempDir('lease');
    try {
      const path = join(dir, 'pool.db');
      const fillSeconds = await fillStore(path, groups, tpls, `f${fill}-`);
      result.fillSeconds += fillSeconds;
      result.dbBytes = fileBytes(path) + fileBytes(`${path}-wal`);
      if (fill === 0) log(`lease ${int(result.steps)} steps: filled in ${fix(fillSeconds, 1)} s`);
      // Measured with the default durability (synchronous=FULL).
      const store: SqliteStore = await openSqliteStore({ path });
      const pool = new DataPool({ store });
      const reader = new Database(path, { readonly: true });
      applyPragmas(reader, 'FULL');
      const seqOf = reader.prepare('SELECT seq FROM trajectories WHERE id = ?').pluck();
      const rowsOf = reader.prepare('SELECT * FROM steps WHERE key BETWEEN ? AND ? ORDER BY key');
      for (let i = 0; i < perFill && done < leases + warmup; i++, done++) {
        const t0 = performance.now();
        const batch = await pool.lease(request);
        const t1 = performance.now();
        if (!batch) throw new Error(`no batch at lease ${done} of ${int(result.steps)} steps`);
        const served = batch.groups.reduce(
          (n, g) => n + g.trajectories.reduce((m, t) => m + t.steps.length, 0),
          0,
        );
        if (batch.groups.length !== 4 || served !== 4 * stepsPerGroup) {
          throw new Error(`lease served ${batch.groups.length} groups / ${served} steps`);
        }
        const seqs = batch.groups.flatMap((g) =>
          g.trajectories.map((t) => seqOf.get(t.trajectory.id) as number),
        );
        const r0 = performance.now();
        for (const seq of seqs) rowsOf.all(stepKey(seq, 0), stepKey(seq, STEP_KEY_SPAN - 1));
        const rawRead = performance.now() - r0;
        const t15 = performance.now();
        await pool.ack(batch.lease.id);
        const t2 = performance.now();
        if (done >= warmup) {
          result.lease.push(t1 - t0);
          result.rawRead.push(rawRead);
          result.ack.push(t2 - t15);
          result.total.push(t1 - t0 + (t2 - t15));
        }
      }
      reader.close();
      await pool.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }
  result.leases = result.total.length;
  log(
    `lease ${int(result.steps)} steps: lease+ack p50 ${fix(percentile(result.total, 50))} ms, p99 ${fix(percentile(result.total, 99))} ms`,
  );
  return result;
}

async function benchLease(quick: boolean): Promise<{ warmup: number; sizes: LeaseSize[] }> {
  const tpls = templates(512, SMALL, 3).map((t) => t.map(toNewStep));
  const sizes = quick ? [10_000, 100_000] : [10_000, 100_000, 1_000_000];
  const leases = quick ? 150 : 400;
  const warmup = 10;
  const out: LeaseSize[] = [];
  for (const size of sizes) out.push(await leaseAtSize(size, leases, warmup, tpls));
  return { warmup, sizes: out };
}

// ---- 4. bytes on disk ---------------------------------------------------------------------------

interface StorageRun {
  logprobs: boolean;
  trajectories: number;
  steps: number;
  distinctTokens: number;
  naiveTokens: number;
  storeBytes: number;
  storeBytesVacuum: number;
  stepsTableBytes: number;
  /** free bytes inside the steps table's leaf pages */
  stepsLeafUnused: number;
  naiveBytes: number;
  byObject: { name: string; bytes: number }[];
}

function checkpointedBytes(path: string): number {
  const db = new Database(path);
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  return fileBytes(path) + fileBytes(`${path}-wal`);
}

async function storageRun(trajectoryCount: number, withLogprobs: boolean): Promise<StorageRun> {
  const shape = { ...LONG, withLogprobs };
  const tpls = templates(trajectoryCount, shape, withLogprobs ? 4 : 5).map((t) => t.map(toNewStep));
  const trajectories = tpls.map((_, k) => trajectorySteps(tpls, k, ''));
  let steps = 0;
  let naiveTokens = 0;
  let distinctTokens = 0;
  for (const t of trajectories) {
    distinctTokens += shape.systemTokens;
    for (const s of t) {
      steps++;
      naiveTokens += s.promptIds.length + s.responseIds.length;
      distinctTokens += shape.observationTokens + shape.responseTokens;
    }
  }
  const dir = tempDir('storage');
  try {
    // The store, filled as agents do: one step per call, CONCURRENCY in flight.
    const path = join(dir, 'pool.db');
    const store = await openSqliteStore({ path, synchronous: 'NORMAL' });
    const pool = new DataPool({ store });
    let next = 0;
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let k = next++; k < trajectories.length; k = next++) {
          for (const step of trajectories[k]!) await pool.submitSteps([step], { nRollouts: ROLLOUTS });
        }
      }),
    );
    await pool.close();
    const storeBytes = checkpointedBytes(path);
    const db = new Database(path);
    const byObject = (
      db.prepare('SELECT name, sum(pgsize) AS bytes FROM dbstat GROUP BY name ORDER BY bytes DESC').all() as {
        name: string;
        bytes: number;
      }[]
    ).slice(0, 8);
    const stepsTableBytes = byObject.find((o) => o.name === 'steps')?.bytes ?? 0;
    const { unused: stepsLeafUnused } = db
      .prepare(
        "SELECT coalesce(sum(unused), 0) AS unused FROM dbstat WHERE name = 'steps' AND pagetype = 'leaf'",
      )
      .get() as { unused: number };
    db.exec('VACUUM');
    db.close();
    const storeBytesVacuum = checkpointedBytes(path);

    // The naive layout: every prompt stored whole, same columns and integer key.
    const naivePath = join(dir, 'naive.db');
    const naive = new Database(naivePath);
    applyPragmas(naive, 'NORMAL');
    naive.exec(STEPS_SCHEMA.table);
    const insert = naive.prepare(STEPS_INSERT);
    const rows = encodeRows(trajectories, Date.now());
    naive.transaction(() => {
      let i = 0;
      for (const t of trajectories) {
        for (const s of t) {
          const row = rows[i++]!;
          insert.run(
            rowValues({ ...row, base_idx: null, prefix_len: 0, prompt_suffix: encodeTokens(s.promptIds) }),
          );
        }
      }
    })();
    naive.close();
    const naiveBytes = checkpointedBytes(naivePath);
    return {
      logprobs: withLogprobs,
      trajectories: trajectories.length,
      steps,
      distinctTokens,
      naiveTokens,
      storeBytes,
      storeBytesVacuum,
      stepsTableBytes,
      stepsLeafUnused,
      naiveBytes,
      byObject,
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

async function benchStorage(quick: boolean): Promise<StorageRun[]> {
  const count = quick ? 8 : 64;
  const out: StorageRun[] = [];
  for (const withLogprobs of [true, false]) {
    const run = await storageRun(count, withLogprobs);
    log(
      `storage (logprobs ${withLogprobs}): ${int(run.storeBytes / run.steps)} B/step, ${fix(run.storeBytes / (run.distinctTokens * 4))}x distinct`,
    );
    out.push(run);
  }
  return out;
}

// ---- report -------------------------------------------------------------------------------------

function sqliteVersion(): string {
  const db = new Database(':memory:');
  try {
    return (db.prepare('SELECT sqlite_version() AS v').get() as { v: string }).v;
  } finally {
    db.close();
  }
}

function ingestReport(s: IngestSection): string[] {
  const shape = `${SMALL.steps}-step trajectories, ${SMALL.systemTokens}-token system prompt, ${SMALL.observationTokens}-token observation and ${SMALL.responseTokens} response tokens per step, logprobs included; groups of ${ROLLOUTS}`;
  const rawFull = median(s.raw['FULL/plain']!);
  const rawNormal = median(s.raw['NORMAL/plain']!);
  const lines: string[] = [
    '### 1. Ingest in process (`DataPool.submitSteps`)',
    '',
    `${int(s.trajectories * SMALL.steps)} steps per run (${int(s.trajectories)} trajectories: ${shape}). ${CONCURRENCY} concurrent submitters, each awaiting its call before the next; group commit (WriteCoalescer, default window). Median of ${s.reps} runs, a fresh database each run.`,
    '',
    '| submission | synchronous | steps/s (median) | runs | steps/commit | raw baseline rows/s | pool / raw | target |',
    '|---|---|---:|---|---:|---:|---:|---|',
  ];
  for (const key of ['FULL/step', 'NORMAL/step', 'FULL/trajectory', 'NORMAL/trajectory']) {
    const runs = s.pool[key]!;
    const [sync, perCall] = key.split('/') as [Sync, string];
    const rate = median(runs.map((r) => r.stepsPerSec));
    const raw = sync === 'FULL' ? rawFull : rawNormal;
    lines.push(
      `| ${perCall === 'step' ? '1 step a call' : `${SMALL.steps} steps a call (whole trajectory)`} | ${sync} | **${int(rate)}** | ${runs.map((r) => int(r.stepsPerSec)).join(' / ')} | ${fix(median(runs.map((r) => r.stepsPerCommit)), 1)} | ${int(raw)} | ${fix(rate / raw, 3)} | ≥ ${int(TARGETS.inProcess)}: ${verdict(rate >= TARGETS.inProcess)} |`,
    );
  }
  lines.push(
    '',
    `Raw baseline: the same rows (the same packed blobs, encoded beforehand by \`encodeStep\`) through one prepared \`INSERT\` (positional parameters, all 23 columns), ${s.batch} rows a transaction (the steps per commit the pool reached with one step a call), into a table with the same columns as \`steps\`, same pragmas (WAL, cache_size, temp_store). Median of ${s.reps} runs:`,
    '',
    '| raw INSERT | synchronous | rows/s (median) | runs |',
    '|---|---|---:|---|',
  );
  for (const key of ['FULL/plain', 'NORMAL/plain', 'FULL/indexed', 'NORMAL/indexed']) {
    const [sync, kind] = key.split('/') as [Sync, string];
    const runs = s.raw[key]!;
    lines.push(
      `| ${kind === 'plain' ? 'table with the same columns, no index' : `same table plus the store's ${STEPS_SCHEMA.indexes.length} steps indexes`} | ${sync} | ${int(median(runs))} | ${runs.map(int).join(' / ')} |`,
    );
  }
  return lines;
}

function httpReport(h: HttpSection, rawFull: number | null): string[] {
  const lines = [
    '### 2. Ingest over HTTP (`POST /v1/steps`)',
    '',
    `\`startServer\` (synchronous=FULL, the default) in its own Node process; ${CONCURRENCY} concurrent clients in the benchmark process over loopback, each awaiting its answer before sending the next request. The raw-HTTP clients use a node:http keep-alive agent with bodies serialized beforehand; the SDK clients call \`StepwiseClient.submitSteps\` (undici \`request\` with a keep-alive pool), which serializes per call. Same step shape as above. Run lengths: ${h.seconds.step} s (1 step, node:http), ${h.seconds.trajectory} s (8 steps), ${h.seconds['sdk-step']} s (SDK); median of ${h.reps}, fresh server and database each run. CPU is cores used (1.00 = one core busy; the machine has ${os.cpus().length}). "in commit" is the share of wall time the server spent inside \`store.submitBatch\` (its event loop is blocked meanwhile).`,
    '',
    '| request | steps/s (median) | runs | requests/s | steps/commit | ms/commit | in commit | server CPU | client CPU | errors | HTTP / raw baseline (FULL) | target |',
    '|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const mode of Object.keys(HTTP_MODES) as HttpMode[]) {
    const runs = h.runs[mode];
    if (!runs) continue;
    const m = (f: (r: HttpRun) => number) => median(runs.map(f));
    const rate = m((r) => r.stepsPerSec);
    lines.push(
      `| ${HTTP_MODES[mode]} | **${int(rate)}** | ${runs.map((r) => int(r.stepsPerSec)).join(' / ')} | ${int(m((r) => r.requestsPerSec))} | ${fix(
        m((r) => r.stepsPerCommit),
        1,
      )} | ${fix(m((r) => r.commitMs))} | ${fix(m((r) => r.commitShare) * 100, 0)}% | ${fix(m((r) => r.serverCpu))} | ${fix(m((r) => r.clientCpu))} | ${runs.reduce((n, r) => n + r.errors, 0)} | ${rawFull === null ? 'n/a' : `${fix(rate / rawFull, 3)} (of ${int(rawFull)})`} | ≥ ${int(TARGETS.http)}: ${verdict(rate >= TARGETS.http)} |`,
    );
  }
  return lines;
}

function leaseReport(l: { warmup: number; sizes: LeaseSize[] }): string[] {
  const lines = [
    '### 3. Lease latency against pool size',
    '',
    `Each pool is filled with complete groups (${ROLLOUTS} trajectories × ${SMALL.steps} steps, same step shape) through \`store.submitBatch\` directly, 512 trajectories a call, **with synchronous=NORMAL for filling**; the store is then reopened with the default synchronous=FULL and measured through \`DataPool.lease\` (batch_size 4, n_rollouts ${ROLLOUTS}, wait_ms 0; each lease serves ${4 * ROLLOUTS * SMALL.steps} steps, decoded) followed by \`DataPool.ack\`, one after the other. The first ${l.warmup} leases are warm-up and not counted. Pools too small for all leases are filled again from scratch (fills column), so the stored size stays the stated one.`,
    '',
    `Baseline, after each lease on a second read-only connection: reading the served trajectories' step rows (\`SELECT *\` by key range, the driver's row objects, nothing decoded), the floor of any lease that serves rows from this table.`,
    '',
    '| pool size (steps) | DB size | fill time (steps/s) | fills | leases | lease p50 / p99 ms | raw row read p50 ms | lease / raw read (p50) | ack p50 / p99 ms | lease+ack p50 / p99 ms | target: lease p99 ≤ 20 ms at 1M |',
    '|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const s of l.sizes) {
    const p = (v: number[]) => `${fix(percentile(v, 50))} / ${fix(percentile(v, 99))}`;
    const perFill = s.fillSeconds / s.fills;
    const p99 = percentile(s.lease, 99);
    lines.push(
      `| ${int(s.steps)} | ${mib(s.dbBytes)} | ${fix(perFill, 1)} s (${int(s.steps / perFill)}) | ${s.fills} | ${s.leases} | **${p(s.lease)}** | ${fix(percentile(s.rawRead, 50))} | ${fix(percentile(s.lease, 50) / percentile(s.rawRead, 50))}× | ${p(s.ack)} | ${p(s.total)} | ${s.steps >= 1_000_000 ? verdict(p99 <= TARGETS.leaseP99Ms) : `(${verdict(p99 <= TARGETS.leaseP99Ms)})`} |`,
    );
  }
  return lines;
}

function storageReport(runs: StorageRun[]): string[] {
  const first = runs[0]!;
  const lines = [
    '### 4. Bytes on disk per step',
    '',
    `${first.trajectories} trajectories × ${LONG.steps} steps (${int(first.steps)} steps): ${LONG.systemTokens}-token system prompt, ${int(LONG.observationTokens)}-token observation and ${LONG.responseTokens} response tokens per step, so the last prompt holds ${int(LONG.systemTokens + LONG.steps * LONG.observationTokens + (LONG.steps - 1) * LONG.responseTokens)} tokens. Submitted one step a call through the DataPool (${CONCURRENCY} in flight). Sizes are the database file after \`PRAGMA wal_checkpoint(TRUNCATE)\` (the WAL is then empty), for the whole database: steps, trajectories, groups, events, counters and all indexes. Distinct tokens = system + Σ(observation + response) per trajectory, 4 bytes each. Naive = every step's whole prompt + response (+ logprobs) stored: computed, and measured as a table with the same columns and its primary index.`,
    '',
    '| logprobs | store B/step | after VACUUM | steps table only | free in steps leaf pages | distinct-token B/step | store / distinct tokens | store / (distinct tokens + logprobs) | naive computed B/step | naive measured B/step | naive / store | target ≤ 1.3× distinct |',
    '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|',
  ];
  for (const r of runs) {
    const per = (b: number) => int(b / r.steps);
    const distinct = r.distinctTokens * 4;
    const logprobBytes = r.logprobs ? r.steps * LONG.responseTokens * 4 : 0;
    const naiveComputed = r.naiveTokens * 4 + logprobBytes;
    const ratio = r.storeBytes / distinct;
    lines.push(
      `| ${r.logprobs ? 'yes' : 'no'} | **${per(r.storeBytes)}** | ${per(r.storeBytesVacuum)} | ${per(r.stepsTableBytes)} | ${per(r.stepsLeafUnused)} | ${per(distinct)} | **${fix(ratio)}×** | ${fix(r.storeBytes / (distinct + logprobBytes))}× | ${per(naiveComputed)} | ${per(r.naiveBytes)} | ${fix(r.naiveBytes / r.storeBytes, 1)}× | ${verdict(ratio <= TARGETS.storageRatio)} |`,
    );
  }
  lines.push(
    '',
    `Largest objects in the store (logprobs: yes), from \`dbstat\`: ${first.byObject.map((o) => `${o.name} ${kib(o.bytes)}`).join(', ')}.`,
  );
  return lines;
}

function memoryReport(http: HttpSection): string[] {
  const all = Object.values(http.runs).flat();
  const perStep = http.runs.step ?? all;
  return [
    '### 5. Server memory after HTTP ingest',
    '',
    `\`process.memoryUsage()\` of the server process (run with tsx, like \`npm run stepwise\`; SQLite page cache up to 64 MiB) at the end of each HTTP run of section 2. RSS after the 1-step-a-request runs: ${perStep.map((r) => mib(r.serverRss)).join(' / ')} (median **${mib(median(perStep.map((r) => r.serverRss)))}**); largest after any HTTP run ${mib(Math.max(...all.map((r) => r.serverRss)))}; freshly started and idle ${mib(median(all.map((r) => r.serverRssIdle)))} (median); V8 heap used at the end ${mib(median(all.map((r) => r.serverHeap)))} (median).`,
  ];
}

/** The headline figures of a run, one line of bench/results/pool.jsonl. */
function runFigures(
  ingest: IngestSection | null,
  http: HttpSection | null,
  lease: { sizes: LeaseSize[] } | null,
  storage: StorageRun[] | null,
): Record<string, unknown> {
  const figures: Record<string, unknown> = {};
  if (ingest) {
    const raw = (key: string) => median(ingest.raw[key]!);
    const rate = (key: string) => median(ingest.pool[key]!.map((r) => r.stepsPerSec));
    figures.raw_insert_rows_per_s = {
      full: round(raw('FULL/plain'), 0),
      normal: round(raw('NORMAL/plain'), 0),
      full_indexed: round(raw('FULL/indexed'), 0),
      normal_indexed: round(raw('NORMAL/indexed'), 0),
    };
    const keys = {
      trajectory_full: 'FULL/trajectory',
      trajectory_normal: 'NORMAL/trajectory',
      step_full: 'FULL/step',
      step_normal: 'NORMAL/step',
    };
    const each = (f: (key: string) => number) =>
      Object.fromEntries(Object.entries(keys).map(([name, key]) => [name, f(key)]));
    figures.ingest_steps_per_s = each((key) => round(rate(key), 0));
    figures.ingest_vs_raw = each((key) =>
      round(rate(key) / raw(key.startsWith('FULL') ? 'FULL/plain' : 'NORMAL/plain'), 3),
    );
  }
  if (http) {
    const rates = Object.entries(http.runs).map(
      ([mode, runs]) => [mode, median(runs.map((r) => r.stepsPerSec))] as const,
    );
    figures.http_steps_per_s = Object.fromEntries(rates.map(([mode, rate]) => [mode, round(rate, 0)]));
    const stepRuns = http.runs.step ?? Object.values(http.runs).flat();
    figures.server_rss_mib = round(median(stepRuns.map((r) => r.serverRss)) / 1024 / 1024, 1);
  }
  if (lease) {
    const at = (f: (s: LeaseSize) => number) =>
      Object.fromEntries(lease.sizes.map((s) => [String(s.steps), round(f(s))]));
    figures.lease_p50_ms = at((s) => percentile(s.lease, 50));
    figures.lease_p99_ms = at((s) => percentile(s.lease, 99));
    figures.lease_raw_read_p50_ms = at((s) => percentile(s.rawRead, 50));
  }
  if (storage) {
    const key = (r: StorageRun) => (r.logprobs ? 'logprobs' : 'no_logprobs');
    const each = (f: (r: StorageRun) => number) => Object.fromEntries(storage.map((r) => [key(r), f(r)]));
    const logprobBytes = (r: StorageRun) => (r.logprobs ? r.steps * LONG.responseTokens * 4 : 0);
    figures.disk_vs_distinct_token_bytes = each((r) => round(r.storeBytes / (r.distinctTokens * 4)));
    figures.disk_vs_distinct_tokens_and_logprobs = each((r) =>
      round(r.storeBytes / (r.distinctTokens * 4 + logprobBytes(r))),
    );
    figures.naive_vs_store = each((r) => round(r.naiveBytes / r.storeBytes, 1));
  }
  return figures;
}

// ---- main ---------------------------------------------------------------------------------------

async function main(): Promise<void> {
  const args = process.argv.slice(2);
  if (args[0] === '--serve-child') {
    exitWithParent();
    await serveChild(args[1]!);
    return;
  }
  exitOnHelp(import.meta.url, args);
  const quick = args.includes('--quick');
  const onlyAt = args.indexOf('--only');
  const only = onlyAt >= 0 ? new Set((args[onlyAt + 1] ?? '').split(',')) : null;
  const want = (section: string) => only === null || only.has(section);
  const command =
    process.env.npm_lifecycle_event === 'bench:pool'
      ? `npm run bench:pool${args.length ? ` -- ${args.join(' ')}` : ''}  (tsx bench/pool.ts)`
      : `tsx bench/pool.ts${args.length ? ` ${args.join(' ')}` : ''}`;
  const started = performance.now();
  const loadAtStart = os.loadavg();
  const codeAtStart = codeVersion();

  const ingest = want('ingest') ? await benchIngest(quick) : null;
  const http = want('http') ? await benchHttp(quick) : null;
  const lease = want('lease') ? await benchLease(quick) : null;
  const storage = want('storage') ? await benchStorage(quick) : null;
  const minutes = (performance.now() - started) / 60_000;

  const lines = [
    '## DataPool benchmark (`bench/pool.ts`)',
    '',
    ...machineInfo(command, loadAtStart, codeAtStart, {
      stack: `SQLite ${sqliteVersion()} (better-sqlite3)`,
      noise: 'other processes',
      extra: [`- Temp dir: ${os.tmpdir()}`],
    }),
    `- Wall time of the whole benchmark: ${fix(minutes, 1)} min`,
    '',
    'Targets: ≥ 50,000 steps/s in process, ≥ 10,000 steps/s over HTTP, lease p99 ≤ 20 ms at 1M steps, storage ≤ 1.3× the distinct-token bytes.',
    '',
  ];
  if (ingest) lines.push(...ingestReport(ingest), '');
  if (http) lines.push(...httpReport(http, ingest ? median(ingest.raw['FULL/plain']!) : null), '');
  if (lease) lines.push(...leaseReport(lease), '');
  if (storage) lines.push(...storageReport(storage), '');
  if (http) lines.push(...memoryReport(http), '');
  const report = lines.join('\n');
  process.stdout.write(`${report}\n`);
  if (quick) return;
  const figures = runFigures(ingest, http, lease, storage);
  const written = recordRun(
    'pool',
    { code: codeAtStart, only: only && [...only], ...figures },
    only ? undefined : report,
  );
  log(`wrote ${written.join(', ')}`);
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
