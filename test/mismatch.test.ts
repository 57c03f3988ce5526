import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { EngineMismatch, MismatchStats, MismatchTally } from '../packages/core/src/domain/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { callJson } from './support/http.js';
import { lease, report, step, submitGroup } from './support/mismatch.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Mismatch telemetry end to end over HTTP on loopback, on a SQLite file and on PostgreSQL: steps
 * submitted with their engine and version, a lease, the trainer's report
 * (POST /v1/batches/{id}/mismatch), and the aggregates GET /v1/stats reads back per engine and
 * version, with expected values worked out by hand from the reported numbers. Then the Python
 * trainer's own report (clients/python/tests/check_mismatch.py), checked against log-probs it
 * computed step by step without the library's batching.
 */

let dir = '';
const schemas: string[] = [];
const servers: RunningServer[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-mismatch-'));
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

// SQLite on the event loop, and on its worker thread (the pool's rules and reads behind messages).
type StoreKind = 'SQLite' | 'SQLite worker' | 'PostgreSQL';
const STORES: StoreKind[] = ['SQLite', 'SQLite worker', ...(pgUrl ? (['PostgreSQL'] as const) : [])];
let dbCount = 0;

async function serve(store: StoreKind): Promise<RunningServer> {
  let where: Pick<ServerOptions, 'dbPath' | 'pg'> = { dbPath: join(dir, `m${dbCount++}.db`) };
  if (store === 'PostgreSQL') {
    const schema = freshSchema('stepwise_mismatch');
    schemas.push(schema);
    where = { dbPath: '', pg: { url: pgUrl!, schema } };
  }
  const storeThread = store === 'SQLite worker' ? 'worker' : 'main';
  const server = await startServer({ ...where, port: 0, engines: [], storeThread });
  servers.push(server);
  return server;
}

async function mismatchOf(url: string, channel: string): Promise<MismatchStats> {
  const { status, json } = await callJson('GET', `${url}/v1/stats?channel=${channel}`);
  expect(status).toBe(200);
  return json.mismatch as MismatchStats;
}

function expectTally(actual: MismatchTally, expected: MismatchTally): void {
  expect([actual.steps, actual.tokens]).toEqual([expected.steps, expected.tokens]);
  for (const k of ['k1', 'k3', 'maxAbsDiff', 'maskedFraction'] as const)
    expect(actual[k], k).toBeCloseTo(expected[k], 12);
}

const engine = (stats: MismatchStats, id: string | null): EngineMismatch => {
  const found = stats.engines.find((e) => e.engineId === id);
  if (!found) throw new Error(`no engine ${id} in ${JSON.stringify(stats.engines.map((e) => e.engineId))}`);
  return found;
};

describe.each(STORES)('mismatch telemetry over HTTP (%s)', (store) => {
  it('stores each report with the stored step’s engine and version, read back per engine and version', async () => {
    const server = await serve(store);
    const url = server.url;
    expect((await callJson('PUT', `${url}/v1/policy-version`, { version: 1 })).status).toBe(200);
    await submitGroup(url, 'm', 'g1', [
      { uid: 't1', engine: 'e-a', versions: [0, 1] },
      { uid: 't2', engine: 'e-b', versions: [1] },
    ]);
    await submitGroup(url, 'm', 'g2', [
      { uid: 't3', engine: 'e-a', versions: [1] },
      { uid: 't4', engine: null, versions: [1] },
    ]);
    const l1 = await lease(url, 'm');
    expect(l1.groups).toEqual(['g1']);
    const reports = [
      step('t1', 0, 10, 0.02, 0.01, 0.5, 0.1),
      step('t1', 1, 30, 0.04, 0.03, 0.9, 0.3),
      step('t2', 0, 20, -0.01, 0.002, 0.2, 0),
    ];
    const stored = await report(url, l1.id, reports);
    expect(stored).toEqual({ status: 200, json: { lease_id: l1.id, steps: 3 } });

    const stats = await mismatchOf(url, 'm');
    expect(stats.engines.map((e) => e.engineId)).toEqual(['e-a', 'e-b']);
    const a = engine(stats, 'e-a');
    // e-a: k1 (10·0.02 + 30·0.04) / 40, k3 (10·0.01 + 30·0.03) / 40, masked (0.1 + 0.3) / 2.
    expectTally(a, { steps: 2, tokens: 40, k1: 0.035, k3: 0.025, maxAbsDiff: 0.9, maskedFraction: 0.2 });
    expect([a.leases, a.baselineK3, a.jump]).toEqual([1, null, false]);
    expect(a.recent.map((r) => r.leaseId)).toEqual([l1.id]);
    expectTally(a.versions[0]!, {
      steps: 1,
      tokens: 10,
      k1: 0.02,
      k3: 0.01,
      maxAbsDiff: 0.5,
      maskedFraction: 0.1,
    });
    expectTally(a.versions[1]!, {
      steps: 1,
      tokens: 30,
      k1: 0.04,
      k3: 0.03,
      maxAbsDiff: 0.9,
      maskedFraction: 0.3,
    });
    expect(a.versions.map((v) => v.policyVersion)).toEqual([0, 1]);
    expectTally(engine(stats, 'e-b'), {
      steps: 1,
      tokens: 20,
      k1: -0.01,
      k3: 0.002,
      maxAbsDiff: 0.2,
      maskedFraction: 0,
    });
    // Version 1 over both engines: t1/1 and t2/0, k3 (30·0.03 + 20·0.002) / 50, masked (0.3 + 0) / 2.
    expect(stats.versions.map((v) => v.policyVersion)).toEqual([0, 1]);
    expectTally(stats.versions[1]!, {
      steps: 2,
      tokens: 50,
      k1: 0.02,
      k3: 0.0188,
      maxAbsDiff: 0.9,
      maskedFraction: 0.15,
    });
    expect([stats.jumpFactor, stats.jumpFloor]).toEqual([3, 1e-3]);
    // Another channel's stats hold none of it; all channels' hold it.
    expect((await mismatchOf(url, 'other')).engines).toEqual([]);
    expect((await callJson('GET', `${url}/v1/stats`)).json.mismatch.engines).toHaveLength(2);

    // A retried report replaces its rows: nothing counts twice.
    expect((await report(url, l1.id, reports)).status).toBe(200);
    expect(await mismatchOf(url, 'm')).toEqual(stats);
    // After the ack, a step reported again replaces its row.
    expect((await callJson('POST', `${url}/v1/batches/${l1.id}/ack`)).status).toBe(200);
    expect((await report(url, l1.id, [step('t2', 0, 20, -0.01, 0.004, 0.2, 0)])).status).toBe(200);
    expect(engine(await mismatchOf(url, 'm'), 'e-b').k3).toBeCloseTo(0.004, 12);
  });

  it('refuses unknown leases, steps outside the lease and bad fields, storing nothing', async () => {
    const server = await serve(store);
    const url = server.url;
    await submitGroup(url, 'r', 'g1', [
      { uid: 'a1', engine: 'e', versions: [0] },
      { uid: 'a2', engine: 'e', versions: [0] },
    ]);
    await submitGroup(url, 'r', 'g2', [
      { uid: 'b1', engine: 'e', versions: [0] },
      { uid: 'b2', engine: 'e', versions: [0] },
    ]);
    const l1 = await lease(url, 'r');
    expect(l1.groups).toEqual(['g1']);
    const ok = step('a1', 0, 2, 0.1, 0.01, 0.3, 0);
    const missing = await report(url, 'lease_nope', [ok]);
    expect([missing.status, missing.json.error.code]).toEqual([404, 'not_found']);

    const refusals: [unknown, number, string][] = [
      [[ok, step('b1', 0, 2, 0.1, 0.01, 0.3, 0)], 409, 'steps.1.trajectory_uid'], // g2 is not leased
      [[step('nobody', 0, 2, 0.1, 0.01, 0.3, 0)], 409, 'steps.0.trajectory_uid'],
      [[step('a2', 7, 2, 0.1, 0.01, 0.3, 0)], 409, 'steps.0.step_index'], // a2 has step 0 only
      [[ok, ok], 400, 'steps.1'],
      [[{ ...ok, engine_id: 'forged' }], 400, 'steps.0'],
      [[{ ...ok, masked_fraction: 1.5 }], 400, 'steps.0.masked_fraction'],
      [[{ ...ok, k3: -0.1 }], 400, 'steps.0.k3'],
      [[{ ...ok, tokens: 0 }], 400, 'steps.0.tokens'],
      [[{ ...ok, k1: 'x' }], 400, 'steps.0.k1'],
      [[], 400, 'steps'],
      [Array.from({ length: 10_001 }, () => ok), 400, 'steps'],
    ];
    for (const [steps, status, field] of refusals) {
      const answer = await report(url, l1.id, steps);
      expect([answer.status, answer.json.error.field], JSON.stringify(answer.json)).toEqual([status, field]);
    }
    const bad = await report(url, 'a%00b', [ok]);
    expect([bad.status, bad.json.error.field]).toEqual([400, 'lease_id']);
    expect((await mismatchOf(url, 'r')).engines).toEqual([]);
  });

  it('flags an engine whose mismatch jumps, within the batch that jumped', async () => {
    const server = await serve(store);
    const url = server.url;
    const jumpy = [0.01, 0.01, 0.05];
    const quiet = [1e-6, 1e-6, 1e-4]; // 100× its mean, but under the floor
    const leases: string[] = [];
    for (let i = 0; i < 3; i++) {
      await submitGroup(url, 'j', `g${i}`, [
        { uid: `s${i}`, engine: 'steady', versions: [0] },
        { uid: `j${i}`, engine: 'jumpy', versions: [0] },
        { uid: `q${i}`, engine: 'quiet', versions: [0] },
      ]);
      // Leases one after another, a few ms apart: the series is ordered by lease time.
      await new Promise((r) => setTimeout(r, 5));
      const l = await lease(url, 'j');
      leases.push(l.id);
      const answer = await report(url, l.id, [
        step(`s${i}`, 0, 10, 0.01, 0.01, 0.2, 0),
        step(`j${i}`, 0, 10, jumpy[i]!, jumpy[i]!, 0.3, 0),
        step(`q${i}`, 0, 10, quiet[i]!, quiet[i]!, 0.01, 0),
      ]);
      expect(answer.status).toBe(200);
      const stats = await mismatchOf(url, 'j');
      expect(stats.engines.map((e) => [e.engineId, e.jump])).toEqual([
        ['jumpy', i === 2],
        ['quiet', false],
        ['steady', false],
      ]);
    }
    const stats = await mismatchOf(url, 'j');
    const j = engine(stats, 'jumpy');
    expect(j.recent.map((r) => r.leaseId)).toEqual(leases);
    expect(j.recent.map((r) => r.k3)).toEqual(jumpy);
    // Its mean before the jump: (10·0.01 + 10·0.01) / 20; overall (0.1 + 0.1 + 0.5) / 30.
    expect(j.baselineK3).toBeCloseTo(0.01, 12);
    expect(j.k3).toBeCloseTo(0.7 / 30, 12);
    expect(engine(stats, 'quiet').baselineK3).toBeCloseTo(1e-6, 15);
  });
});

const TRAIN_PYTHON = process.env.STEPWISE_TRAIN_PYTHON;
const CLIENT_DIR = fileURLToPath(new URL('../clients/python', import.meta.url));

function runPython(args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      TRAIN_PYTHON!,
      ['-B', ...args],
      { cwd: CLIENT_DIR, timeout: 240_000, killSignal: 'SIGKILL', maxBuffer: 16 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${args.join(' ')} failed: ${error.message}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

describe.skipIf(!TRAIN_PYTHON)('the Python trainer’s report (STEPWISE_TRAIN_PYTHON)', () => {
  it('Trainer.update(report_mismatch=True) and Trainer.report_mismatch post what its log-probs say', async () => {
    const server = await serve('SQLite');
    const url = server.url;
    // Behaviour log-probs near what a random 151k-id model gives (about -12), so some ratios fall
    // inside the trainer's IcePop bounds and some outside.
    const behaviour = (t: number, i: number) => [-11.5 - 0.3 * t + 0.2 * i, -12.2 + 0.4 * t];
    for (const g of ['p1', 'p2'])
      await submitGroup(url, 'py', g, [
        { uid: `${g}-a`, engine: 'py-a', versions: [0, 0], logprobs: [behaviour(0, 0), behaviour(0, 1)] },
        { uid: `${g}-b`, engine: 'py-b', versions: [0], logprobs: [behaviour(1, 0)] },
      ]);
    const [lower, upper] = [Math.exp(-0.6), Math.exp(0.6)];
    const out = JSON.parse(
      await runPython([
        'tests/check_mismatch.py',
        '--url',
        url,
        '--channel',
        'py',
        '--lower',
        String(lower),
        '--upper',
        String(upper),
      ]),
    ) as {
      batches: {
        lease_id: string;
        format: string;
        logp: Record<string, number[]>;
        metrics: Record<string, number>;
      }[];
    };
    expect(out.batches.map((b) => b.format)).toEqual(['json', 'padded']);
    expect(out.batches.map((b) => b.metrics.mismatch_reported)).toEqual([1, 1]);

    // Expected per engine, from the plan's μ and the script's step-by-step π.
    const sums = new Map<
      string,
      { steps: number; tokens: number; k1: number; k3: number; max: number; masked: [number, number] }
    >();
    for (const batch of out.batches) {
      for (const [key, logp] of Object.entries(batch.logp)) {
        const [uid, index] = key.split('/') as [string, string];
        const b = uid.endsWith('-a') ? 0 : 1;
        const mu = behaviour(b, Number(index));
        const d = mu.map((m, k) => m - logp[k]!);
        const s = sums.get(uid.endsWith('-a') ? 'py-a' : 'py-b') ?? {
          steps: 0,
          tokens: 0,
          k1: 0,
          k3: 0,
          max: 0,
          masked: [0, 0],
        };
        s.steps += 1;
        s.tokens += d.length;
        s.k1 += d.reduce((x, y) => x + y, 0);
        s.k3 += d.reduce((x, y) => x + Math.expm1(-y) + y, 0);
        s.max = Math.max(s.max, ...d.map(Math.abs));
        // A ratio within 1e-4 of a bound may fall either side in float32: the masked fraction may
        // then be either of two values.
        const lr = d.map((x) => -x);
        const outside = (x: number, eps: number) => x < Math.log(lower) - eps || x > Math.log(upper) + eps;
        s.masked[0] += lr.filter((x) => outside(x, 1e-4)).length / d.length;
        s.masked[1] += lr.filter((x) => outside(x, -1e-4)).length / d.length;
        sums.set(uid.endsWith('-a') ? 'py-a' : 'py-b', s);
      }
    }
    const stats = await mismatchOf(url, 'py');
    for (const [id, s] of sums) {
      const e = engine(stats, id);
      expect([e.steps, e.tokens, e.leases]).toEqual([s.steps, s.tokens, 2]);
      expect(e.k1).toBeCloseTo(s.k1 / s.tokens, 4);
      expect(e.k3).toBeCloseTo(s.k3 / s.tokens, 4);
      expect(e.maxAbsDiff).toBeCloseTo(s.max, 4);
      expect(e.maskedFraction).toBeGreaterThanOrEqual(s.masked[0] / s.steps - 1e-12);
      expect(e.maskedFraction).toBeLessThanOrEqual(s.masked[1] / s.steps + 1e-12);
      expect(e.recent.map((r) => r.leaseId)).toEqual(out.batches.map((b) => b.lease_id));
    }
    // Some tokens were masked and some kept: the bounds were exercised.
    const masked = [...sums.values()].reduce((n, s) => n + s.masked[0], 0);
    expect(masked).toBeGreaterThan(0);
    expect(masked).toBeLessThan([...sums.values()].reduce((n, s) => n + s.steps, 0));
  }, 300_000);
});
