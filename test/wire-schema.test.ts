import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  AGENT_HEADERS,
  BatchJsonWire,
  LEASE_HEADERS,
  RowsBatchJsonWire,
} from '../packages/core/src/domain/index.js';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { generateWire, PYTHON_FILE, SCHEMA_FILE } from '../scripts/wire.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { wireEpisode } from './support/steps.js';
import { testServers } from './support/test-servers.js';

/*
 * One wire for both languages. The committed JSON Schema and Python dataclasses are what the zod
 * schemas generate; batches a real server leases over HTTP (steps with signals, labels and
 * advantages, a prefix-tree packing, stitched rows) parse under the strict schemas, so the serving
 * code writes nothing the schema does not name; the lease headers it sends are the listed names;
 * and the Python client's pytest suite reads the same leased batches into its dataclasses. CI sets
 * STEPWISE_TRAIN_PYTHON (with pytest), so a missing pytest fails there instead of skipping.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);
const { serve } = testServers('wire');

describe('the generated wire files', () => {
  it('are what the zod schemas generate (run `npm run gen:wire` after changing them)', () => {
    const { schema, python: py } = generateWire();
    expect(readFileSync(SCHEMA_FILE, 'utf8')).toBe(schema);
    expect(readFileSync(PYTHON_FILE, 'utf8')).toBe(py);
    const parsed = JSON.parse(schema) as { $defs: Record<string, unknown>; 'x-headers': unknown };
    expect(Object.keys(parsed.$defs)).toEqual(
      expect.arrayContaining([
        'BatchJson',
        'RowsBatchJson',
        'StepOut',
        'SignalOut',
        'Packing',
        'TrajectoryRow',
      ]),
    );
    expect(parsed['x-headers']).toEqual({ lease: LEASE_HEADERS, agent: AGENT_HEADERS });
  });
});

describe('leased batches against the wire schema', () => {
  const cases: {
    name: string;
    batch: unknown;
    expect: { groups: number; trajectories: number };
    /** Partial rollouts: each step's response-token versions and which tokens train, written by hand. */
    partial?: { versions: Record<string, number[]>; trained: Record<string, boolean[]> };
  }[] = [];
  let dir = '';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-wire-cases-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it('every json form parses under the strict schema; the binary form sends the listed headers', async () => {
    const server = await serve({});
    const client = new StepwiseClient({ baseUrl: server.url });
    for (const [g, group] of ['p1', 'p2'].entries())
      for (let r = 0; r < 2; r++)
        await client.submitSteps(wireEpisode(`t${g}${r}`, group, 2 + r, r), { nRollouts: 2 });
    await client.addSignals([
      { trajectory_uid: 't00', name: 'judge', value: 0.5, source: 'judge' },
      {
        trajectory_uid: 't01',
        step_index: 1,
        name: 'format',
        value: 1,
        source: 'rule',
        details: { ok: true },
      },
    ]);
    const label = await fetch(`${server.url}/v1/labels`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        labels: [{ trajectory_uid: 't10', step_index: 0, quality: 'good', tags: ['x'] }],
      }),
    });
    expect(label.status).toBe(200);
    const lease = async (body: Record<string, unknown>) => {
      const res = await fetch(`${server.url}/v1/batches/lease`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ batch_size: 2, n_rollouts: 2, wait_ms: 0, ...body }),
      });
      expect(res.status).toBe(200);
      return res;
    };
    const forms: [string, Record<string, unknown>][] = [
      ['steps', {}],
      ['steps-advantage-packed', { advantage: 'grpo', pack: 'prefix_tree', share_responses: true }],
      ['rows', { rows: 'trajectory', advantage: 'rloo' }],
    ];
    for (const [name, body] of forms) {
      const batch = (await (await lease(body)).json()) as { lease_id: string; rows?: string };
      const schema = batch.rows === 'trajectory' ? RowsBatchJsonWire : BatchJsonWire;
      const parsed = schema.safeParse(batch);
      expect(parsed.error?.issues, name).toBeUndefined();
      cases.push({ name, batch, expect: { groups: 2, trajectories: 4 } });
      await client.nack(batch.lease_id);
    }
    // The steps forms carry what the fixtures put there: a label, signals, advantages, a packing.
    const packed = cases[1]!.batch as {
      groups: {
        packing?: unknown;
        trajectories: { steps: { advantage?: number; label: unknown }[]; signals: unknown[] }[];
      }[];
    };
    expect(packed.groups.every((g) => g.packing !== undefined)).toBe(true);
    const all = packed.groups.flatMap((g) => g.trajectories);
    expect(all.flatMap((t) => t.steps).every((s) => typeof s.advantage === 'number')).toBe(true);
    expect(all.flatMap((t) => t.steps).some((s) => s.label !== null)).toBe(true);
    expect(all.flatMap((t) => t.signals)).toHaveLength(2);
    const padded = await lease({ format: 'padded' });
    const headers = [...padded.headers.keys()];
    for (const name of Object.values(LEASE_HEADERS).filter((h) => h !== LEASE_HEADERS.curation))
      expect(headers, name).toContain(name);
    await client.nack(padded.headers.get(LEASE_HEADERS.leaseId)!);
    await partialCases(server.url, lease);
  });

  /** A channel that masks partial rollouts, with a step whose response spans a weight switch. */
  async function partialCases(url: string, lease: (body: Record<string, unknown>) => Promise<Response>) {
    const put = await fetch(`${url}/v1/channels/partial`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ partial_rollouts: 'mask' }),
    });
    expect(put.status).toBe(200);
    const steps = [
      {
        trajectory_uid: 'wp',
        response_ids: [10, 11, 12],
        policy_version: 0,
        version_spans: [
          [0, 1],
          [1, 2],
        ],
      },
      { trajectory_uid: 'wq', response_ids: [20, 21], policy_version: 1 },
    ].map((s) => ({
      ...s,
      prompt_uid: 'pp',
      step_index: 0,
      prompt_ids: [1, 2, 3],
      is_last: true,
      reward: 0,
    }));
    const posted = await fetch(`${url}/v1/steps`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ steps, n_rollouts: 2, channel: 'partial' }),
    });
    expect(posted.status).toBe(200);
    const partial = {
      versions: { 'wp/0': [0, 1, 1], 'wq/0': [1, 1] },
      trained: { 'wp/0': [false, true, true], 'wq/0': [true, true] },
    };
    const forms: [string, Record<string, unknown>][] = [
      ['partial-packed', { pack: 'prefix_tree' }],
      ['partial-rows', { rows: 'trajectory' }],
    ];
    for (const [name, body] of forms) {
      const batch = (await (await lease({ channel: 'partial', batch_size: 1, ...body })).json()) as {
        lease_id: string;
        rows?: string;
      };
      const parsed = (batch.rows === 'trajectory' ? RowsBatchJsonWire : BatchJsonWire).safeParse(batch);
      expect(parsed.error?.issues, name).toBeUndefined();
      cases.push({ name, batch, expect: { groups: 1, trajectories: 2 }, partial });
      await fetch(`${url}/v1/batches/${batch.lease_id}/nack`, { method: 'POST' });
    }
  }

  it("the Python client's pytest suite reads the same batches into its generated dataclasses", async () => {
    const hasPytest = python !== null && spawnSync(python, ['-c', 'import pytest']).status === 0;
    if (!hasPytest) {
      if (required) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no pytest (.ci/run installs it)');
      return;
    }
    expect(cases).toHaveLength(5);
    const file = join(dir, 'cases.json');
    writeFileSync(file, JSON.stringify({ cases }));
    const tests = new URL('../clients/python/tests', import.meta.url).pathname;
    const out = await runPython(python!, ['-m', 'pytest', '-q', '-p', 'no:cacheprovider', tests], {
      timeoutMs: 300_000,
      env: { STEPWISE_WIRE_CASES: file },
    });
    // Every test of the client's suite ran and passed: the wire's, and the reader's and lifeline's.
    const summary = /(\d+) passed/.exec(out);
    expect(out, out).not.toMatch(/failed|error|skipped/);
    expect(Number(summary?.[1])).toBeGreaterThanOrEqual(6);
  }, 300_000);
});
