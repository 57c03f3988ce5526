import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { tableFromIPC } from 'apache-arrow';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { StepWireInput } from '../packages/core/src/domain/index.js';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import type { TrajectoryRowsBatchJson } from '../packages/core/src/serving/json-batch.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * `rows: "trajectory"` over real HTTP: steps posted to /v1/steps with known token ids, a lease in
 * each format, every row checked against sequences written out by hand below.
 */

type ErrorBody = { error: { field?: string; message?: string } };

const step = (
  trajectory_uid: string,
  step_index: number,
  prompt_ids: number[],
  response_ids: number[],
  extra: Partial<StepWireInput> = {},
): StepWireInput => ({
  trajectory_uid,
  prompt_uid: 'g1',
  step_index,
  prompt_ids,
  response_ids,
  ...extra,
});

// Trajectory "ta": every prompt extends the previous prompt + response (tool results 20 21, then 22).
const TA = [
  step('ta', 0, [1, 2, 3], [10, 11], { rollout_log_probs: [-0.5, -0.25] }),
  step('ta', 1, [1, 2, 3, 10, 11, 20, 21], [12], { rollout_log_probs: [-1] }),
  step('ta', 2, [1, 2, 3, 10, 11, 20, 21, 12, 22], [13, 14], {
    rollout_log_probs: [-0.125, -0.0625],
    reward: 1,
    is_last: true,
  }),
];
// Trajectory "tb": step 2's prompt rewrites the history (99 where 30 31 32 were): a prefix break.
const TB = [
  step('tb', 0, [1, 2, 3], [30], { rollout_log_probs: [-0.5], reward: 0.25 }),
  step('tb', 1, [1, 2, 3, 30, 40], [31, 32], { rollout_log_probs: [-0.75, -0.5] }),
  step('tb', 2, [1, 2, 3, 99, 40], [33], { rollout_log_probs: [-2], reward: 0, is_last: true }),
];

/** The rows written out by hand: the tokens, which are the policy's, and their logprobs. */
const N = null;
const EXPECTED = {
  ta: [
    {
      first_step: 0,
      last_step: 2,
      input_ids: [1, 2, 3, 10, 11, 20, 21, 12, 22, 13, 14],
      loss_mask: [0, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1],
      logprobs: [N, N, N, -0.5, -0.25, N, N, -1, N, -0.125, -0.0625],
      prompt_length: 3,
      reward: 1,
      spans: [
        [0, 0, 3, 5],
        [1, 5, 7, 8],
        [2, 8, 9, 11],
      ],
    },
  ],
  tb: [
    {
      first_step: 0,
      last_step: 1,
      input_ids: [1, 2, 3, 30, 40, 31, 32],
      loss_mask: [0, 0, 0, 1, 0, 1, 1],
      logprobs: [N, N, N, -0.5, N, -0.75, -0.5],
      prompt_length: 3,
      reward: 0.25,
      spans: [
        [0, 0, 3, 4],
        [1, 4, 5, 7],
      ],
    },
    {
      first_step: 2,
      last_step: 2,
      input_ids: [1, 2, 3, 99, 40, 33],
      loss_mask: [0, 0, 0, 0, 0, 1],
      logprobs: [N, N, N, N, N, -2],
      prompt_length: 5,
      reward: 0,
      spans: [[2, 0, 5, 6]],
    },
  ],
} as const;
type Expected = (typeof EXPECTED)['ta'][number] | (typeof EXPECTED)['tb'][number];
const expectedRows = (uid: string): readonly Expected[] => EXPECTED[uid as 'ta' | 'tb'];
// Trajectory rewards: ta 1, tb 0.25 (the sum of its step rewards). GRPO over two, by hand.
const GRPO = {
  ta: 0.375 / (Math.sqrt(2 * 0.375 ** 2) + 1e-6),
  tb: -0.375 / (Math.sqrt(2 * 0.375 ** 2) + 1e-6),
};

const stores: [string, () => Promise<{ server: RunningServer; cleanup(): Promise<void> }>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-trajectory-rows-'));
      const server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
      return {
        server,
        async cleanup() {
          await server.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_trajectory_rows');
      const server = await startServer({ dbPath: '', pg: { url: pgUrl!, schema }, port: 0 });
      return {
        server,
        async cleanup() {
          await server.close();
          await dropSchema(schema);
        },
      };
    },
  ]);
}

const CLIENT_DIR = fileURLToPath(new URL('../clients/python', import.meta.url));
const scratch = mkdtempSync(join(tmpdir(), 'stepwise-trajectory-rows-npz-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

for (const [name, start] of stores) {
  describe(`trajectory rows on ${name}`, () => {
    let server: RunningServer;
    let cleanup: () => Promise<void>;
    const post = (path: string, body: unknown) =>
      fetch(`${server.url}${path}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
    const lease = (body: Record<string, unknown>) =>
      post('/v1/batches/lease', { batch_size: 1, n_rollouts: 2, rows: 'trajectory', ...body });

    beforeEach(async () => {
      ({ server, cleanup } = await start());
      // Step by step, in the order an agent would send them.
      for (const s of [...TA, ...TB])
        expect((await post('/v1/steps', { steps: [s], n_rollouts: 2 })).status).toBe(200);
    });
    afterEach(async () => cleanup());

    it('json: each row is its steps concatenated, with the loss mask and aligned logprobs; a prefix break splits the row', async () => {
      const res = await lease({ advantage: 'grpo' });
      expect(res.status).toBe(200);
      const batch = (await res.json()) as TrajectoryRowsBatchJson;
      expect(batch.rows).toBe('trajectory');
      const trajectories = batch.groups[0]!.trajectories;
      expect(trajectories.map((t) => t.trajectory_uid).sort()).toEqual(['ta', 'tb']);
      for (const t of trajectories) {
        expect(t).not.toHaveProperty('steps');
        const advantage = GRPO[t.trajectory_uid as 'ta' | 'tb'];
        expect(t.advantage).toBeCloseTo(advantage, 9);
        const expected = expectedRows(t.trajectory_uid);
        expect(t.rows).toHaveLength(expected.length);
        t.rows.forEach((row, i) => {
          const e = expected[i]!;
          expect(row).toMatchObject({
            first_step: e.first_step,
            last_step: e.last_step,
            input_ids: e.input_ids,
            loss_mask: e.loss_mask,
            logprobs: e.logprobs,
            prompt_length: e.prompt_length,
            reward: e.reward,
            policy_version: 0,
          });
          expect(row.advantage).toBeCloseTo(advantage, 9);
          expect(
            row.spans.map((s) => [s.step_index, s.prompt_start, s.response_start, s.response_end]),
          ).toEqual(e.spans);
        });
      }
      // The store counted the same break when tb's step 2 was ingested.
      const tb = (await (await fetch(`${server.url}/v1/trajectories/tb`)).json()) as {
        prefix_breaks: number;
      };
      expect(tb.prefix_breaks).toBe(1);
    });

    it('the TypeScript SDK leases trajectory rows as JSON and as Arrow', async () => {
      const client = new StepwiseClient({ baseUrl: server.url });
      const batch = await client.leaseTrajectoryRows({ batchSize: 1, nRollouts: 2 });
      expect(batch!.rows).toBe('trajectory');
      for (const t of batch!.groups[0]!.trajectories) {
        expect(t.rows.map((r) => r.input_ids)).toEqual(
          expectedRows(t.trajectory_uid).map((e) => e.input_ids),
        );
        expect(t.rows.map((r) => r.loss_mask)).toEqual(
          expectedRows(t.trajectory_uid).map((e) => e.loss_mask),
        );
      }
      await client.nack(batch!.lease_id);
      const arrow = await client.leaseBinary({
        batchSize: 1,
        nRollouts: 2,
        format: 'arrow',
        rows: 'trajectory',
      });
      expect(arrow!.rows).toBe(3);
      const table = tableFromIPC(arrow!.body);
      expect(table.toArray().map((r) => Array.from(r.loss_mask as Uint8Array).join(''))).toEqual(
        expect.arrayContaining(['00011001011', '0001011', '000001']),
      );
    });

    it('arrow: one row per stitched sequence, read back by apache-arrow', async () => {
      const res = await lease({ format: 'arrow', advantage: 'drgrpo' });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-stepwise-rows')).toBe('3');
      const table = tableFromIPC(new Uint8Array(await res.arrayBuffer()));
      expect(table.numRows).toBe(3);
      const type = (n: string) => String(table.schema.fields.find((f) => f.name === n)!.type);
      expect([type('input_ids'), type('loss_mask'), type('logprobs')]).toEqual([
        'List<Int32>',
        'List<Uint8>',
        'List<Float32>',
      ]);
      expect(table.schema.fields.map((f) => f.name)).not.toContain('prompt_ids');
      const seen: string[] = [];
      for (const row of table.toArray()) {
        const e = expectedRows(row.trajectory_uid).find((x) => x.first_step === row.first_step)!;
        seen.push(`${row.trajectory_uid}:${row.first_step}-${row.last_step}`);
        expect(row.last_step).toBe(e.last_step);
        expect(Array.from(row.input_ids)).toEqual(e.input_ids);
        expect(Array.from(row.loss_mask)).toEqual(e.loss_mask);
        // 0 where the mask is 0; the logprobs are exact in float32 (powers of two).
        expect(Array.from(row.logprobs)).toEqual(e.logprobs.map((x) => x ?? 0));
        expect(row.prompt_length).toBe(e.prompt_length);
        expect(row.reward).toBe(e.reward);
        expect(row.trajectory_reward).toBe(row.trajectory_uid === 'ta' ? 1 : 0.25);
        // Dr. GRPO: r - mean over {1, 0.25}.
        expect(row.advantage).toBeCloseTo(row.trajectory_uid === 'ta' ? 0.375 : -0.375, 6);
        expect(row.is_last).toBe(e.last_step === 2);
        expect(row.group_id).toBe('g1');
      }
      expect(seen.sort()).toEqual(['ta:0-2', 'tb:0-1', 'tb:2-2']);
    });

    it("padded: verl's multi-turn split (first prompt | the rest, response_mask = loss mask), read by NumPy", async () => {
      const res = await lease({ format: 'padded', advantage: 'grpo' });
      expect(res.status).toBe(200);
      expect(res.headers.get('x-stepwise-rows')).toBe('3');
      const file = join(scratch, `${name}.npz`);
      writeFileSync(file, Buffer.from(await res.arrayBuffer()));
      const script = `
import json, sys
import numpy as np
z = np.load(sys.argv[1])
print(json.dumps({k: z[k].tolist() for k in z.files} | {'_dtypes': {k: str(z[k].dtype) for k in z.files}}))`;
      const a = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
      expect(a._dtypes).toMatchObject({
        response_mask: 'uint8',
        rollout_log_probs: 'float32',
        first_step: 'int32',
      });
      expect(a).not.toHaveProperty('step_index');
      const P = a.prompts[0].length;
      const R = a.responses[0].length;
      // Widths: the longest first prompt (tb's second row: 5) and the longest rest (ta: 11 - 3).
      expect([P, R]).toEqual([5, 8]);
      const seen: string[] = [];
      for (let b = 0; b < 3; b++) {
        const uid = a.trajectory_uids[a.trajectory_index[b]];
        const e = expectedRows(uid).find((x) => x.first_step === a.first_step[b])!;
        seen.push(`${uid}:${a.first_step[b]}-${a.last_step[b]}`);
        const pl = e.prompt_length;
        const rest = e.input_ids.slice(pl);
        const rl = rest.length;
        expect([a.prompt_lengths[b], a.response_lengths[b]]).toEqual([pl, rl]);
        expect(a.input_ids[b].slice(P - pl, P + rl)).toEqual(e.input_ids);
        expect(a.response_mask[b]).toEqual([...e.loss_mask.slice(pl), ...Array(R - rl).fill(0)]);
        expect(a.rollout_log_probs[b]).toEqual([
          ...e.logprobs.slice(pl).map((x) => x ?? 0),
          ...Array(R - rl).fill(0),
        ]);
        expect(a.has_log_probs[b]).toBe(1);
        // Each step's reward on its last response token (span end - 1, shifted past the prompt).
        const scores = Array(R).fill(0);
        for (const s of e.spans) {
          const reward =
            [...TA, ...TB].find((x) => x.trajectory_uid === uid && x.step_index === s[0])!.reward ?? 0;
          scores[s[3] - 1 - pl] = reward;
        }
        expect(a.rm_scores[b]).toEqual(scores);
        // The advantage only where the loss mask is 1.
        const advantage = GRPO[uid as 'ta' | 'tb'];
        for (const [j, x] of (a.advantages[b] as number[]).entries())
          expect(x).toBeCloseTo(j < rl && e.loss_mask[pl + j] ? advantage : 0, 5);
        expect(a.attention_mask[b].reduce((n: number, x: number) => n + x, 0)).toBe(e.input_ids.length);
      }
      expect(seen.sort()).toEqual(['ta:0-2', 'tb:0-1', 'tb:2-2']);
    });

    it('padded truncate cuts a row from the right: a step cut inside its response keeps its reward on its last kept token', async () => {
      const res = await lease({ format: 'padded', response_length: 7, overlong: 'truncate' });
      expect(res.headers.get('x-stepwise-truncated-steps')).toBe('1');
      const file = join(scratch, `${name}-cut.npz`);
      writeFileSync(file, Buffer.from(await res.arrayBuffer()));
      const script = `
import json, sys
import numpy as np
z = np.load(sys.argv[1])
b = [i for i in range(len(z['truncated'])) if z['trajectory_uids'][z['trajectory_index'][i]] == 'ta'][0]
print(json.dumps({k: z[k][b].tolist() for k in ['responses', 'response_mask', 'rm_scores', 'truncated', 'last_step']}))`;
      const a = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
      // ta's rest is 10 11 | 20 21 | 12 | 22 | 13 14: the last token (14) is cut; step 2 keeps its reward on 13.
      expect(a).toEqual({
        responses: [10, 11, 20, 21, 12, 22, 13],
        response_mask: [1, 1, 0, 0, 1, 0, 1],
        rm_scores: [0, 0, 0, 0, 0, 0, 1],
        truncated: 1,
        last_step: 2,
      });
    });

    it('a step without rollout logprobs leaves its row without them in every format', async () => {
      const steps = [
        step('nl', 0, [5, 6], [7], { prompt_uid: 'g-nl', rollout_log_probs: [-0.5] }),
        step('nl', 1, [5, 6, 7, 8], [9], { prompt_uid: 'g-nl', is_last: true, reward: 1 }),
      ];
      expect((await post('/v1/steps', { steps, n_rollouts: 1, channel: 'nl' })).status).toBe(200);
      const body = { channel: 'nl', n_rollouts: 1 };
      const json = (await (await lease(body)).json()) as TrajectoryRowsBatchJson;
      const row = json.groups[0]!.trajectories[0]!.rows[0]!;
      expect([row.input_ids, row.loss_mask, row.logprobs]).toEqual([[5, 6, 7, 8, 9], [0, 0, 1, 0, 1], null]);
      expect(json.groups[0]!.trajectories[0]!.recompute_log_probs).toBe(true);
      await post(`/v1/batches/${json.lease_id}/nack`, {});
      const arrow = await lease({ ...body, format: 'arrow' });
      const table = tableFromIPC(new Uint8Array(await arrow.arrayBuffer()));
      expect(table.toArray()[0].logprobs).toBeNull();
      await post(`/v1/batches/${arrow.headers.get('x-lease-id')}/nack`, {});
      const padded = await lease({ ...body, format: 'padded' });
      const file = join(scratch, `${name}-nl.npz`);
      writeFileSync(file, Buffer.from(await padded.arrayBuffer()));
      const out = execFileSync(
        'python3',
        ['-c', 'import sys, numpy as np; z = np.load(sys.argv[1]); print(z["has_log_probs"].tolist())', file],
        { encoding: 'utf8' },
      );
      expect(out.trim()).toBe('[0]');
    });

    it('the Python client leases trajectory rows (padded and json) and counts them', async () => {
      const script = `
import json, sys
from stepwise_client import StepwiseClient
client = StepwiseClient(sys.argv[1])
padded = client.lease(1, n_rollouts=2, rows="trajectory", format="padded")
a = padded.arrays
out = {"padded_rows": padded.rows, "spans": sorted([int(f), int(l)] for f, l in zip(a["first_step"], a["last_step"]))}
padded.nack()
batch = client.lease(1, n_rollouts=2, rows="trajectory", format="json")
out["json_rows"] = batch.rows
out["mask"] = {t["trajectory_uid"]: [r["loss_mask"] for r in t["rows"]] for t in batch.data["groups"][0]["trajectories"]}
batch.ack()
print(json.dumps(out))`;
      // Asynchronously: the server answers on this process's event loop.
      const { stdout } = await promisify(execFile)('python3', ['-B', '-c', script, server.url], {
        cwd: CLIENT_DIR,
        encoding: 'utf8',
        timeout: 60_000,
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1' },
      });
      expect(JSON.parse(stdout)).toEqual({
        padded_rows: 3,
        spans: [
          [0, 1],
          [0, 2],
          [2, 2],
        ],
        json_rows: 3,
        mask: {
          ta: EXPECTED.ta.map((r) => r.loss_mask),
          tb: EXPECTED.tb.map((r) => r.loss_mask),
        },
      });
    });

    it('refuses a bad rows value, and packing with trajectory rows, naming the field', async () => {
      const cases: [Record<string, unknown>, string][] = [
        [{ rows: 'episode' }, 'rows'],
        [{ rows: 1 }, 'rows'],
        [{ rows: 'trajectory', pack: 'prefix_tree' }, 'pack'],
      ];
      for (const [body, field] of cases) {
        const res = await lease(body);
        expect([res.status, ((await res.json()) as ErrorBody).error.field]).toEqual([400, field]);
      }
      // None of them took the group: step rows are still served, and unchanged by default.
      const res = await post('/v1/batches/lease', { batch_size: 1, n_rollouts: 2 });
      const batch = (await res.json()) as { groups: { trajectories: { steps: unknown[] }[] }[] };
      expect(batch.groups[0]!.trajectories.map((t) => t.steps.length)).toEqual([3, 3]);
    });
  });
}
