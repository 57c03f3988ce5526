import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tableFromIPC } from 'apache-arrow';
import { afterAll, afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { StepWireInput } from '../packages/core/src/domain/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import type { BatchJson, TrajectoryRowsBatchJson } from '../packages/core/src/serving/json-batch.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Partial rollouts in every lease format, over real HTTP on SQLite and (with STEPWISE_TEST_PG_URL)
 * PostgreSQL: a step whose response spans two weight switches (versions 2, 3, 4) is posted to
 * /v1/steps with its version_spans, leased from a channel that trains on it and from one with
 * `partial_rollouts: "mask"`, and each format's per-token versions and masks are checked against
 * values written out by hand below.
 */

type Row = Record<string, unknown>;
/** A served trajectory id without its channel suffix: `tp`, `tq` or `tr`. */
const base = (uid: string) => uid.split('-')[0] as 'tp' | 'tq' | 'tr';

const step = (
  trajectory_uid: string,
  step_index: number,
  prompt_ids: number[],
  response_ids: number[],
  extra: Partial<StepWireInput>,
): StepWireInput => ({ trajectory_uid, prompt_uid: 'g1', step_index, prompt_ids, response_ids, ...extra });

// "tp": step 0 generated 2 tokens at version 2, 2 at 3, 1 at 4; step 1 (after tool output 20 21) at 4.
// "tq": one step at version 3, no switch. "tr": 1 token at 3, then 2 at 4; its response starts as
// tp's does, so `share_responses` packs tokens 10 and 11 once with two owners.
const STEPS = [
  step('tp', 0, [1, 2, 3], [10, 11, 12, 13, 14], {
    policy_version: 2,
    version_spans: [
      [2, 2],
      [3, 2],
      [4, 1],
    ],
    rollout_log_probs: [-0.5, -0.25, -0.125, -1, -2],
  }),
  step('tp', 1, [1, 2, 3, 10, 11, 12, 13, 14, 20, 21], [15, 16], {
    policy_version: 4,
    rollout_log_probs: [-0.5, -0.5],
    reward: 1,
    is_last: true,
  }),
  step('tq', 0, [1, 2, 3], [30, 31, 32], {
    policy_version: 3,
    rollout_log_probs: [-0.25, -0.25, -0.25],
    reward: 0,
    is_last: true,
  }),
  step('tr', 0, [1, 2, 3], [10, 11, 40], {
    policy_version: 3,
    version_spans: [
      [3, 1],
      [4, 2],
    ],
    rollout_log_probs: [-1, -1, -1],
    reward: 0,
    is_last: true,
  }),
];

/** Per step (`uid/index`): each response token's version, and its loss mask in either mode. */
const STEP_TOKENS: Record<string, { versions: number[]; train: number[]; mask: number[] }> = {
  'tp/0': { versions: [2, 2, 3, 3, 4], train: [1, 1, 1, 1, 1], mask: [0, 0, 0, 0, 1] },
  'tp/1': { versions: [4, 4], train: [1, 1], mask: [1, 1] },
  'tq/0': { versions: [3, 3, 3], train: [1, 1, 1], mask: [1, 1, 1] },
  'tr/0': { versions: [3, 4, 4], train: [1, 1, 1], mask: [0, 1, 1] },
};
const N = null;
/** The stitched rows (`rows: "trajectory"`): prompt tokens carry their step's policy_version. */
const ROWS = {
  tp: {
    input_ids: [1, 2, 3, 10, 11, 12, 13, 14, 20, 21, 15, 16],
    versions: [2, 2, 2, 2, 2, 3, 3, 4, 4, 4, 4, 4],
    train: [0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1],
    mask: [0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 1],
    trainLogprobs: [N, N, N, -0.5, -0.25, -0.125, -1, -2, N, N, -0.5, -0.5],
    maskLogprobs: [N, N, N, N, N, N, N, -2, N, N, -0.5, -0.5],
  },
  tq: {
    input_ids: [1, 2, 3, 30, 31, 32],
    versions: [3, 3, 3, 3, 3, 3],
    train: [0, 0, 0, 1, 1, 1],
    mask: [0, 0, 0, 1, 1, 1],
    trainLogprobs: [N, N, N, -0.25, -0.25, -0.25],
    maskLogprobs: [N, N, N, -0.25, -0.25, -0.25],
  },
  tr: {
    input_ids: [1, 2, 3, 10, 11, 40],
    versions: [3, 3, 3, 3, 4, 4],
    train: [0, 0, 0, 1, 1, 1],
    mask: [0, 0, 0, 0, 1, 1],
    trainLogprobs: [N, N, N, -1, -1, -1],
    maskLogprobs: [N, N, N, N, -1, -1],
  },
} as const;
// GRPO over the trajectory rewards {1, 0, 0}, by hand: mean 1/3, unbiased std √(1/3).
const ADVANTAGE = {
  tp: 2 / 3 / (Math.sqrt(1 / 3) + 1e-6),
  tq: -1 / 3 / (Math.sqrt(1 / 3) + 1e-6),
  tr: -1 / 3 / (Math.sqrt(1 / 3) + 1e-6),
};
const MODES = ['train', 'mask'] as const;
type Mode = (typeof MODES)[number];

interface Store {
  server: RunningServer;
  /** Closes the server and opens another on the same database. */
  reopen(): Promise<RunningServer>;
  cleanup(): Promise<void>;
}
const stores: [string, () => Promise<Store>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-partial-serving-'));
      const open = () => startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
      return withReopen(await open(), open, async () => rmSync(dir, { recursive: true, force: true }));
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_partial_serving');
      const options: ServerOptions = { dbPath: '', pg: { url: pgUrl!, schema }, port: 0 };
      const open = () => startServer(options);
      return withReopen(await open(), open, () => dropSchema(schema));
    },
  ]);
}

function withReopen(
  first: RunningServer,
  open: () => Promise<RunningServer>,
  drop: () => Promise<void>,
): Store {
  const store: Store = {
    server: first,
    async reopen() {
      await store.server.close();
      store.server = await open();
      return store.server;
    },
    async cleanup() {
      await store.server.close();
      await drop();
    },
  };
  return store;
}

const scratch = mkdtempSync(join(tmpdir(), 'stepwise-partial-serving-npz-'));
afterAll(() => rmSync(scratch, { recursive: true, force: true }));

/** The `.npz` members as nested lists, with their dtypes, read by NumPy. */
function readNpz(
  bytes: ArrayBuffer,
  name: string,
): Record<string, number[][] | number[] | string[]> & {
  _dtypes: Record<string, string>;
} {
  const file = join(scratch, `${name}.npz`);
  writeFileSync(file, Buffer.from(bytes));
  const script = `
import json, sys
import numpy as np
z = np.load(sys.argv[1])
print(json.dumps({k: z[k].tolist() for k in z.files} | {'_dtypes': {k: str(z[k].dtype) for k in z.files}}))`;
  return JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
}

for (const [name, start] of stores) {
  describe(`partial rollouts served on ${name}`, () => {
    let store: Store;
    const url = () => store.server.url;
    const send = (method: string, path: string, body?: unknown) =>
      fetch(`${url()}${path}`, {
        method,
        headers: { 'content-type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    const lease = async (mode: Mode, body: Record<string, unknown>) => {
      const res = await send('POST', '/v1/batches/lease', {
        channel: mode,
        batch_size: 1,
        n_rollouts: 3,
        ...body,
      });
      expect(res.status).toBe(200);
      return res;
    };

    beforeEach(async () => {
      store = await start();
      // Channel "mask" masks partial steps; channel "train" keeps the default.
      expect((await send('PUT', '/v1/channels/mask', { partial_rollouts: 'mask' })).status).toBe(200);
      // Trajectory ids are unique across channels: each channel's are suffixed with its name.
      for (const channel of MODES) {
        const steps = STEPS.map((s) => ({ ...s, trajectory_uid: `${s.trajectory_uid}-${channel}` }));
        expect((await send('POST', '/v1/steps', { steps, n_rollouts: 3, channel })).status).toBe(200);
      }
      expect((await send('PUT', '/v1/policy-version', { version: 5 })).status).toBe(200);
    });
    afterEach(async () => store.cleanup());

    it('the channel setting: "train" by default, "mask" stored (a restart reads it back), anything else a 400', async () => {
      const config = async (channel: string) =>
        ((await (await send('GET', `/v1/channels/${channel}`)).json()) as { config: Row }).config;
      expect((await config('train')).partial_rollouts).toBe('train');
      const bad = await send('PUT', '/v1/channels/mask', { partial_rollouts: 'drop' });
      expect(bad.status).toBe(400);
      expect(((await bad.json()) as { error: { field?: string } }).error.field).toBe('partial_rollouts');
      await store.reopen();
      expect((await config('mask')).partial_rollouts).toBe('mask');
      expect((await config('train')).partial_rollouts).toBe('train');
    });

    for (const mode of MODES) {
      it(`json (${mode}): the batch says the mode, steps keep their spans; staleness counts from the oldest token`, async () => {
        const batch = (await (await lease(mode, {})).json()) as BatchJson;
        expect(batch.partial_rollouts).toBe(mode);
        expect(batch.policy_version).toBe(5);
        // 5 - 2: tp's first token is version 2 (its last token's 4 would give 5 - 3 through tq and tr).
        expect(batch.groups[0]!.staleness).toBe(3);
        const steps = batch.groups[0]!.trajectories.flatMap((t) => t.steps);
        const spans = Object.fromEntries(
          steps.map((s) => [
            `${base(s.trajectory_uid)}/${s.step_index}`,
            [s.policy_version, s.version_spans],
          ]),
        );
        expect(spans).toEqual({
          'tp/0': [
            2,
            [
              [2, 2],
              [3, 2],
              [4, 1],
            ],
          ],
          'tp/1': [4, null],
          'tq/0': [3, null],
          'tr/0': [
            3,
            [
              [3, 1],
              [4, 2],
            ],
          ],
        });
      });

      it(`arrow step rows (${mode}): response_versions (List<Int32>) and response_mask (List<Uint8>)`, async () => {
        const res = await lease(mode, { format: 'arrow' });
        const table = tableFromIPC(new Uint8Array(await res.arrayBuffer()));
        const type = (n: string) => String(table.schema.fields.find((f) => f.name === n)?.type);
        expect([type('response_versions'), type('response_mask')]).toEqual(['List<Int32>', 'List<Uint8>']);
        const seen: Record<string, unknown> = {};
        for (const row of table.toArray())
          seen[`${base(row.trajectory_uid)}/${row.step_index}`] = {
            versions: Array.from(row.response_versions as Int32Array),
            mask: Array.from(row.response_mask as Uint8Array),
            // The captured logprobs stay as they are: the mask says what is trained.
            logprobs: Array.from(row.response_logprobs as Float32Array),
          };
        expect(seen).toEqual(
          Object.fromEntries(
            Object.entries(STEP_TOKENS).map(([key, e]) => [
              key,
              {
                versions: e.versions,
                mask: e[mode],
                logprobs: STEPS.find((s) => `${s.trajectory_uid}/${s.step_index}` === key)!.rollout_log_probs,
              },
            ]),
          ),
        );
      });

      it(`padded step rows (${mode}): response_versions int32 [B, R] (0 on padding), the mask in response_mask and advantages`, async () => {
        const res = await lease(mode, { format: 'padded', advantage: 'grpo' });
        const a = readNpz(await res.arrayBuffer(), `${name}-${mode}-steps`);
        expect(a._dtypes.response_versions).toBe('int32');
        const R = (a.responses as number[][])[0]!.length;
        expect(R).toBe(5);
        const rows = a.step_index as number[];
        expect(rows).toHaveLength(4);
        for (let b = 0; b < rows.length; b++) {
          const uid = base((a.trajectory_uids as string[])[(a.trajectory_index as number[])[b]!]!);
          const e = STEP_TOKENS[`${uid}/${rows[b]}`]!;
          const pad = Array(R - e.versions.length).fill(0);
          expect((a.response_versions as number[][])[b]).toEqual([...e.versions, ...pad]);
          expect((a.response_mask as number[][])[b]).toEqual([...e[mode], ...pad]);
          // Attention still covers every real token: masked tokens are context, not padding.
          expect((a.attention_mask as number[][])[b]!.slice(-R)).toEqual([
            ...e.versions.map(() => 1),
            ...pad,
          ]);
          const advantage = ADVANTAGE[uid];
          for (const [j, x] of (a.advantages as number[][])[b]!.entries())
            expect(x).toBeCloseTo(j < e.versions.length && e[mode][j] ? advantage : 0, 5);
        }
      });

      it(`trajectory rows (${mode}): versions over the stitched sequence in json, arrow and padded`, async () => {
        const json = (await (await lease(mode, { rows: 'trajectory' })).json()) as TrajectoryRowsBatchJson;
        expect(json.partial_rollouts).toBe(mode);
        for (const t of json.groups[0]!.trajectories) {
          const e = ROWS[base(t.trajectory_uid)];
          expect(t.rows).toHaveLength(1);
          expect(t.rows[0]).toMatchObject({
            input_ids: e.input_ids,
            versions: e.versions,
            loss_mask: e[mode],
            logprobs: mode === 'mask' ? e.maskLogprobs : e.trainLogprobs,
          });
        }
        await send('POST', `/v1/batches/${json.lease_id}/nack`);
        const arrow = await lease(mode, { rows: 'trajectory', format: 'arrow' });
        const table = tableFromIPC(new Uint8Array(await arrow.arrayBuffer()));
        expect(String(table.schema.fields.find((f) => f.name === 'versions')?.type)).toBe('List<Int32>');
        for (const row of table.toArray()) {
          const e = ROWS[base(row.trajectory_uid)];
          expect(Array.from(row.versions as Int32Array)).toEqual(e.versions);
          expect(Array.from(row.loss_mask as Uint8Array)).toEqual(e[mode]);
        }
        await send('POST', `/v1/batches/${arrow.headers.get('x-lease-id')}/nack`);
        const padded = await lease(mode, { rows: 'trajectory', format: 'padded' });
        const a = readNpz(await padded.arrayBuffer(), `${name}-${mode}-rows`);
        const R = (a.responses as number[][])[0]!.length;
        expect(R).toBe(9); // tp's tokens after its first prompt
        for (let b = 0; b < 3; b++) {
          const e = ROWS[base((a.trajectory_uids as string[])[(a.trajectory_index as number[])[b]!]!)];
          const pad = Array(R - (e.input_ids.length - 3)).fill(0);
          expect((a.response_versions as number[][])[b]).toEqual([...e.versions.slice(3), ...pad]);
          expect((a.response_mask as number[][])[b]).toEqual([...e[mode].slice(3), ...pad]);
        }
      });

      for (const share of [false, true])
        it(`packed json (${mode}${share ? ', share_responses' : ''}): versions and loss mask in packed order`, async () => {
          const res = await lease(mode, { pack: 'prefix_tree', ...(share ? { share_responses: true } : {}) });
          const batch = (await res.json()) as BatchJson;
          const group = batch.groups[0]!;
          const packing = group.packing!;
          // Where each step's response tokens sit in the packed array: its path, past its prompt.
          const expected = new Map<number, { versions: number[]; mask: number[] }>();
          const at = new Map<number, Map<number, number>>();
          group.trajectories
            .flatMap((t) => t.steps)
            .forEach((s, i) => {
              const e = STEP_TOKENS[`${base(s.trajectory_uid)}/${s.step_index}`]!;
              const positions = packing.sequences[i]!.flatMap((n) => {
                const [startAt, length] = packing.nodes[n]!;
                return Array.from({ length }, (_, k) => startAt + k);
              });
              const response = positions.slice(s.prompt_ids.length);
              expect(response.map((p) => packing.tokens[p])).toEqual(s.response_ids);
              for (const [k, p] of response.entries()) {
                if (!expected.has(p)) expected.set(p, { versions: [], mask: [] });
                expected.get(p)!.versions.push(e.versions[k]!);
                expected.get(p)!.mask.push(e[mode][k]!);
                at.set(i, (at.get(i) ?? new Map()).set(p, k));
              }
            });
          if (!share) {
            expect(packing.versions).toEqual(
              packing.tokens.map((_, p) => expected.get(p)?.versions[0] ?? -1),
            );
            expect(packing.loss_mask).toEqual(packing.tokens.map((_, p) => expected.get(p)?.mask[0] ?? 0));
            // Trained tokens by hand: 5 + 2 + 3 + 3, or 1 + 2 + 3 + 2 with tp's first four and tr's first masked.
            expect(packing.loss_mask!.reduce((n, x) => n + x, 0)).toBe(mode === 'mask' ? 8 : 13);
            return;
          }
          const offsets = packing.owner_offsets!;
          // Tokens 10 and 11 of tp's and tr's responses are packed once, with both as owners.
          const shared = packing.tokens.flatMap((t, p) => (offsets[p + 1]! - offsets[p]! === 2 ? [t] : []));
          expect(shared).toEqual([10, 11]);
          for (let p = 0; p < packing.tokens.length; p++) {
            const owners = packing.owner_ids!.slice(offsets[p]!, offsets[p + 1]!);
            const e = expected.get(p) ?? { versions: [], mask: [] };
            expect(packing.owner_versions!.slice(offsets[p]!, offsets[p + 1]!)).toEqual(e.versions);
            expect(packing.owner_loss_mask!.slice(offsets[p]!, offsets[p + 1]!)).toEqual(e.mask);
            expect(owners.every((i) => at.get(i)?.has(p))).toBe(true);
            expect(packing.loss_weight![p]).toBe(e.mask.reduce((n, x) => n + x, 0));
          }
        });
    }
  });
}
