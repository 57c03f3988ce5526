import { execFile, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepWireInput } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';

/*
 * The Python trainer client (clients/python) against a real server: python3 leases `padded` and
 * `json` batches, checks the verl layout itself and prints what it read; this file compares that
 * with what it submitted. The padded run happens twice: NumPy views and pure-Python arrays.
 */

const CLIENT_DIR = fileURLToPath(new URL('../clients/python', import.meta.url));
const PYTHON = process.env.PYTHON ?? 'python3';
const hasPython = spawnSync(PYTHON, ['-c', 'import sys; assert sys.version_info >= (3, 11)']).status === 0;
const hasNumpy = hasPython && spawnSync(PYTHON, ['-c', 'import numpy']).status === 0;

const ROLLOUTS = 4;

interface PlannedStep {
  prompt: number[];
  response: number[];
  logprobs: number[] | null;
  reward: number | null;
}
interface PlannedTrajectory {
  uid: string;
  steps: PlannedStep[];
  /** Set through complete_trajectory; otherwise the outcome is the sum of the step rewards. */
  explicitReward: number | null;
  outcome: number;
}
interface PlannedGroup {
  id: string;
  trajectories: PlannedTrajectory[];
}

/**
 * Two groups of four trajectories of 2-3 steps with prompts and responses of different lengths.
 * Group 0's outcomes [1, 0, 0, 0] come from complete_trajectory (its step rewards differ on
 * purpose); group 1's are the sums of its step rewards (one step has none).
 */
function plan(channel: string): PlannedGroup[] {
  return [0, 1].map((g) => ({
    id: `${channel}-g${g}`,
    trajectories: Array.from({ length: ROLLOUTS }, (_, t) => {
      const steps: PlannedStep[] = [];
      let history = Array.from({ length: 2 + t }, (_, k) => 10 * (g + 1) + k);
      const n = 2 + (t % 2);
      for (let i = 0; i < n; i++) {
        const prompt = history.concat([100 + i]);
        const response = Array.from(
          { length: 1 + ((t + i) % 3) },
          (_, k) => 1000 * (g + 1) + 100 * t + 10 * i + k,
        );
        const last = i === n - 1;
        steps.push({
          prompt,
          response,
          logprobs: t === 3 ? null : response.map((_, k) => -0.25 * (k + 1)),
          reward:
            g === 0 ? 0.25 * (i + 1) : g === 1 && t === 2 && i === 0 ? null : last ? [2, 0, 1, 0.5][t]! : 0.5,
        });
        history = prompt.concat(response);
      }
      const explicitReward = g === 0 ? (t === 0 ? 1 : 0) : null;
      const outcome = explicitReward ?? steps.reduce((s, step) => s + (step.reward ?? 0), 0);
      return { uid: `${channel}-g${g}-t${t}`, steps, explicitReward, outcome };
    }),
  }));
}

function grpo(rewards: number[]): number[] {
  const n = rewards.length;
  const mean = rewards.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(rewards.reduce((s, r) => s + (r - mean) ** 2, 0) / (n - 1));
  return rewards.map((r) => (r - mean) / (std + 1e-6));
}

async function populate(server: RunningServer, channel: string): Promise<PlannedGroup[]> {
  const groups = plan(channel);
  const post = async (path: string, body: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.status, `${path}: ${await res.clone().text()}`).toBe(200);
  };
  // Group 0 first and completed by hand, so it is ready (and served) before group 1.
  for (const group of groups) {
    const steps: StepWireInput[] = group.trajectories.flatMap((t) =>
      t.steps.map((s, i) => ({
        trajectory_uid: t.uid,
        prompt_uid: group.id,
        step_index: i,
        prompt_ids: s.prompt,
        response_ids: s.response,
        rollout_log_probs: s.logprobs,
        reward: s.reward,
        is_last: t.explicitReward === null && i === t.steps.length - 1,
      })),
    );
    await post('/v1/steps', { steps, channel, n_rollouts: ROLLOUTS });
    for (const t of group.trajectories) {
      if (t.explicitReward !== null)
        await post(`/v1/trajectories/${t.uid}/complete`, { reward: t.explicitReward, status: 'complete' });
    }
  }
  return groups;
}

function runPython(args: string[], env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      PYTHON,
      ['-B', ...args],
      {
        cwd: CLIENT_DIR,
        timeout: 60_000,
        killSignal: 'SIGKILL',
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: '1', ...env },
        maxBuffer: 16 * 1024 * 1024,
      },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${PYTHON} ${args.join(' ')} failed: ${error.message}\n${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

interface RowSummary {
  group_id: string;
  trajectory_uid: string;
  step_index: number;
  policy_version: number;
  prompt: number[];
  response: number[];
  logprobs: number[];
  has_log_probs: number;
  reward: number | null;
  advantage: number | null;
  advantage_on_padding: boolean;
  trajectory_reward: number;
  truncated: number;
  off_policy: number;
  training_prompt_is_prompt: boolean;
}
interface BatchSummary {
  lease_id: string;
  rows: number;
  prompt_width: number;
  response_width: number;
  truncated_steps: number;
  dropped_steps: number;
  group_ids: string[];
  trajectory_uids: string[];
  steps: RowSummary[];
  aligned: boolean;
  members: number;
  array_type: string;
  shares_memory?: boolean;
  base_is_body?: boolean;
  writeable?: boolean;
  npz_load_equal?: boolean;
  settled: unknown;
  retried_after_nack?: boolean;
}

/** Every row of a served group against the plan: tokens, logprobs, score placement, advantages. */
function expectGroupRows(batch: BatchSummary, group: PlannedGroup): void {
  const advantages = grpo(group.trajectories.map((t) => t.outcome));
  const planned = group.trajectories.flatMap((t) => t.steps);
  expect(batch.group_ids).toEqual([group.id]);
  expect([...batch.trajectory_uids].sort()).toEqual(group.trajectories.map((t) => t.uid).sort());
  expect(batch.rows).toBe(planned.length);
  expect(batch.steps).toHaveLength(planned.length);
  expect(batch.prompt_width).toBe(Math.max(...planned.map((s) => s.prompt.length)));
  expect(batch.response_width).toBe(Math.max(...planned.map((s) => s.response.length)));
  expect([batch.truncated_steps, batch.dropped_steps]).toEqual([0, 0]);
  expect(batch.aligned).toBe(true);
  // 11 row arrays (with advantages, the training prompts and the response versions) + 11 row keys + 2 id lists
  expect(batch.members).toBe(24);
  for (const row of batch.steps) {
    const ti = group.trajectories.findIndex((t) => t.uid === row.trajectory_uid);
    const trajectory = group.trajectories[ti]!;
    const step = trajectory.steps[row.step_index]!;
    expect(row.group_id).toBe(group.id);
    expect(row.prompt).toEqual(step.prompt);
    expect(row.response).toEqual(step.response);
    expect(row.has_log_probs).toBe(step.logprobs ? 1 : 0);
    expect(row.logprobs).toEqual(step.logprobs ?? step.response.map(() => 0));
    expect(row.reward).toBeCloseTo(step.reward ?? 0, 6);
    expect(row.advantage).toBeCloseTo(advantages[ti]!, 5);
    expect(row.advantage_on_padding).toBe(false);
    expect(row.trajectory_reward).toBeCloseTo(trajectory.outcome, 6);
    expect(row.policy_version).toBe(0);
    expect(row.truncated).toBe(0);
    expect(row.off_policy).toBe(0);
    expect(row.training_prompt_is_prompt).toBe(true);
  }
}

interface ErrorSummary {
  status: number;
  code: string;
  field: string | null;
  message: string;
}
interface JsonSummary {
  errors: Record<
    'batch_size_0' | 'bad_format' | 'padded_only_option' | 'overlong' | 'unknown_lease',
    ErrorSummary
  >;
  arrow: { rows: number; continuation: string; settled: { state: string } };
  format: string;
  rows: number;
  lease_id: string;
  groups: {
    group_id: string;
    trajectories: {
      trajectory_uid: string;
      reward: number;
      advantage: number;
      steps: { step_index: number; response_ids: number[]; reward: number | null; advantage: number }[];
    }[];
  }[];
  settled: unknown;
  policy_version: unknown;
}

describe.skipIf(!hasPython)('Python trainer client', () => {
  let dir: string;
  let server: RunningServer;
  const plans: Record<string, PlannedGroup[]> = {};

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-pyclient-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: [] });
    for (const channel of ['numpy', 'pure', 'json', 'example'])
      plans[channel] = await populate(server, channel);
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const unitTests = (env: Record<string, string>) =>
    runPython(['-m', 'unittest', 'discover', '-s', 'tests', '-p', 'test_*.py'], env);

  it.skipIf(!hasNumpy)('unit tests (reader, retries) pass with NumPy', async () => {
    await unitTests({});
  });
  it('unit tests (reader, retries) pass without NumPy', async () => {
    await unitTests({ STEPWISE_NO_NUMPY: '1' });
  });

  const paddedCases: [string, string, Record<string, string>, boolean][] = [
    ['with NumPy: arrays are views of the response bytes', 'numpy', {}, hasNumpy],
    ['without NumPy (STEPWISE_NO_NUMPY=1): NpyArray values', 'pure', { STEPWISE_NO_NUMPY: '1' }, true],
  ];
  for (const [what, channel, env, enabled] of paddedCases) {
    it.skipIf(!enabled)(`padded + grpo ${what}; ack, nack-by-exception, then 204`, async () => {
      const out = await runPython(['tests/check_lease.py', server.url, channel, 'padded'], env);
      const result = JSON.parse(out) as {
        have_numpy: boolean;
        batches: BatchSummary[];
        after: string | null;
      };
      const [first, second] = result.batches as [BatchSummary, BatchSummary];
      const [g0, g1] = plans[channel]! as [PlannedGroup, PlannedGroup];
      expect(result.have_numpy).toBe(channel === 'numpy');

      expectGroupRows(first, g0); // ready first, served first
      expect(first.settled).toEqual({ lease_id: first.lease_id, state: 'acked', groups: 1 });
      expectGroupRows(second, g1);
      expect(second.retried_after_nack).toBe(true);
      expect(second.settled).toBe('acked');
      expect(result.after).toBeNull(); // both groups acked: the next lease is a 204

      for (const batch of result.batches) {
        if (channel === 'numpy') {
          expect(batch.array_type).toBe('ndarray');
          expect([batch.shares_memory, batch.base_is_body, batch.writeable, batch.npz_load_equal]).toEqual([
            true,
            true,
            true,
            true,
          ]);
        } else {
          expect(batch.array_type).toBe('NpyArray');
        }
      }
      const stats = await server.pool.stats(channel);
      expect(stats.consumed.groups).toBe(2);
    });
  }

  it('json + grpo, and errors raised as StepwiseError naming the field', async () => {
    const out = await runPython(['tests/check_lease.py', server.url, 'json', 'json'], {
      STEPWISE_NO_NUMPY: '1',
    });
    const result = JSON.parse(out) as JsonSummary;
    expect(result.errors.batch_size_0).toMatchObject({
      status: 400,
      code: 'invalid_request',
      field: 'batch_size',
    });
    expect(result.errors.bad_format).toMatchObject({ status: 400, field: 'format' });
    expect(result.errors.padded_only_option).toMatchObject({ status: 400, field: 'prompt_length' });
    expect(result.errors.overlong).toMatchObject({
      status: 422,
      code: 'overlong_step',
      field: 'prompt_length',
    });
    expect(result.errors.unknown_lease.status).toBe(404);

    // The 422 released its lease at once, and so did the nacked arrow batch: json gets both groups.
    const stepsInChannel = plans.json!.flatMap((g) => g.trajectories.flatMap((t) => t.steps)).length;
    expect(result.arrow).toMatchObject({ rows: stepsInChannel, continuation: 'ffffffff' });
    expect(result.arrow.settled.state).toBe('nacked');
    expect(result.format).toBe('json');
    const groups = plans.json!;
    expect(result.groups.map((g) => g.group_id)).toEqual(groups.map((g) => g.id));
    expect(result.rows).toBe(groups.flatMap((g) => g.trajectories.flatMap((t) => t.steps)).length);
    for (const [gi, group] of result.groups.entries()) {
      const planned = groups[gi]!;
      const advantages = grpo(planned.trajectories.map((t) => t.outcome));
      for (const trajectory of group.trajectories) {
        const ti = planned.trajectories.findIndex((t) => t.uid === trajectory.trajectory_uid);
        expect(trajectory.reward).toBeCloseTo(planned.trajectories[ti]!.outcome, 9);
        expect(trajectory.advantage).toBeCloseTo(advantages[ti]!, 9);
        trajectory.steps.forEach((s, i) => {
          expect(s.step_index).toBe(i);
          expect(s.response_ids).toEqual(planned.trajectories[ti]!.steps[i]!.response);
          expect(s.advantage).toBeCloseTo(advantages[ti]!, 9);
        });
      }
    }
    expect(result.settled).toEqual({ lease_id: result.lease_id, state: 'acked', groups: 2 });
    expect(result.policy_version).toEqual({ set: { version: 0 }, read: 0 });
  });
  // Last: it moves the policy version, which the tests above expect at 0.
  it('examples/train_loop.py runs lease -> update -> ack -> policy version', async () => {
    const out = await runPython([
      'examples/train_loop.py',
      '--url',
      server.url,
      '--channel',
      'example',
      '--batch-size',
      '1',
      '--n-rollouts',
      String(ROLLOUTS),
      '--steps',
      '5',
      '--wait-ms',
      '0',
      '--max-idle',
      '1',
    ]);
    expect(out.match(/acked/g)).toHaveLength(2);
    expect(out).toContain('policy version 2');
    expect((await server.pool.stats('example')).consumed.groups).toBe(2);
    expect(await server.pool.policyVersion()).toBe(2);
  });
});
