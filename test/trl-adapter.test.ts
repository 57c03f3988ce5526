import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { newStep } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { findTrainPython, runPython } from '../src/train/python.js';

/*
 * TRL's own GRPOTrainer (the real `trl` package) trains the tiny model on Stepwise groups through
 * `stepwise_client.trl_adapter.StepwiseRollouts`, on CPU. The groups are two-step trajectories
 * (call, tool result, answer) stored through the pool; the test checks what TRL was handed against
 * what was stored, that the update moved the weights, and that the leases were acked after it.
 */

const python = findTrainPython();
const hasTrl =
  python !== null &&
  (await runPython(python, ['-c', 'import trl, datasets']).then(
    () => true,
    () => false,
  ));
// CI sets STEPWISE_TRAIN_PYTHON and installs trl: there a missing trl fails instead of skipping.
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);
if (python && !hasTrl && !required)
  console.warn(
    'TRL adapter test skipped: trl is not installed (pip install -r clients/python/requirements-trl.txt)',
  );

const GROUPS = 2;
const N = 4;
let dir: string;
let server: RunningServer;
// trajectory uid -> what TRL must see
const expected = new Map<
  string,
  { prompt: number[]; completion: number[]; mask: number[]; reward: number }
>();

beforeAll(async () => {
  if (!hasTrl) return;
  dir = mkdtempSync(join(tmpdir(), 'stepwise-trl-'));
  server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
  let token = 1000;
  const ids = (n: number) => Array.from({ length: n }, () => token++);
  for (let g = 0; g < GROUPS; g++) {
    const system = ids(12);
    for (let t = 0; t < N; t++) {
      const uid = `trl-${g}-${t}`;
      const reward = (g + t) % 2;
      const call = ids(5);
      const toolResult = ids(4);
      const answer = ids(3);
      const prompt1 = [...system, ...call, ...toolResult];
      await server.pool.submitSteps(
        [
          newStep({
            trajectoryId: uid,
            groupId: `trl-group-${g}`,
            index: 0,
            promptIds: system,
            responseIds: call,
            responseLogprobs: call.map(() => -0.5),
            reward: null,
            policyVersion: 0,
            isLast: false,
            tokenSource: 'engine',
            finishReason: 'tool_calls',
          }),
          newStep({
            trajectoryId: uid,
            groupId: `trl-group-${g}`,
            index: 1,
            promptIds: prompt1,
            responseIds: answer,
            responseLogprobs: answer.map(() => -0.25),
            reward,
            policyVersion: 0,
            isLast: true,
            tokenSource: 'engine',
            finishReason: 'stop',
          }),
        ],
        { nRollouts: N },
      );
      expected.set(uid, {
        prompt: system,
        completion: [...call, ...toolResult, ...answer],
        mask: [...call.map(() => 1), ...toolResult.map(() => 0), ...answer.map(() => 1)],
        reward,
      });
    }
  }
});

afterAll(async () => {
  if (!hasTrl) return;
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!python || (!hasTrl && !required))('TRL GRPOTrainer on Stepwise groups', () => {
  it('trains one step on the leased trajectories (env tokens masked), then acks the leases', async () => {
    if (!hasTrl)
      throw new Error(
        `STEPWISE_TRAIN_PYTHON=${python} has no trl: pip install -r clients/python/requirements-trl.txt`,
      );
    const out = await runPython(
      python!,
      [
        'tests/check_trl.py',
        '--pool',
        server.url,
        '--groups',
        String(GROUPS),
        '--num-generations',
        String(N),
      ],
      { timeoutMs: 600_000 },
    );
    const report = JSON.parse(out.trim().split('\n').at(-1)!) as {
      trl: string;
      served: {
        prompt_ids: number[][];
        completion_ids: number[][];
        logprobs: number[][];
        env_mask: number[][];
        stepwise_reward: number[];
        trajectory_uid: string[];
      }[];
      acked: string[];
      pending: number;
      weights_moved: number;
      logged_reward: number | null;
    };
    expect(report.trl).toMatch(/^\d+\.\d+/);
    expect(report.served).toHaveLength(1);
    const served = report.served[0]!;
    expect(served.trajectory_uid.sort()).toEqual([...expected.keys()].sort());
    served.trajectory_uid.forEach((uid, i) => {
      const want = expected.get(uid)!;
      expect(served.prompt_ids[i]).toEqual(want.prompt);
      expect(served.completion_ids[i]).toEqual(want.completion);
      expect(served.env_mask[i]).toEqual(want.mask);
      expect(served.logprobs[i]).toEqual([-0.5, -0.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, -0.25, -0.25, -0.25]);
      expect(served.stepwise_reward[i]).toBe(want.reward);
    });
    // A group's N completions are consecutive: TRL's group-relative advantages need that.
    for (let k = 0; k < served.trajectory_uid.length; k += N) {
      const groups = new Set(served.trajectory_uid.slice(k, k + N).map((uid) => uid.split('-')[1]));
      expect(groups.size).toBe(1);
    }
    const rewards = [...expected.values()].map((e) => e.reward);
    expect(report.logged_reward).toBeCloseTo(rewards.reduce((a, b) => a + b, 0) / rewards.length, 6);
    expect(report.weights_moved).toBeGreaterThan(0);
    expect(report.pending).toBe(0);
    expect(report.acked.length).toBeGreaterThanOrEqual(1);
    const stats = await server.pool.stats('train');
    expect(stats.consumed.groups).toBe(GROUPS);
  }, 700_000);
});
