import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { NewStep } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { makeStep } from './support/steps.js';

/*
 * `stepwise_client.verl_adapter.to_data_proto` on padded batches leased from a real server: the keys,
 * dtypes and shapes verl's PPO trainer reads (docs/trainers.md, "verl"), checked against the steps
 * stored here. Where the Python has `verl`, the DataProto is real and the report also holds what
 * verl's own functions made of it; elsewhere the adapter's plain stand-in carries the same parts.
 */

const python = findTrainPython();
if (!python)
  console.warn('verl adapter test skipped: no Python with torch + transformers (see docs/trainers.md)');

const GROUPS = 2;
const N = 3;
const RESPONSE_LENGTH = 6;
const TEMPERATURE = 0.7;
const REWARDS = [
  [1, 0, 0],
  [1, 1, 0],
];
/** A guided rollout (ActGuide): sampled with a hint in its prompts, trained on them without it. */
const GUIDED = 'verl-0-1';
const HINT = [900, 901, 902, 903];

type Described = { dtype: string; shape: number[]; values: unknown };
type Report = {
  has_verl: boolean;
  batches: Record<
    string,
    {
      class: string;
      len: number;
      tensors: Record<string, Described>;
      non_tensors: Record<string, Described>;
      meta_info: Record<string, unknown>;
      leased: Record<string, unknown>;
      lease_id: string;
      verl: Record<string, boolean | number> | null;
    }
  >;
};

let dir: string;
let server: RunningServer;
/** `${trajectory uid}/${step index}` -> the stored step. */
const stored = new Map<string, NewStep>();

function store(steps: NewStep[]): NewStep[] {
  for (const s of steps) stored.set(`${s.trajectoryId}/${s.index}`, s);
  return steps;
}

/** Two steps: a tool call, then (after the tool result) the answer; only the answer is rewarded. */
function trajectory(g: number, t: number): NewStep[] {
  const uid = `verl-${g}-${t}`;
  const base = 100 * (g + 1) + 10 * t;
  const system = Array.from({ length: 5 + g }, (_, k) => 10 + g * 10 + k);
  const call = Array.from({ length: 2 + t }, (_, k) => 1000 + base + k);
  const tool = [700 + t, 701 + t, 702 + t];
  const answer = Array.from({ length: 1 + ((g + t) % 3) }, (_, k) => 2000 + base + k);
  const guided = uid === GUIDED;
  const second = [...system, ...call, ...tool];
  // Dyadic log-probs, exact in float32, different per token and step so a shifted copy shows.
  const logprobs = (ids: number[], step: number) => ids.map((_, k) => -(k + 1) / 8 - step / 2);
  return store([
    makeStep(uid, `verl-group-${g}`, 0, guided ? [...system, ...HINT] : system, call, {
      responseLogprobs: logprobs(call, 0),
      trainingPromptIds: guided ? system : null,
      policyVersion: 0,
    }),
    makeStep(uid, `verl-group-${g}`, 1, guided ? [...system, ...HINT, ...call, ...tool] : second, answer, {
      responseLogprobs: logprobs(answer, 1),
      trainingPromptIds: guided ? second : null,
      reward: REWARDS[g]![t]!,
      isLast: true,
      policyVersion: 0,
    }),
  ]);
}

/** verl's (and Stepwise's) GRPO: (r - mean) / (unbiased std + 1e-6). */
function grpo(rewards: number[]): number[] {
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / (rewards.length - 1));
  return rewards.map((r) => (r - mean) / (std + 1e-6));
}

beforeAll(async () => {
  if (!python) return;
  dir = mkdtempSync(join(tmpdir(), 'stepwise-verl-'));
  server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
  for (let g = 0; g < GROUPS; g++)
    for (let t = 0; t < N; t++) await server.pool.submitSteps(trajectory(g, t), { nRollouts: N });
  // A group where one rollout came without the engine's log-probs (e.g. retokenized).
  await server.pool.submitSteps(
    store([
      makeStep('partial-0', 'partial-group', 0, [1, 2, 3], [40, 41], {
        responseLogprobs: [-0.5, -0.25],
        reward: 1,
        isLast: true,
      }),
      makeStep('partial-1', 'partial-group', 0, [1, 2, 3], [50, 51, 52], { reward: 0, isLast: true }),
    ]),
    { nRollouts: 2, channel: 'partial' },
  );
});

afterAll(async () => {
  if (!python) return;
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!python)("verl adapter: a leased padded batch as verl's DataProto", () => {
  let report: Report;

  beforeAll(async () => {
    const out = await runPython(
      python!,
      [
        'tests/check_verl.py',
        '--pool',
        server.url,
        '--lease',
        `train:${GROUPS}:${N}:grpo`,
        '--lease',
        'partial:1:2',
        '--temperature',
        String(TEMPERATURE),
        '--response-length',
        String(RESPONSE_LENGTH),
      ],
      { timeoutMs: 300_000 },
    );
    report = JSON.parse(out.trim().split('\n').at(-1)!) as Report;
  }, 320_000);

  it("has verl's keys, dtypes and shapes", () => {
    const b = report.batches.train!;
    expect(b.class).toBe(report.has_verl ? 'DataProto' : 'VerlBatch');
    const rows = GROUPS * N * 2;
    expect(b.len).toBe(rows);
    // P covers the hinted behaviour prompts, the longest prompts of the batch.
    const P = Math.max(
      ...[...stored.values()].filter((s) => s.groupId.startsWith('verl-')).map((s) => s.promptIds.length),
    );
    const R = RESPONSE_LENGTH;
    const want: Record<string, [string, number[]]> = {
      prompts: ['int64', [rows, P]],
      responses: ['int64', [rows, R]],
      input_ids: ['int64', [rows, P + R]],
      attention_mask: ['int64', [rows, P + R]],
      position_ids: ['int64', [rows, P + R]],
      response_mask: ['int64', [rows, R]],
      rollout_log_probs: ['float32', [rows, R]],
      rm_scores: ['float32', [rows, R]],
      token_level_scores: ['float32', [rows, R]],
      token_level_rewards: ['float32', [rows, R]],
      advantages: ['float32', [rows, R]],
      returns: ['float32', [rows, R]],
    };
    expect(Object.keys(b.tensors).sort()).toEqual(Object.keys(want).sort());
    for (const [key, [dtype, shape]] of Object.entries(want)) {
      expect(b.tensors[key]!.dtype, key).toBe(dtype);
      expect(b.tensors[key]!.shape, key).toEqual(shape);
    }
    expect(Object.keys(b.non_tensors).sort()).toEqual(
      [
        'uid',
        'trajectory_uid',
        'step_index',
        'policy_version',
        'has_log_probs',
        'off_policy',
        'truncated',
        'trajectory_reward',
      ].sort(),
    );
    expect(b.non_tensors.uid!.dtype).toBe('object');
    expect(b.non_tensors.uid!.shape).toEqual([rows]);
    expect(b.meta_info.temperature).toBe(TEMPERATURE);
    expect(b.meta_info.stepwise_lease_id).toBe(b.lease_id);
  });

  it('holds the stored steps at verl positions: training prompt left, response right, aligned log-probs and advantages', () => {
    const b = report.batches.train!;
    const t = (key: string) => b.tensors[key]!.values as number[][];
    const nt = (key: string) => b.non_tensors[key]!.values as (string | number | boolean)[];
    const [P, R] = [t('prompts')[0]!.length, RESPONSE_LENGTH];
    const advantage = new Map<string, number>();
    for (let g = 0; g < GROUPS; g++)
      for (const [i, a] of grpo(REWARDS[g]!).entries()) advantage.set(`verl-${g}-${i}`, a);
    const seen = new Set<string>();
    for (let i = 0; i < b.len; i++) {
      const uid = nt('trajectory_uid')[i] as string;
      const step = stored.get(`${uid}/${nt('step_index')[i]}`)!;
      seen.add(`${uid}/${step.index}`);
      const prompt = step.trainingPromptIds ?? step.promptIds;
      const response = step.responseIds;
      const n = prompt.length + response.length;
      // The guided rollout trains without its hint.
      if (uid === GUIDED) expect(prompt.some((id) => HINT.includes(id))).toBe(false);
      expect(t('prompts')[i]!.slice(P - prompt.length)).toEqual(prompt);
      expect(t('attention_mask')[i]!.slice(0, P)).toEqual([
        ...Array(P - prompt.length).fill(0),
        ...Array(prompt.length).fill(1),
      ]);
      expect(t('responses')[i]!.slice(0, response.length)).toEqual(response);
      expect(t('input_ids')[i]).toEqual([...t('prompts')[i]!, ...t('responses')[i]!]);
      const mask = [...Array(response.length).fill(1), ...Array(R - response.length).fill(0)];
      expect(t('response_mask')[i]).toEqual(mask);
      // verl reads the response half of attention_mask as the response mask.
      expect(t('attention_mask')[i]!.slice(P)).toEqual(mask);
      // Positions count real tokens only, continuing from the prompt into the response.
      const real = t('position_ids')[i]!.filter((_, k) => t('attention_mask')[i]![k] === 1);
      expect(real).toEqual(Array.from({ length: n }, (_, k) => k));
      expect(t('rollout_log_probs')[i]).toEqual([
        ...step.responseLogprobs!,
        ...Array(R - response.length).fill(0),
      ]);
      const a = advantage.get(uid)!;
      for (const [k, v] of t('advantages')[i]!.entries())
        expect(v).toBeCloseTo(k < response.length ? a : 0, 5);
      expect(t('returns')[i]).toEqual(t('advantages')[i]);
      // The step's reward sits on its last real response token, nowhere else.
      const score = Array(R).fill(0);
      score[response.length - 1] = step.reward ?? 0;
      for (const key of ['rm_scores', 'token_level_scores', 'token_level_rewards'])
        expect(t(key)[i], key).toEqual(score);
      expect(nt('uid')[i]).toBe(step.groupId);
      expect(nt('has_log_probs')[i]).toBe(true);
    }
    expect(seen.size).toBe(b.len);
    // Every row of a group shares its uid, and groups do not share one: verl's GRPO groups by it.
    const uids = nt('uid');
    const byUid = new Map<string, Set<string>>();
    uids.forEach((u, i) => {
      const set = byUid.get(u as string) ?? new Set<string>();
      set.add(nt('trajectory_uid')[i] as string);
      byUid.set(u as string, set);
    });
    expect([...byUid.keys()].sort()).toEqual(['verl-group-0', 'verl-group-1']);
    for (const set of byUid.values()) expect(set.size).toBe(N);
    expect(b.meta_info.global_token_num).toEqual(
      t('attention_mask').map((row) => row.reduce((s, v) => s + v, 0)),
    );
  });

  it("equals the leased arrays where verl's names meet Stepwise's", () => {
    const b = report.batches.train!;
    for (const key of ['responses', 'response_mask', 'rollout_log_probs', 'advantages', 'rm_scores'])
      expect(b.tensors[key]!.values, key).toEqual(b.leased[key]);
    // The leased prompts are the behaviour prompts; the adapter's are the training prompts.
    expect(b.tensors.prompts!.values).toEqual(b.leased.training_prompts);
    expect(b.tensors.prompts!.values).not.toEqual(b.leased.prompts);
    expect(b.non_tensors.policy_version!.values).toEqual(b.leased.policy_version);
  });

  it('leaves rollout_log_probs out when a row came without them, and flags the row', () => {
    const b = report.batches.partial!;
    expect(b.len).toBe(2);
    expect(b.tensors.rollout_log_probs).toBeUndefined();
    expect(b.tensors.advantages).toBeUndefined(); // leased without an advantage estimator
    expect(b.tensors.returns).toBeUndefined();
    const uids = b.non_tensors.trajectory_uid!.values as string[];
    const has = b.non_tensors.has_log_probs!.values as boolean[];
    expect(Object.fromEntries(uids.map((u, i) => [u, has[i]]))).toEqual({
      'partial-0': true,
      'partial-1': false,
    });
    expect(b.leased.has_log_probs).toEqual(uids.map((u) => (u === 'partial-0' ? 1 : 0)));
  });

  it("passes verl's own functions (only where verl is installed)", () => {
    const train = report.batches.train!;
    const partial = report.batches.partial!;
    if (!report.has_verl) {
      expect(train.verl).toBeNull();
      return;
    }
    const v = train.verl!;
    expect(v.is_data_proto).toBe(true);
    expect(v.response_mask_is_verls).toBe(true);
    expect(v.chunk_concat_identity).toBe(true);
    expect(v.pickle_round_trip).toBe(true);
    expect(v.actor_update_keys_selectable).toBe(true);
    expect(v.grpo_max_abs_diff).toBeLessThan(1e-5);
    expect(v.grpo_returns_equal).toBe(true);
    expect(v.no_padding_round_trip).toBe(true);
    const adv = train.tensors.advantages!.values as number[][];
    const mask = train.tensors.response_mask!.values as number[][];
    let sum = 0;
    let count = 0;
    for (const [i, row] of adv.entries())
      for (const [k, a] of row.entries()) {
        sum += a * mask[i]![k]!;
        count += mask[i]![k]!;
      }
    expect(v.pg_loss).toBeCloseTo(-sum / count, 5);
    expect(partial.verl!.bypass_mode_refuses).toBe(true);
    expect(partial.verl!.response_mask_is_verls).toBe(true);
  });
});
