import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { LeaseRequest } from '../packages/core/src/domain/lease.js';
import { startServer } from '../packages/core/src/server/server.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import type { GymTask } from '../packages/gym/src/tasks/schema.js';
import { compareSchedulers } from '../src/train/compare.js';
import { TRAIN_AGENT } from '../src/train/loop.js';
import { findTrainPython } from '../src/train/python.js';
import {
  configureSchedule,
  RolloutLedger,
  type SchedulePolicy,
  scheduledRound,
  scheduleReport,
} from '../src/train/schedule.js';
import { COPY_INPUT, COPY_OUTPUT, mixedTasks, type TaskKind, taskKind } from '../src/train/tasks.js';

/*
 * `stepwise train --schedule` and `--compare-schedulers` (docs/trainers.md, "The scheduler"), cheaply:
 * - the mixed task set scores as its kinds say, through the gym with the built-in sim;
 * - scheduled rounds against the sim (no trainer, no Python): under `difficulty` the always- and
 *   never-solved prompts are retired after their first group while the learnable ones are handed
 *   again, under `in_order` every prompt is handed in turn; what the run reports (rollouts, groups,
 *   zero-variance drops) is what the store holds;
 * - the comparison end to end with the Python engine and trainer on the untrained preset model and
 *   `--no-update` (its copy tasks fail too, so every group is all-equal), stopped by its rollout cap
 *   or by a scheduler with nothing left: the wiring and the report against each run's store.
 * The learning itself (a full RL run, about 10 minutes here) is measured once, by hand: docs/trainers.md.
 */

const sandbox = checkSandbox();
const unsafeNoSandbox = !sandbox.ok;
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});
const tempDir = (name: string) => {
  const dir = mkdtempSync(join(tmpdir(), name));
  dirs.push(dir);
  return dir;
};

const byKind = (tasks: readonly GymTask[], kind: TaskKind) => tasks.filter((t) => taskKind(t) === kind);

describe('the mixed task set', () => {
  it('is the same set from the same seed: interleaved kinds, distinct tickets, a hard code given nowhere', () => {
    const tasks = mixedTasks(seededRandom('mixed', 7), 4);
    expect(mixedTasks(seededRandom('mixed', 7), 4)).toEqual(tasks);
    expect(mixedTasks(seededRandom('mixed', 8), 4).map((t) => t.id)).not.toEqual(tasks.map((t) => t.id));
    expect(tasks.map(taskKind)).toEqual(
      Array.from({ length: 4 }, () => ['easy', 'learnable', 'hard']).flat(),
    );
    const tickets = tasks.map((t) => t.provenance.ticket);
    expect(new Set(tickets).size).toBe(12);
    for (const task of byKind(tasks, 'hard')) {
      const token = String(task.provenance.token);
      expect(token).toMatch(/^[a-z0-9]{16}$/);
      expect(task.prompt).not.toContain(token);
      for (const file of task.files) expect(JSON.stringify(file)).not.toContain(token);
    }
  });

  it('scores as its kinds say: easy on an untouched workspace, learnable only with the copy, hard not even then', async () => {
    const tasks = mixedTasks(seededRandom('mixed', 3), 2);
    // The sim copies input.txt to answer.md on the learnable and the hard tasks (what RL teaches the
    // tiny model), and answers at once on the easy ones (it has no actions for them).
    const copy = [{ name: 'exec', arguments: { command: `cp ${COPY_INPUT} ${COPY_OUTPUT}` } }];
    const server = await startServer({
      dbPath: ':memory:',
      port: 0,
      engines: ['sim'],
      sim: {
        policy: 'reference',
        tasks: tasks.filter((t) => taskKind(t) !== 'easy').map((t) => ({ prompt: t.prompt, actions: copy })),
      },
    });
    try {
      const dir = tempDir('stepwise-mixed-');
      const { results } = await runGym({
        tasks,
        samples: 1,
        concurrency: 2,
        gatewayUrl: server.url,
        model: 'sim-qwen3',
        agent: TRAIN_AGENT,
        runId: 'mixed',
        stateFile: join(dir, 'state.jsonl'),
        workDir: join(dir, 'work'),
        sampleTimeoutMs: 60_000,
        unsafeNoSandbox,
      });
      const score = new Map(results.map((r) => [r.taskId, r.score]));
      const calls = new Map(results.map((r) => [r.taskId, r.toolCalls]));
      expect(results.every((r) => r.status === 'complete')).toBe(true);
      for (const t of byKind(tasks, 'easy')) expect([score.get(t.id), calls.get(t.id)]).toEqual([1, 0]);
      for (const t of byKind(tasks, 'learnable')) expect([score.get(t.id), calls.get(t.id)]).toEqual([1, 1]);
      for (const t of byKind(tasks, 'hard')) expect([score.get(t.id), calls.get(t.id)]).toEqual([0, 1]);
    } finally {
      await server.close();
    }
  }, 120_000);
});

/** Scheduled rounds of the mixed set against the sim, with no trainer: the policy version stays 0. */
async function scheduledRounds(policy: SchedulePolicy, rounds: number) {
  const tasks = mixedTasks(seededRandom('mixed', 11), 3);
  // The sim solves a learnable task unless it gives up (half its episodes): mixed groups, as the
  // warmed-up model's are; easy and hard tasks it answers at once (all pass, all fail).
  const copy = [{ name: 'exec', arguments: { command: `cp ${COPY_INPUT} ${COPY_OUTPUT}` } }];
  const learnable = byKind(tasks, 'learnable').map((t) => ({ prompt: t.prompt, actions: copy }));
  const dir = tempDir(`stepwise-scheduled-${policy}-`);
  const dbPath = join(dir, 'pool.db');
  const server = await startServer({
    dbPath,
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: learnable, giveUpRate: 0.5, seed: 5 },
  });
  const ledger = new RolloutLedger(0.8, 8);
  const handed: string[][] = [];
  try {
    await configureSchedule(server.pool, 'train', { policy, tasks, rollouts: 4, zeroVariance: 'drop' });
    for (let round = 0; round < rounds; round++) {
      const { results } = await scheduledRound({
        tasks,
        groups: 3,
        concurrency: 1,
        gatewayUrl: server.url,
        model: 'sim-qwen3',
        agent: TRAIN_AGENT,
        runId: `${policy}-r${round}`,
        channel: 'train',
        stateFile: join(dir, `r${round}.jsonl`),
        workDir: join(dir, 'work'),
        sampleTimeoutMs: 60_000,
        unsafeNoSandbox,
      });
      ledger.add(results, tasks);
      handed.push([...new Set(results.map((r) => r.taskId))]);
    }
    // A trainer's leases: zero-variance groups are dropped as a lease fills (one asking for every
    // group sees them all, and is short), then the rest are served.
    const listed = async () =>
      (await server.pool.listGroups({ channel: 'train', limit: 1000, offset: 0 })).items;
    const flat = await flatGroups(
      server.pool,
      (await listed()).map((g) => g.id),
    );
    const all = (await listed()).length;
    expect(await server.pool.lease(LeaseRequest.parse({ channel: 'train', batch_size: all }))).toBeNull();
    if (all > flat.size)
      expect(
        await server.pool.lease(LeaseRequest.parse({ channel: 'train', batch_size: all - flat.size })),
      ).not.toBeNull();
    const groups = await listed();
    const report = await scheduleReport(server.pool, 'train', { policy, ledger, tasks });
    const pools = new Map((await server.pool.listPrompts('train')).map((p) => [p.taskId, p.pool]));
    const trajectories = (await server.pool.listTrajectories({ channel: 'train', limit: 10_000, offset: 0 }))
      .items;
    return { tasks, report, handed, groups, flat, trajectories, pools };
  } finally {
    await server.close();
  }
}

/** The groups whose complete rollouts' rewards are all equal, read from the store. */
async function flatGroups(
  pool: Awaited<ReturnType<typeof startServer>>['pool'],
  groupIds: string[],
): Promise<Set<string>> {
  const flat = new Set<string>();
  for (const groupId of groupIds) {
    const items = (await pool.listTrajectories({ groupId, limit: 100, offset: 0 })).items;
    const rewards = items.filter((t) => t.status === 'complete').map((t) => t.reward);
    if (rewards.length > 0 && rewards.every((r) => r === rewards[0])) flat.add(groupId);
  }
  return flat;
}

describe('scheduled training rounds (the sim, no trainer)', () => {
  it('difficulty retires the always- and never-solved prompts after one group and hands the learnable ones again; in_order hands every prompt in turn', async () => {
    const inOrder = await scheduledRounds('in_order', 6);
    const difficulty = await scheduledRounds('difficulty', 6);
    const count = (handed: string[][], tasks: GymTask[], kind: TaskKind) =>
      handed.flat().filter((id) => byKind(tasks, kind).some((t) => t.id === id)).length;

    // in_order: 18 groups over 9 prompts, each prompt twice, in registration order.
    expect(inOrder.handed.flat()).toEqual([...inOrder.tasks, ...inOrder.tasks].map((t) => t.id));
    expect(inOrder.report.rollouts_by_kind).toEqual({ easy: 24, learnable: 24, hard: 24 });

    // difficulty: an easy or hard prompt at most once, retired by its first group (no re-test: the
    // version never moved); a learnable one again while its groups stay mixed (a group of 4 is
    // all-equal 1 time in 8, and retires its prompt too). Unseen and learnable prompts are drawn
    // half and half, so not every unseen prompt need come up in 18 groups.
    const { tasks } = difficulty;
    const handed = difficulty.handed.flat();
    for (const kind of ['easy', 'hard'] as const) {
      for (const task of byKind(tasks, kind)) {
        expect(handed.filter((id) => id === task.id).length).toBeLessThanOrEqual(1);
        if (handed.includes(task.id)) expect(difficulty.pools.get(task.id)).toBe(kind);
      }
      expect(count(difficulty.handed, tasks, kind)).toBeGreaterThanOrEqual(1);
    }
    expect(byKind(tasks, 'learnable').some((t) => handed.filter((id) => id === t.id).length >= 2)).toBe(true);
    const wasted = (r: typeof inOrder.report) => r.rollouts_by_kind.easy + r.rollouts_by_kind.hard;
    expect(wasted(difficulty.report)).toBeLessThanOrEqual(24);
    expect(wasted(difficulty.report)).toBeLessThan(wasted(inOrder.report));
    expect(difficulty.report.rollouts_by_kind.learnable).toBeGreaterThan(12);
    // Fewer rollouts went to groups with no signal than in order.
    expect(difficulty.report.generated_zero_variance.fraction!).toBeLessThan(
      inOrder.report.generated_zero_variance.fraction!,
    );

    for (const run of [inOrder, difficulty]) {
      const { report, groups, flat, trajectories } = run;
      // The report against the store: every rollout stored and counted, every group, the
      // zero-variance drops of the lease, and the groups handed out by the pool's prompt history.
      expect(report.rollouts).toBe(trajectories.length);
      expect(report.groups).toBe(groups.length);
      expect(report.groups_by_kind).toEqual(report.handed_by_kind);
      expect(report.generated_zero_variance).toMatchObject({ groups: flat.size, of: groups.length });
      expect(report.zero_variance).toMatchObject({ dropped: flat.size, reached_lease: groups.length });
      const dropped = groups.filter((g) => g.dropReason === 'zero_variance');
      expect(dropped.map((g) => g.id).sort()).toEqual([...flat].sort());
      expect(groups.filter((g) => g.state === 'leased').length).toBe(groups.length - flat.size);
      for (const kind of ['easy', 'learnable', 'hard'] as const)
        expect(report.rollouts_by_kind[kind]).toBe(
          trajectories.filter((t) => byKind(run.tasks, kind).some((task) => task.id === t.taskId)).length,
        );
    }
  }, 300_000);

  it("reads the target on the learnable rollouts' window, counting every rollout up to it", () => {
    const tasks = mixedTasks(seededRandom('mixed', 1), 1);
    const [easy, learnable, hard] = tasks as [GymTask, GymTask, GymTask];
    const result = (task: GymTask, score: number, i: number) => ({
      taskId: task.id,
      category: '',
      sample: i,
      groupId: `${task.id}.g`,
      trajectoryUid: null,
      status: 'complete' as const,
      score,
      code: null,
      rubric: null,
      verifierFailed: false,
      agent: 'finished' as const,
      reason: null,
      toolCalls: 0,
      toolErrors: 0,
      durationMs: 0,
    });
    const ledger = new RolloutLedger(0.75, 4);
    // 4 easy, then learnable 0, 1, 1, 1 (window 0.75 at the 8th rollout), then hard.
    ledger.add(
      [1, 1, 1, 1].map((s, i) => result(easy, s, i)),
      tasks,
    );
    ledger.add(
      [0, 1, 1].map((s, i) => result(learnable, s, i)),
      tasks,
    );
    expect(ledger.windowMean()).toBeNull();
    ledger.add([result(learnable, 1, 3), result(hard, 0, 0)], tasks);
    expect(ledger.crossing).toEqual({ rollouts: 8, learnableRollouts: 4, mean: 0.75 });
    expect(ledger.rollouts).toBe(9);
    expect(ledger.byKind).toEqual({ easy: 4, learnable: 4, hard: 1 });
  });
});

const python = findTrainPython();

describe.skipIf(!python)(
  'stepwise train --compare-schedulers (Python engine and trainer, no updates)',
  () => {
    it('runs both schedulers from one start and reports what each spent, as their stores hold it', async () => {
      const out = tempDir('stepwise-compare-');
      const lines: string[] = [];
      const report = await compareSchedulers({
        out,
        seed: 7,
        versions: 2,
        groups: 3,
        rollouts: 2,
        promptsPerKind: 1,
        warmupSteps: 0,
        warmupLr: 1e-2,
        lr: 2e-3,
        epochs: 1,
        maxStaleness: 1,
        concurrency: 2,
        update: false,
        maxRollouts: 12,
        python: python!,
        print: (line) => lines.push(line),
      });
      expect(JSON.parse(readFileSync(join(out, 'compare.json'), 'utf8'))).toEqual(
        JSON.parse(JSON.stringify(report)),
      );
      const [inOrder, difficulty] = report.runs;
      expect([inOrder!.policy, difficulty!.policy]).toEqual(['in_order', 'difficulty']);
      // The untrained model solves no copy task: every group is all-equal and dropped, no batch is
      // served, and no run reaches the target.
      for (const run of report.runs) {
        expect(run.report.reached).toBe(false);
        expect(run.updates).toBe(0);
        await expectStoreMatches(run);
      }
      // in_order spends its 12 rollouts (2 rounds of 3 groups of 2) on every prompt in turn, twice.
      expect(inOrder!.report.rollouts).toBe(12);
      expect(inOrder!.report.handed_by_kind).toEqual({ easy: 2, learnable: 2, hard: 2 });
      expect(inOrder!.stopped).toMatch(/--max-rollouts 12/);
      // difficulty retires each prompt after its one group and, with no batch to train on, stops.
      expect(difficulty!.report.rollouts).toBe(6);
      expect(difficulty!.report.handed_by_kind).toEqual({ easy: 1, learnable: 1, hard: 1 });
      expect(difficulty!.stopped).toMatch(/retired every prompt/);
      expect(existsSync(join(out, 'in_order', 'train.json'))).toBe(true);
      expect(lines.filter((l) => l.startsWith('compare   '))).toHaveLength(4);
    }, 600_000);
  },
);

/** A compared run's report against its store: rollouts, groups, drops and the prompts' history. */
async function expectStoreMatches(run: {
  out: string;
  report: import('../src/train/schedule.js').ScheduleReport;
}) {
  const store = await openSqliteStore({ path: join(run.out, 'train.db') });
  try {
    const trajectories = (await store.listTrajectories({ channel: 'train', limit: 10_000, offset: 0 })).items;
    const groups = (await store.listGroups({ channel: 'train', limit: 10_000, offset: 0 })).items;
    expect(run.report.rollouts).toBe(trajectories.length);
    expect(run.report.groups).toBe(groups.length);
    // Every group is all-equal: those a lease saw were dropped, the rest wait unserved.
    const dropped = groups.filter((g) => g.dropReason === 'zero_variance').length;
    expect(dropped).toBeGreaterThan(0);
    expect(groups.filter((g) => g.dropReason !== 'zero_variance').every((g) => g.state === 'ready')).toBe(
      true,
    );
    expect(run.report.zero_variance).toEqual({ dropped, reached_lease: dropped, fraction: 1 });
    expect(run.report.generated_zero_variance).toEqual({
      groups: groups.length,
      of: groups.length,
      fraction: 1,
    });
    const train = JSON.parse(readFileSync(join(run.out, 'train.json'), 'utf8'));
    expect(train.schedule).toEqual(run.report);
  } finally {
    await store.close();
  }
}
