import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { newStep } from '../packages/core/src/domain/index.js';
import type { DataPool } from '../packages/core/src/pool/data-pool.js';
import {
  type JobRequest,
  openPostgresRewardJobQueue,
  openRewardJobQueue,
  type RewardJob,
  type RewardJobQueue,
  RewardService,
  type RewardsConfigFile,
  resolveRewardsConfig,
} from '../packages/core/src/rewards/index.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { runRewardJobQueueSuite } from './rewards-queue-suite.js';
import {
  addTrajectory,
  eventually,
  type FakeServer,
  fakeJudge,
  openPgPool,
  openPool,
  refusedUrl,
} from './rewards-support.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Reward jobs end to end, on each backend: a real SQLite file, or a schema of a real PostgreSQL; the
 * scheduler following the event log, workers calling judges that are real HTTP servers on loopback
 * (slow, down, or answering garbage), retries with backoff, recorded failures, combinations,
 * recomputation and restarts. The queue's own contract runs on both too (rewards-queue-suite.ts).
 */

let dir: string;
let n = 0;
const cleanups: (() => Promise<void>)[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-rewards-'));
});
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** One database of a backend: a pool on it, and a queue on it as a process would open one. */
interface Database {
  openPool(): Promise<DataPool>;
  openQueue(): Promise<RewardJobQueue>;
  /** The service opens its queue itself on the store's database (SQLite), or is handed one. */
  serviceOpensQueue: boolean;
}

interface Backend {
  name: string;
  /** A new, empty database, dropped after the test. */
  database(): Database;
}

const sqlite: Backend = {
  name: 'SQLite',
  database() {
    const path = join(dir, `r${n++}.db`);
    return {
      openPool: () => openPool(path),
      openQueue: () => openRewardJobQueue({ path }),
      serviceOpensQueue: true,
    };
  },
};

const postgres: Backend = {
  name: 'PostgreSQL',
  database() {
    const schema = freshSchema('stepwise_rewards');
    cleanups.push(() => dropSchema(schema));
    return {
      openPool: () => openPgPool(pgUrl!, schema),
      openQueue: () => openPostgresRewardJobQueue({ url: pgUrl!, schema, poolSize: 4 }),
      serviceOpensQueue: false,
    };
  },
};

runRewardJobQueueSuite('SQLite', async () => {
  const path = join(dir, `q${n++}.db`);
  return { open: () => openRewardJobQueue({ path }), cleanup: async () => {} };
});

describe.skipIf(!pgUrl)('PostgreSQL', () => {
  runRewardJobQueueSuite('PostgreSQL', async () => {
    const schema = freshSchema('stepwise_queue');
    return {
      open: () => openPostgresRewardJobQueue({ url: pgUrl!, schema, poolSize: 4 }),
      cleanup: () => dropSchema(schema),
    };
  });

  it('a claim skips the jobs another transaction holds instead of waiting; the store opens after the queue', async () => {
    const schema = freshSchema('stepwise_queue');
    cleanups.push(() => dropSchema(schema));
    const queue = await openPostgresRewardJobQueue({ url: pgUrl!, schema });
    cleanups.push(() => queue.close());
    const job = (trajectoryId: string): JobRequest => ({
      kind: 'function',
      channel: 'train',
      trajectoryId,
      groupId: null,
      function: 'judge',
      version: 'v1',
      maxAttempts: 3,
      reason: 'completed',
    });
    await queue.enqueue([job('a'), job('b')], 1_000);
    const holder = new pg.Client({ connectionString: pgUrl, options: `-c search_path=${schema}` });
    await holder.connect();
    cleanups.push(() => holder.end());
    await holder.query('BEGIN');
    await holder.query(`SELECT id FROM reward_jobs WHERE trajectory_id = 'a' FOR UPDATE`);
    const blocked = new Promise<'blocked'>((r) => setTimeout(() => r('blocked'), 5_000).unref());
    const first = await Promise.race([queue.claim('w', 5, 1_000, () => 60_000), blocked]);
    expect(first).not.toBe('blocked');
    expect((first as RewardJob[]).map((j) => j.trajectoryId)).toEqual(['b']);
    await holder.query('ROLLBACK');
    expect((await queue.claim('w', 5, 1_000, () => 60_000)).map((j) => j.trajectoryId)).toEqual(['a']);
    // The queue migrated the schema first: the store finds its tables there.
    const store = await openPostgresStore({ url: pgUrl!, schema, listen: false });
    cleanups.push(() => store.close());
    expect(await store.describe()).toEqual({ kind: 'postgres', path: null });
    expect((await store.listTrajectories({ limit: 1, offset: 0 })).items).toEqual([]);
  });
});

async function judgeServer(reply: Parameters<typeof fakeJudge>[0]): Promise<FakeServer> {
  const s = await fakeJudge(reply);
  cleanups.push(() => s.close());
  return s;
}

const judgeFn = (url: string, extra: Record<string, unknown> = {}) => ({
  plugin: 'judge',
  params: { base_url: `${url}/v1`, model: 'judge', rubric: 'Correct number.', ...extra },
});
const exactFn = { plugin: 'rule', params: { kind: 'numeric', expected: 42 } };
const workers = {
  concurrency: 4,
  timeout_ms: 1_500,
  max_attempts: 3,
  backoff_ms: 20,
  backoff_max_ms: 100,
  poll_ms: 20,
};

async function start(
  db: Database,
  file: RewardsConfigFile,
  options: { concurrency?: number; pool?: DataPool } = {},
): Promise<{ pool: DataPool; rewards: RewardService }> {
  const pool = options.pool ?? (await db.openPool());
  const queue = db.serviceOpensQueue ? undefined : await db.openQueue();
  const rewards = (
    await RewardService.open({
      pool,
      config: resolveRewardsConfig(file),
      concurrency: options.concurrency,
      queue,
    })
  ).start();
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    await rewards.close();
    await queue?.close();
    await pool.close();
  };
  cleanups.push(close);
  return { pool, rewards };
}

/** The job of a function for a trajectory, once it has finished (done or failed). */
async function finished(rewards: RewardService, trajectoryId: string, fn: string): Promise<RewardJob> {
  return eventually(async () => {
    const [job] = await rewards.jobs({ trajectoryId, function: fn, limit: 1 });
    return job && (job.state === 'done' || job.state === 'failed') ? job : null;
  });
}

function rewardJobTests(backend: Backend): void {
  describe('reward jobs: workers and failures', () => {
    it('scores completed trajectories, combines the signals and writes the reward', async () => {
      const judge = await judgeServer(() => '{"band": 4, "reason": "ok"}');
      const { pool, rewards } = await start(backend.database(), {
        functions: { exact: exactFn, judge: judgeFn(judge.url) },
        channels: { train: { functions: ['exact', 'judge'], combination: '0.7*exact + 0.3*judge' } },
        workers,
      });
      const t = await addTrajectory(pool, { answers: ['thinking', 'It is 42.'] });
      const combine = await eventually(async () => {
        const [job] = await rewards.jobs({ trajectoryId: t.id, kind: 'combine', state: 'done', limit: 1 });
        return job?.result?.value !== undefined ? job : null;
      });
      expect(combine.result).toMatchObject({ value: 0.7 + 0.3 * 0.75, reward_written: true });
      const signals = await pool.getSignals(t.id, { current: true });
      expect(signals.map((s) => [s.name, s.source, s.value])).toEqual(
        expect.arrayContaining([
          ['exact', 'rule', 1],
          ['judge', 'judge', 0.75],
          ['reward', 'rule', 0.7 + 0.3 * 0.75],
        ]),
      );
      expect((await pool.getTrajectory(t.id))!.reward).toBeCloseTo(0.925);
      expect(await rewards.requiredSignals(t.id)).toEqual({
        ready: true,
        required: ['exact', 'judge'],
        missing: [],
      });
    });

    it('reward functions read what a trainer receives: step scores land on the served rows of an online CLEANER run', async () => {
      const { pool, rewards } = await start(backend.database(), {
        functions: {
          step42: { plugin: 'rule_step', params: { kind: 'numeric', expected: 42, input: 'response' } },
        },
        channels: { train: { functions: ['step42'] } },
        workers,
      });
      // Step 0 failed, step 1 regenerated it with the error in view (a deep repair): the served rows
      // are step 1's response at step 0's prompt (index 0), then step 2.
      const id = `cleaner-${Date.now().toString(36)}`;
      await pool.createTrajectory({
        id,
        groupId: `g-${id}`,
        channel: 'train',
        nRollouts: 1,
        metadata: { cleaner: { repairs: [{ failed_step: 0, retry_step: 1, mode: 'deep' }] } },
      });
      const at = (index: number, promptIds: number[], responseText: string) =>
        newStep({
          trajectoryId: id,
          groupId: `g-${id}`,
          index,
          promptIds,
          responseIds: [100 + index],
          isLast: index === 2,
          messages: [{ role: 'user', content: 'What is six times seven?' }],
          responseText,
        });
      await pool.submitSteps(
        [at(0, [1, 2], 'Maybe 41.'), at(1, [1, 2, 100, 9], 'It is 42.'), at(2, [1, 2, 101, 8], 'So: 42.')],
        { channel: 'train', nRollouts: 1 },
      );
      await pool.completeTrajectory(id, { reward: null, status: 'complete' });
      const job = await finished(rewards, id, 'step42');
      expect(job.state).toBe('done');
      const signals = await pool.getSignals(id, { current: true });
      // Index 0 is scored on the graft (the regeneration's 42), index 1 (a regeneration) not at all.
      expect(signals.map((s) => [s.stepIndex, s.value]).sort()).toEqual([
        [0, 1],
        [2, 1],
      ]);
    });

    it('a channel gated on the combined signal serves its group only once every rollout is scored', async () => {
      // The judge holds its second answer back: one rollout is scored, the other not yet.
      const judge = await judgeServer((k) => ({
        body: '{"band": 4, "reason": "ok"}',
        ...(k === 2 ? { delayMs: 800 } : {}),
      }));
      const { pool } = await start(backend.database(), {
        functions: { exact: exactFn, judge: judgeFn(judge.url) },
        channels: { train: { functions: ['exact', 'judge'], combination: '0.7*exact + 0.3*judge' } },
        workers: { ...workers, concurrency: 2 },
      });
      await pool.configureChannel('train', { required_signals: ['reward'] });
      const a = await addTrajectory(pool, { groupId: 'gated', nRollouts: 2, answers: ['It is 42.'] });
      const b = await addTrajectory(pool, { groupId: 'gated', nRollouts: 2, answers: ['It is 41.'] });
      const lease = () =>
        pool.lease({ channel: 'train', batch_size: 1, wait_ms: 0, consumer: 'trainer', ttl_ms: 60_000 });
      const scored = async (id: string) =>
        (await pool.getSignals(id, { current: true })).some((s) => s.name === 'reward');
      // One rollout scored, the other waiting on the judge: the finished group is held back.
      await eventually(async () => (await scored(a.id)) !== (await scored(b.id)));
      expect(await lease()).toBeNull();
      expect((await pool.stats('train')).awaitingSignals).toBe(1);
      const batch = (await eventually(lease))!;
      const rewards = Object.fromEntries(
        batch.groups[0]!.trajectories.map((t) => [t.trajectory.id, t.trajectory.reward]),
      );
      // Served with every reward written: never a half-scored group.
      expect(rewards[a.id]).toBeCloseTo(0.925);
      expect(rewards[b.id]).toBeCloseTo(0.225);
      for (const t of batch.groups[0]!.trajectories)
        expect(t.signals.some((s) => s.name === 'reward' && s.value === t.trajectory.reward)).toBe(true);
    });

    it('retries a judge that is too slow (timeout) and succeeds when it answers in time', async () => {
      const judge = await judgeServer((i) =>
        i === 1 ? { body: '{"band": 5}', delayMs: 10_000 } : '{"band": 5}',
      );
      const { pool, rewards } = await start(backend.database(), {
        functions: { judge: judgeFn(judge.url) },
        channels: { train: { functions: ['judge'] } },
        workers,
      });
      const t = await addTrajectory(pool);
      const job = await finished(rewards, t.id, 'judge');
      expect(job).toMatchObject({ state: 'done', attempts: 2 });
      expect(job.errors).toEqual([
        expect.objectContaining({ attempt: 1, retryable: true, message: 'timed out after 1500 ms' }),
      ]);
      const signals = await pool.getSignals(t.id);
      expect(signals.map((s) => [s.name, s.value])).toEqual([['judge', 1]]);
    });

    it('a judge that is down: retries with backoff, then a recorded failure and no signal (never a silent 0)', async () => {
      const down = await refusedUrl();
      const { pool, rewards } = await start(backend.database(), {
        functions: { exact: exactFn, judge: judgeFn(down) },
        channels: { train: { functions: ['exact', 'judge'], combination: '0.7*exact + 0.3*judge' } },
        workers,
      });
      const t = await addTrajectory(pool);
      const job = await finished(rewards, t.id, 'judge');
      expect(job.state).toBe('failed');
      expect(job.attempts).toBe(3);
      expect(job.errors.map((e) => [e.attempt, e.retryable])).toEqual([
        [1, true],
        [2, true],
        [3, true],
      ]);
      expect(job.errors[0]!.message).toMatch(/the judge request failed: Connection error/);
      // The attempts were spaced by the backoff.
      expect(job.errors[1]!.at - job.errors[0]!.at).toBeGreaterThanOrEqual(10);
      await finished(rewards, t.id, 'exact');
      // Only the rule's signal: no judge score, no combined reward, the trajectory reward untouched.
      await eventually(
        async () => (await rewards.jobs({ trajectoryId: t.id, kind: 'combine', state: 'done', limit: 1 }))[0],
      );
      const signals = await pool.getSignals(t.id);
      expect(signals.map((s) => s.name)).toEqual(['exact']);
      expect((await pool.getTrajectory(t.id))!.reward).toBeNull();
      expect(await rewards.requiredSignals(t.id)).toEqual({
        ready: false,
        required: ['exact', 'judge'],
        missing: ['judge'],
      });
    });

    it('a judge that answers garbage: each unparseable verdict is retried, then a recorded failure', async () => {
      const judge = await judgeServer(() => 'Honestly? Pretty solid work, I liked it.');
      const { pool, rewards } = await start(backend.database(), {
        functions: { judge: judgeFn(judge.url) },
        channels: { train: { functions: ['judge'], combination: 'judge' } },
        workers,
      });
      const t = await addTrajectory(pool);
      const job = await finished(rewards, t.id, 'judge');
      expect(job).toMatchObject({ state: 'failed', attempts: 3 });
      expect(job.error).toMatch(/^unparseable verdict: no band in the reply/);
      expect(judge.requests).toHaveLength(3);
      expect(await pool.getSignals(t.id)).toEqual([]);
    });

    it('a not-applicable function fails at once (no retries)', async () => {
      const { pool, rewards } = await start(backend.database(), {
        functions: { exact: { plugin: 'rule', params: { kind: 'exact', expected_key: 'answer' } } },
        channels: { train: { functions: ['exact'] } },
        workers,
      });
      const t = await addTrajectory(pool, { metadata: {} });
      const job = await finished(rewards, t.id, 'exact');
      expect(job).toMatchObject({ state: 'failed', attempts: 1 });
      expect(job.errors[0]).toMatchObject({
        retryable: false,
        message: expect.stringMatching(/no expected value/),
      });
    });

    it('runs N jobs at once', async () => {
      let inFlight = 0;
      let most = 0;
      const judge = await judgeServer(() => {
        inFlight++;
        most = Math.max(most, inFlight);
        setTimeout(() => inFlight--, 500);
        return { body: '{"band": 3}', delayMs: 500 };
      });
      const { pool, rewards } = await start(backend.database(), {
        functions: { judge: judgeFn(judge.url) },
        channels: { train: { functions: ['judge'] } },
        workers: { ...workers, concurrency: 3, timeout_ms: 5_000 },
      });
      const ts = await Promise.all(Array.from({ length: 9 }, () => addTrajectory(pool)));
      for (const t of ts) expect((await finished(rewards, t.id, 'judge')).state).toBe('done');
      expect(most).toBe(3);
    });
  });

  describe('reward jobs: versions, late signals, groups', () => {
    it('recomputation with a new version supersedes the current signal and keeps the history', async () => {
      const db = backend.database();
      const judge = await judgeServer((i) => `{"band": ${i === 1 ? 2 : 5}}`);
      const file = (version: string): RewardsConfigFile => ({
        functions: { judge: { ...judgeFn(judge.url), version } },
        channels: { train: { functions: ['judge'], combination: 'judge' } },
        workers,
      });
      const first = await start(db, file('v1'));
      const t = await addTrajectory(first.pool);
      await finished(first.rewards, t.id, 'judge');
      await eventually(async () => (await first.pool.getTrajectory(t.id))!.reward === 0.25);
      await first.rewards.close();
      // The same version is not computed again; a new one is, through recompute.
      const second = await start(db, file('v2'), { pool: first.pool });
      const out = await second.rewards.recompute({ trajectoryId: t.id });
      expect(out).toMatchObject({ trajectories: 1, queued: 1 });
      await eventually(async () => (await second.pool.getTrajectory(t.id))!.reward === 1);
      const history = await second.pool.getSignals(t.id);
      expect(history.filter((s) => s.name === 'judge').map((s) => [s.version, s.value])).toEqual([
        ['v1', 0.25],
        ['v2', 1],
      ]);
      const current = await second.pool.getSignals(t.id, { current: true });
      expect(current.filter((s) => s.name === 'judge').map((s) => s.version)).toEqual(['v2']);
    });

    it('late human feedback (implicit, step-level) is combined again when it arrives', async () => {
      const { pool } = await start(backend.database(), {
        functions: { exact: exactFn },
        channels: {
          train: {
            functions: ['exact'],
            combination: '0.5*exact + 0.5*((mean(user_feedback) + 1) / 2 ?? 0.5)',
          },
        },
        workers,
      });
      const t = await addTrajectory(pool, { answers: ['40', '42'] });
      await eventually(async () => (await pool.getTrajectory(t.id))!.reward === 0.75);
      // What the gateway writes when the user's next message says thanks (packages/core/src/gateway/feedback.ts).
      await pool.addSignals([
        {
          trajectoryId: t.id,
          stepIndex: 1,
          name: 'user_feedback',
          value: 1,
          source: 'human',
          details: { implicit: true, kind: 'thanks' },
        },
      ]);
      await eventually(async () => (await pool.getTrajectory(t.id))!.reward === 1);
      await pool.addSignals([
        {
          trajectoryId: t.id,
          stepIndex: 0,
          name: 'user_feedback',
          value: -1,
          source: 'human',
          details: { implicit: true, kind: 'correction' },
        },
      ]);
      await eventually(async () => (await pool.getTrajectory(t.id))!.reward === 0.75);
      const rewardsWritten = async () =>
        (await pool.getSignals(t.id)).filter((s) => s.name === 'reward').map((s) => s.value);
      // The combination writes the reward before its signal: wait for the signal too.
      await eventually(async () => (await rewardsWritten()).length === 3);
      expect(await rewardsWritten()).toEqual([0.75, 1, 0.75]);
    });

    it('a reward computed while the trajectory was open is computed again when it completes', async () => {
      const { pool, rewards } = await start(backend.database(), {
        functions: { exact: exactFn },
        channels: { train: { functions: ['exact'], combination: 'exact' } },
        workers,
      });
      const t = await addTrajectory(pool, { answers: ['let me see: 41?'], open: true });
      const early = await rewards.computeReward(t.id, { waitMs: 10_000 });
      expect(early).toMatchObject({ status: 'done', reward: 0, functions: { exact: { value: 0 } } });
      expect(t.reward).toBeNull(); // an open trajectory's reward is not written
      await pool.submitSteps(
        [
          newStep({
            trajectoryId: t.id,
            groupId: t.groupId,
            index: 1,
            promptIds: [1, 2],
            responseIds: [3],
            isLast: true,
            messages: [{ role: 'user', content: 'What is six times seven?' }],
            responseText: 'No: 42.',
          }),
        ],
        { channel: 'train', nRollouts: 1 },
      );
      await pool.completeTrajectory(t.id, { reward: null, status: 'complete' });
      await eventually(async () => (await pool.getTrajectory(t.id))!.reward === 1);
      const jobs = await rewards.jobs({ trajectoryId: t.id, kind: 'function', limit: 10 });
      expect(jobs.map((j) => j.reason)).toEqual(['completed', 'compute_reward:open']);
    });

    it('group-relative judge: one call per finished group, one signal per trajectory', async () => {
      const judge = await judgeServer(() => '{"bands": [1, 3, 5]}');
      const { pool, rewards } = await start(backend.database(), {
        functions: { rank: { ...judgeFn(judge.url), plugin: 'judge_group' } },
        channels: { train: { functions: ['rank'], combination: 'rank' } },
        workers,
      });
      const members = [];
      for (let i = 0; i < 3; i++)
        members.push(await addTrajectory(pool, { groupId: 'grp-1', nRollouts: 3, answers: [`${40 + i}`] }));
      const job = await eventually(async () => {
        const [j] = await rewards.jobs({ groupId: 'grp-1', state: 'done', limit: 1 });
        return j;
      });
      expect(job.trajectoryId).toBeNull();
      expect(judge.requests).toHaveLength(1);
      const ordered = [...members].sort((a, b) => (a.id < b.id ? -1 : 1));
      for (const [i, t] of ordered.entries()) {
        await eventually(async () => (await pool.getTrajectory(t.id))!.reward === [0, 0.5, 1][i]);
      }
    });
  });

  describe('reward jobs: restarts', () => {
    it('jobs queued before a restart are run after it (real database)', async () => {
      const db = backend.database();
      const judge = await judgeServer(() => '{"band": 5}');
      const file: RewardsConfigFile = {
        functions: { judge: judgeFn(judge.url) },
        channels: { train: { functions: ['judge'] } },
        workers,
      };
      // A process that queues but runs nothing (e.g. it died before its workers got to the jobs).
      const before = await start(db, file, { concurrency: 0 });
      const ts = [await addTrajectory(before.pool), await addTrajectory(before.pool)];
      await eventually(async () => (await before.rewards.jobs({ state: 'pending', limit: 10 })).length === 2);
      await before.rewards.close();
      await before.pool.close();

      const after = await start(db, file);
      for (const t of ts) expect((await finished(after.rewards, t.id, 'judge')).state).toBe('done');
      expect(judge.requests).toHaveLength(2);
    });

    it('a job whose worker died is taken over after its lease, and the lost attempt counts', async () => {
      const db = backend.database();
      const judge = await judgeServer(() => '{"band": 2}');
      const file: RewardsConfigFile = {
        functions: { judge: judgeFn(judge.url) },
        channels: { train: { functions: ['judge'] } },
        workers,
      };
      const before = await start(db, file, { concurrency: 0 });
      const t = await addTrajectory(before.pool);
      await eventually(async () => (await before.rewards.jobs({ state: 'pending', limit: 1 })).length === 1);
      await before.rewards.close();
      // A worker of another process claims it and dies: its lease runs out.
      const queue = await db.openQueue();
      const [claimed] = await queue.claim('dead-worker', 1, Date.now(), () => 1);
      expect(claimed).toMatchObject({ state: 'running', attempts: 1, worker: 'dead-worker' });
      await queue.close();

      const after = await start(db, file, { pool: before.pool });
      const job = await finished(after.rewards, t.id, 'judge');
      expect(job).toMatchObject({ state: 'done', attempts: 2 });
      expect(job.errors[0]!.message).toMatch(/attempt 1 was lost: its worker \(dead-worker\)/);
    });

    it('trajectories finished while no scheduler ran are scored on start (backfill), or not', async () => {
      const db = backend.database();
      const pool = await db.openPool();
      const early = await addTrajectory(pool);
      await pool.close();
      const file: RewardsConfigFile = {
        functions: { exact: exactFn },
        channels: { train: { functions: ['exact'] } },
        workers,
      };
      const first = await start(db, file);
      expect((await finished(first.rewards, early.id, 'exact')).state).toBe('done');
      await first.rewards.close();
      // Finished while down: the saved cursor makes the next start catch up.
      const late = await addTrajectory(first.pool);
      const second = await start(db, file, { pool: first.pool });
      expect((await finished(second.rewards, late.id, 'exact')).state).toBe('done');
      // Exactly one job each: a restart does not queue done work again.
      expect(await second.rewards.jobs({ trajectoryId: early.id, kind: 'function', limit: 10 })).toHaveLength(
        1,
      );

      const freshDb = backend.database();
      const fresh = await freshDb.openPool();
      const skipped = await addTrajectory(fresh);
      const third = await start(freshDb, { ...file, backfill: false }, { pool: fresh });
      // "From now" is where the scheduler starts, once it has saved its cursor.
      await eventually(async () => (await third.rewards.queue.cursor('scheduler')) !== null);
      const counted = await addTrajectory(fresh);
      expect((await finished(third.rewards, counted.id, 'exact')).state).toBe('done');
      expect(await third.rewards.jobs({ trajectoryId: skipped.id, limit: 10 })).toEqual([]);
    });
  });
}

for (const backend of [sqlite, postgres]) {
  describe.skipIf(backend === postgres && !pgUrl)(backend.name, () => rewardJobTests(backend));
}
