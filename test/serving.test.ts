import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { tableFromIPC } from 'apache-arrow';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NewStep } from '../packages/core/src/domain/index.js';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import type { BatchJson } from '../packages/core/src/serving/json-batch.js';
import { makeStep } from './support/steps.js';

type ErrorBody = { error: { field?: string } };

/*
 * The three batch formats over real HTTP and SQLite, each read back by an independent reader:
 * JSON.parse, apache-arrow's IPC reader, and NumPy (python3) for the padded `.npz`.
 */

const GROUPS = ['g-a', 'g-b'];
const ROLLOUTS = 4;
/** Trajectory t of group g: 3 steps whose prompts extend each other; outcome 1 for t = 0 only. */
function trajectorySteps(g: number, t: number): NewStep[] {
  const id = `traj-${g}-${t}`;
  const steps: NewStep[] = [];
  let history = [7, 8, 9, 10 + g]; // the group's shared prompt
  for (let i = 0; i < 3; i++) {
    const prompt = history.concat(i === 0 ? [] : [500 + i]); // a tool result after step 0
    const length = 2 + ((t + i) % 3); // responses of 2-4 tokens
    const response = Array.from({ length }, (_, k) => 1000 * (g + 1) + 100 * t + 10 * i + k);
    steps.push(
      makeStep(id, GROUPS[g]!, i, prompt, response, {
        responseLogprobs: response.map((_, k) => -0.125 * (k + 1)),
        reward: i === 2 ? (t === 0 ? 1 : 0) : null,
        isLast: i === 2,
      }),
    );
    history = prompt.concat(response);
  }
  return steps;
}

const all = GROUPS.flatMap((_, g) => Array.from({ length: ROLLOUTS }, (_, t) => trajectorySteps(g, t)));
const stepOf = (uid: string, index: number) =>
  all.flat().find((s) => s.trajectoryId === uid && s.index === index)!;

/**
 * Loads an `.npz` into `{name: nested lists}` with NumPy when python3 has it, else with a stdlib-only
 * `.npy` parse (zipfile + struct), so the check runs on machines without NumPy too.
 */
const NPZ_LOADER = `
import ast, json, os, struct, sys, zipfile
def load(path):
    try:
        if os.environ.get('STEPWISE_NO_NUMPY'): raise ImportError('NumPy disabled')
        import numpy as np
        z = np.load(path)
        return {k: z[k].tolist() for k in z.files}, {k: str(z[k].dtype) for k in z.files}
    except ImportError:
        pass
    names = {'<i4': ('i', 'int32'), '|u1': ('B', 'uint8'), '<f4': ('f', 'float32')}
    out, dtypes = {}, {}
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            raw = z.read(info)
            hlen = struct.unpack('<H', raw[8:10])[0]
            header = ast.literal_eval(raw[10:10 + hlen].decode('latin1'))
            shape, descr, data = header['shape'], header['descr'], raw[10 + hlen:]
            count = 1
            for d in shape: count *= d
            if descr.startswith('<U'):
                w = int(descr[2:])
                flat = [data[i*4*w:(i+1)*4*w].decode('utf-32-le').rstrip('\\x00') for i in range(count)]
                dtypes[info.filename[:-4]] = 'str'
            else:
                code, name = names[descr]
                flat = list(struct.unpack('<%d%s' % (count, code), data[:count * struct.calcsize(code)]))
                dtypes[info.filename[:-4]] = name
            if len(shape) == 2:
                flat = [flat[r*shape[1]:(r+1)*shape[1]] for r in range(shape[0])]
            out[info.filename[:-4]] = flat
    return out, dtypes
`;

/** GRPO by hand: one success in four. */
function grpo(rewards: number[]): number[] {
  const n = rewards.length;
  const mean = rewards.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(rewards.reduce((s, r) => s + (r - mean) ** 2, 0) / (n - 1));
  return rewards.map((r) => (r - mean) / (std + 1e-6));
}

describe('serving batches to trainers', () => {
  let dir: string;
  let server: RunningServer;
  const lease = (body: Record<string, unknown>) =>
    fetch(`${server.url}/v1/batches/lease`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ n_rollouts: ROLLOUTS, ...body }),
    });

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-serving-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
    await server.pool.submitSteps(all.flat(), { nRollouts: ROLLOUTS });
  });
  afterEach(async () => {
    await server.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('json: steps carry GRPO advantages; packing merges each group into a tree that recovers every step', async () => {
    const res = await lease({ batch_size: 1, advantage: 'grpo', pack: 'prefix_tree' });
    expect(res.status).toBe(200);
    const batch = (await res.json()) as BatchJson;
    expect(res.headers.get('x-lease-id')).toBe(batch.lease_id);
    const group = batch.groups[0]!;
    const rewards = group.trajectories.map((t) => t.reward ?? 0);
    expect([...rewards].sort()).toEqual([0, 0, 0, 1]);
    const expected = grpo(rewards);
    group.trajectories.forEach((t, i) => {
      expect(t.advantage).toBeCloseTo(expected[i]!, 9);
      for (const s of t.steps) expect(s.advantage).toBeCloseTo(expected[i]!, 9);
    });
    // Walk each sequence back from its last token through `parents`: it must spell prompt + response.
    const p = group.packing!;
    const sequences = group.trajectories.flatMap((t) => t.steps);
    expect(p.sequences).toHaveLength(sequences.length);
    sequences.forEach((s, i) => {
      const lastNode = p.nodes[p.sequences[i]!.at(-1)!]!;
      const walked: number[] = [];
      for (let j = lastNode[0]! + lastNode[1]! - 1; j >= 0; j = p.parents[j]!) walked.unshift(p.tokens[j]!);
      expect(walked).toEqual(s.prompt_ids.concat(s.response_ids));
    });
    const original = sequences.reduce((n, s) => n + s.prompt_ids.length + s.response_ids.length, 0);
    expect(p.original_tokens).toBe(original);
    expect(p.tokens.length).toBeLessThan(original / 2); // multi-step prompts share their history
    expect(p.ratio).toBeCloseTo(p.tokens.length / original, 12);
  });

  it("json packing follows the trainer's view: a guided step is packed with its hint-free training prompt", async () => {
    // Two rollouts of one prompt; the guided one was sampled with a hint (ids 90-92) in its prompt.
    const hinted = [7, 8, 90, 91, 92, 9];
    const plain = [7, 8, 9];
    await server.pool.submitSteps(
      [
        makeStep('guided-0', 'g-guided', 0, hinted, [300, 301], {
          trainingPromptIds: plain,
          isLast: true,
          reward: 1,
        }),
        makeStep('plain-0', 'g-guided', 0, plain, [400, 401], { isLast: true, reward: 0 }),
      ],
      { nRollouts: 2, channel: 'guided' },
    );
    const res = await lease({ channel: 'guided', batch_size: 1, n_rollouts: 2, pack: 'prefix_tree' });
    const group = ((await res.json()) as BatchJson).groups[0]!;
    const p = group.packing!;
    const paths = p.sequences.map((nodes) =>
      nodes.flatMap((n) => p.tokens.slice(p.nodes[n]![0], p.nodes[n]![0] + p.nodes[n]![1])),
    );
    expect(paths).toEqual([plain.concat([300, 301]), plain.concat([400, 401])]);
    // The shared hint-free prompt is packed once; the served prompt_ids stay the behaviour prompt.
    expect(p.tokens).toHaveLength(plain.length + 4);
    expect(group.trajectories.map((t) => t.steps[0]!.prompt_ids)).toEqual([hinted, plain]);
  });

  it('a guided step without a hint-free training prompt is never served as a row; every format counts it', async () => {
    // Step 1 of the guided rollout was stored as the gateway stores it when its chat template does not
    // reproduce the engine's ids: no training prompt, metadata training_prompt_unavailable.
    const hinted = [7, 8, 90, 91, 92, 9];
    const plain = [7, 8, 9];
    const submit = async (channel: string) => {
      await server.pool.createTrajectory({
        id: `${channel}-guided`,
        groupId: `${channel}-g`,
        channel,
        nRollouts: 2,
        metadata: { guidance: { k: 1, hint: '1. search: {}' } },
        guided: true,
        guidanceK: 1,
      });
      await server.pool.submitSteps(
        [
          makeStep(`${channel}-guided`, `${channel}-g`, 0, hinted, [300, 301], { trainingPromptIds: plain }),
          makeStep(`${channel}-guided`, `${channel}-g`, 1, [...hinted, 300, 301, 5], [302], {
            metadata: {
              training_prompt_unavailable: 'the chat template does not reproduce the prompt the engine saw',
            },
            isLast: true,
            reward: 1,
          }),
          makeStep(`${channel}-plain`, `${channel}-g`, 0, plain, [400, 401], { isLast: true, reward: 0 }),
        ],
        { nRollouts: 2, channel },
      );
    };
    for (const channel of ['j', 'p', 'a']) await submit(channel);

    const json = await lease({ channel: 'j', batch_size: 1, n_rollouts: 2, pack: 'prefix_tree' });
    expect(json.headers.get('x-stepwise-untrainable-steps')).toBe('1');
    const body = (await json.json()) as BatchJson;
    expect(body.untrainable_steps).toBe(1);
    const [guided, unguided] = body.groups[0]!.trajectories;
    expect(guided!.steps.map((s) => s.step_index)).toEqual([0]);
    expect(guided!.reward).toBe(1);
    expect(unguided!.steps).toHaveLength(1);
    // No packed sequence holds the hinted prompt.
    expect(body.groups[0]!.packing!.sequences).toHaveLength(2);
    expect(body.groups[0]!.packing!.tokens).not.toContain(90);

    const padded = await lease({ channel: 'p', batch_size: 1, n_rollouts: 2, format: 'padded' });
    expect(padded.status).toBe(200);
    expect(padded.headers.get('x-stepwise-rows')).toBe('2');
    expect(padded.headers.get('x-stepwise-untrainable-steps')).toBe('1');

    const arrow = await lease({ channel: 'a', batch_size: 1, n_rollouts: 2, format: 'arrow' });
    expect(arrow.headers.get('x-stepwise-untrainable-steps')).toBe('1');
    const table = tableFromIPC(new Uint8Array(await arrow.arrayBuffer()));
    expect(table.numRows).toBe(2);
    for (const row of table.toArray())
      if (row.guided) expect(Array.from(row.training_prompt_ids)).toEqual(plain);
  });

  it('arrow: one row per step with List<Int32> tokens, read back by apache-arrow', async () => {
    const res = await lease({ batch_size: 2, format: 'arrow', advantage: 'rloo' });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('application/vnd.apache.arrow.stream');
    const leaseId = res.headers.get('x-lease-id');
    expect(leaseId).toMatch(/\S/);
    expect(Number(res.headers.get('x-lease-expires-at'))).toBeGreaterThan(Date.now());
    const table = tableFromIPC(new Uint8Array(await res.arrayBuffer()));
    expect(table.numRows).toBe(all.flat().length);
    expect(String(table.schema.fields.find((f) => f.name === 'prompt_ids')!.type)).toBe('List<Int32>');
    for (const row of table.toArray()) {
      const stored = stepOf(row.trajectory_uid, row.step_index);
      expect(Array.from(row.prompt_ids)).toEqual(stored.promptIds);
      expect(Array.from(row.response_ids)).toEqual(stored.responseIds);
      expect(Array.from(row.response_logprobs)).toEqual(stored.responseLogprobs);
      expect(row.group_id).toBe(stored.groupId);
      // RLOO over one success in four: +1 for it, -1/3 for the others.
      expect(row.advantage).toBeCloseTo(row.trajectory_reward === 1 ? 1 : -1 / 3, 6);
    }
    expect((await fetch(`${server.url}/v1/batches/${leaseId}/ack`, { method: 'POST' })).status).toBe(200);
  });

  it('padded: NumPy reads the .npz and the verl layout invariants hold', async () => {
    const res = await lease({ batch_size: 2, format: 'padded', advantage: 'grpo' });
    expect(res.status).toBe(200);
    expect(res.headers.get('x-stepwise-rows')).toBe(String(all.flat().length));
    const body = Buffer.from(await res.arrayBuffer());
    const file = join(dir, 'batch.npz');
    writeFileSync(file, body);
    const script = `${NPZ_LOADER}
out, dtypes = load(sys.argv[1])
out['_dtypes'] = dtypes
print(json.dumps(out))`;
    const a = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
    expect(a._dtypes).toMatchObject({
      input_ids: 'int32',
      attention_mask: 'uint8',
      position_ids: 'int32',
      rm_scores: 'float32',
      rollout_log_probs: 'float32',
      advantages: 'float32',
    });
    const B = a.input_ids.length;
    const P = a.prompts[0].length;
    const R = a.responses[0].length;
    expect(B).toBe(all.flat().length);
    expect(P).toBe(Math.max(...all.flat().map((s) => s.promptIds.length)));
    expect(R).toBe(Math.max(...all.flat().map((s) => s.responseIds.length)));
    for (let b = 0; b < B; b++) {
      const uid = a.trajectory_uids[a.trajectory_index[b]];
      const step = stepOf(uid, a.step_index[b]);
      const pl = step.promptIds.length;
      const rl = step.responseIds.length;
      expect(a.group_ids[a.group_index[b]]).toBe(step.groupId);
      expect([a.prompt_lengths[b], a.response_lengths[b]]).toEqual([pl, rl]);
      // Left-padded prompt, right-padded response; masks cover exactly the real tokens.
      expect(a.input_ids[b].slice(P - pl, P)).toEqual(step.promptIds);
      expect(a.input_ids[b].slice(P, P + rl)).toEqual(step.responseIds);
      expect(a.attention_mask[b]).toEqual(
        a.input_ids[b].map((_: number, j: number) => (j >= P - pl && j < P + rl ? 1 : 0)),
      );
      expect(a.response_mask[b]).toEqual(a.responses[b].map((_: number, j: number) => (j < rl ? 1 : 0)));
      expect(a.prompts[b]).toEqual(a.input_ids[b].slice(0, P));
      // Positions count real tokens only.
      expect(a.position_ids[b].slice(P - pl, P + rl)).toEqual(Array.from({ length: pl + rl }, (_, j) => j));
      // The step's reward sits on its last real response token, nowhere else.
      const scores = a.rm_scores[b];
      expect(scores.filter((x: number, j: number) => x !== 0 && j !== rl - 1)).toEqual([]);
      expect(scores[rl - 1]).toBe(step.reward ?? 0);
      expect(a.rollout_log_probs[b].slice(0, rl)).toEqual(step.responseLogprobs);
      const adv = a.advantages[b];
      expect(new Set(adv.slice(0, rl)).size).toBe(1);
      expect(adv.slice(rl).every((x: number) => x === 0)).toBe(true);
    }
    // GRPO over one success in four, read back at float32 precision.
    const successAdv = grpo([1, 0, 0, 0]);
    for (let b = 0; b < B; b++) {
      const expected = a.trajectory_rewards[b] === 1 ? successAdv[0]! : successAdv[1]!;
      expect(a.advantages[b][0]).toBeCloseTo(expected, 5);
    }
  });

  it('padded: array data is 64-byte aligned in the body, so a reader can view it in place', async () => {
    const res = await lease({ batch_size: 1, format: 'padded' });
    const body = Buffer.from(await res.arrayBuffer());
    const script = `
import json, sys, zipfile
body = open(sys.argv[1], 'rb').read()
out = {}
with zipfile.ZipFile(sys.argv[1]) as z:
    for info in z.infolist():
        assert info.compress_type == zipfile.ZIP_STORED, info.filename
        at = info.header_offset
        name_len, extra_len = int.from_bytes(body[at+26:at+28], 'little'), int.from_bytes(body[at+28:at+30], 'little')
        start = at + 30 + name_len + extra_len
        header_len = int.from_bytes(body[start+8:start+10], 'little')
        data = start + 10 + header_len
        member = z.read(info)
        out[info.filename] = [data % 64, body[data:start + len(member)] == member[10 + header_len:]]
print(json.dumps(out))`;
    const file = join(dir, 'b.npz');
    writeFileSync(file, body);
    const members = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
    expect(Object.keys(members)).toContain('input_ids.npy');
    for (const [name, [misalign, same]] of Object.entries(members as Record<string, [number, boolean]>)) {
      expect([name, misalign, same]).toEqual([name, 0, true]);
    }
  });

  it('overlong steps: reject releases the lease, truncate flags rows, drop counts them', async () => {
    const tooShort = await lease({ batch_size: 1, format: 'padded', prompt_length: 6 });
    expect(tooShort.status).toBe(422);
    expect(((await tooShort.json()) as ErrorBody).error.field).toBe('prompt_length');
    // Nothing was served: the same groups are available at once.
    const cut = await lease({
      batch_size: 2,
      format: 'padded',
      prompt_length: 6,
      response_length: 3,
      overlong: 'truncate',
    });
    expect(cut.status).toBe(200);
    const truncated = Number(cut.headers.get('x-stepwise-truncated-steps'));
    const longer = all.flat().filter((s) => s.promptIds.length > 6 || s.responseIds.length > 3).length;
    expect(truncated).toBe(longer);
    expect(truncated).toBeGreaterThan(0);
    await fetch(`${server.url}/v1/batches/${cut.headers.get('x-lease-id')}/nack`, { method: 'POST' });
    const dropped = await lease({ batch_size: 2, format: 'padded', prompt_length: 6, overlong: 'drop' });
    const drops = all.flat().filter((s) => s.promptIds.length > 6).length;
    expect(Number(dropped.headers.get('x-stepwise-dropped-steps'))).toBe(drops);
    expect(Number(dropped.headers.get('x-stepwise-rows'))).toBe(all.flat().length - drops);
  });

  it('truncation keeps the end of the prompt and the start of the response', async () => {
    const res = await lease({
      batch_size: 2,
      format: 'padded',
      prompt_length: 6,
      response_length: 3,
      overlong: 'truncate',
    });
    const file = join(dir, 't.npz');
    writeFileSync(file, Buffer.from(await res.arrayBuffer()));
    const script = `${NPZ_LOADER}
z, _ = load(sys.argv[1])
print(json.dumps({k: z[k] for k in ['input_ids', 'truncated', 'trajectory_index', 'step_index', 'prompt_lengths', 'response_lengths']} | {'uids': z['trajectory_uids']}))`;
    const a = JSON.parse(execFileSync('python3', ['-c', script, file], { encoding: 'utf8' }));
    for (let b = 0; b < a.input_ids.length; b++) {
      const step = stepOf(a.uids[a.trajectory_index[b]], a.step_index[b]);
      const wasCut = step.promptIds.length > 6 || step.responseIds.length > 3;
      expect(a.truncated[b]).toBe(wasCut ? 1 : 0);
      const prompt = step.promptIds.slice(-6);
      const response = step.responseIds.slice(0, 3);
      expect([a.prompt_lengths[b], a.response_lengths[b]]).toEqual([prompt.length, response.length]);
      expect(a.input_ids[b].slice(6 - prompt.length, 6 + response.length)).toEqual(prompt.concat(response));
    }
  });

  it('the TypeScript SDK leases binary formats and reports the lease from the headers', async () => {
    const sdk = new StepwiseClient({ baseUrl: server.url });
    try {
      const batch = await sdk.leaseBinary({
        batchSize: 1,
        nRollouts: ROLLOUTS,
        format: 'arrow',
        advantage: 'grpo',
      });
      expect(batch).not.toBeNull();
      const table = tableFromIPC(batch!.body);
      expect(table.numRows).toBe(batch!.rows);
      expect(table.numRows).toBe(ROLLOUTS * 3);
      expect(batch!.expiresAt).toBeGreaterThan(Date.now());
      expect((await sdk.ack(batch!.leaseId)).state).toBe('acked');
      await expect(
        sdk.leaseBinary({ batchSize: 1, nRollouts: ROLLOUTS, format: 'padded', promptLength: 2 }),
      ).rejects.toMatchObject({ status: 422, field: 'prompt_length' });
      const json = await sdk.lease({ batchSize: 1, nRollouts: ROLLOUTS, advantage: 'drgrpo' });
      const advantages = json!.groups[0]!.trajectories.map((t) => t.advantage);
      expect(advantages.reduce((a, b) => a! + b!, 0)).toBeCloseTo(0, 12);
      expect(await sdk.leaseBinary({ batchSize: 1, nRollouts: ROLLOUTS, format: 'padded' })).toBeNull();
    } finally {
      await sdk.close();
    }
  });

  it('refuses options the chosen format does not read, naming the field', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ format: 'arrow', pack: 'prefix_tree' }, 'pack'],
      [{ format: 'json', share_responses: true }, 'share_responses'],
      [{ format: 'json', prompt_length: 128 }, 'prompt_length'],
      [{ format: 'parquet' }, 'format'],
      [{ advantage: 'ppo' }, 'advantage'],
      [{ format: 'padded', overlong: 'squash' }, 'overlong'],
    ];
    for (const [body, field] of cases) {
      const res = await lease({ batch_size: 1, ...body });
      expect([res.status, ((await res.json()) as ErrorBody).error.field]).toEqual([400, field]);
    }
    // None of them took a lease.
    const stats = await (await fetch(`${server.url}/v1/stats`)).json();
    expect(JSON.stringify(stats)).not.toMatch(/"active":\s*[1-9]/);
    expect((await lease({ batch_size: 2 })).status).toBe(200);
  });
});
