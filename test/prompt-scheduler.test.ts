import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import { versionReport } from '../packages/core/src/pool/report.js';
import { WorkerPool } from '../packages/core/src/pool/worker-pool.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { testServers } from './support/test-servers.js';

/*
 * The prompt scheduler (issue 42, pool/schedule.ts) on every store: prompts registered in order,
 * handed out under the channel's policy, never twice while in flight however many producers ask at
 * once, freed when their group settles, and sorted into difficulty pools by their latest pass rate.
 */

interface Harness {
  pool: PoolOps;
  cleanup(): Promise<void>;
}

const backends: [string, () => Promise<Harness>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-schedule-'));
      const store = await openSqliteStore({ path: join(dir, 'pool.db') });
      return {
        pool: poolOps(store),
        cleanup: async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'SQLite on its worker thread',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-schedule-'));
      const pool = await WorkerPool.open({ path: join(dir, 'pool.db') });
      return {
        pool,
        cleanup: async () => {
          await pool.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
];
if (pgUrl)
  backends.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_schedule');
      const store = await openPostgresStore({ url: pgUrl!, schema, poolSize: 8 });
      return {
        pool: poolOps(store),
        cleanup: async () => {
          await store.close();
          await dropSchema(schema);
        },
      };
    },
  ]);

for (const [name, open] of backends) {
  describe(`prompt scheduler: ${name}`, () => {
    let h: Harness;
    let pool: PoolOps;
    let now = 1_000_000;
    const tick = (ms = 1) => (now += ms);
    beforeEach(async () => {
      h = await open();
      pool = h.pool;
    });
    afterEach(() => h.cleanup());

    const register = (ids: string[], taskSet = 'default') =>
      pool.registerPrompts(
        'train',
        ids.map((taskId) => ({ taskId, taskSet })),
        tick(),
      );
    const next = async (count: number) =>
      (await pool.nextPrompts('train', count, tick())).map((p) => p.taskId);
    const schedule = (patch: Record<string, unknown>) =>
      pool.setChannelConfig('train', { schedule: patch } as never, tick());

    /** One group of `rewards.length` rollouts of a task, each completed with its reward. */
    async function rollOut(taskId: string, rewards: number[]): Promise<void> {
      const groupId = `g-${randomBytes(6).toString('hex')}`;
      const ids = rewards.map(() => `t-${randomBytes(8).toString('hex')}`);
      for (const id of ids)
        await pool.createTrajectory(
          { id, groupId, channel: 'train', nRollouts: rewards.length, metadata: { task_id: taskId } },
          tick(),
        );
      for (const [i, id] of ids.entries())
        await pool.completeTrajectory(id, { reward: rewards[i]!, status: 'complete' }, tick());
    }
    const pools = async () =>
      Object.fromEntries((await pool.listPrompts('train', now)).map((p) => [p.taskId, p.pool]));

    it('registers prompts in order; registering again keeps places and history and adds only new ones', async () => {
      expect(await register(['a', 'b', 'c'])).toEqual({ added: 3, total: 3 });
      await schedule({ n_rollouts: 2 });
      expect(await next(1)).toEqual(['a']);
      await rollOut('a', [1, 0]);
      expect(await register(['d', 'a', 'b'])).toEqual({ added: 1, total: 4 });
      const listed = await pool.listPrompts('train', now);
      expect(listed.map((p) => [p.taskId, p.position])).toEqual([
        ['a', 0],
        ['b', 1],
        ['c', 2],
        ['d', 3],
      ]);
      expect(listed[0]).toMatchObject({
        groups: 1,
        attempts: 2,
        passes: 1,
        lastPassRate: 0.5,
        lastMean: 0.5,
      });
      expect(listed[0]!.lastStd).toBeCloseTo(0.5, 12);
    });

    it('in_order: a round at a time, skipping prompts in flight; a settled group frees its prompt', async () => {
      await register(['p0', 'p1', 'p2']);
      await schedule({ n_rollouts: 2 });
      const handed = await pool.nextPrompts('train', 2, tick());
      expect(handed).toEqual([
        { taskId: 'p0', taskSet: 'default', nRollouts: 2, pool: 'unseen' },
        { taskId: 'p1', taskSet: 'default', nRollouts: 2, pool: 'unseen' },
      ]);
      expect(await next(2)).toEqual(['p2']);
      expect(await next(1)).toEqual([]);
      await rollOut('p1', [1, 1]);
      expect(await next(3)).toEqual(['p1']);
      // A group that settles without a scored rollout frees its prompt and leaves its history alone.
      const id = `t-${randomBytes(8).toString('hex')}`;
      await pool.createTrajectory(
        { id, groupId: 'g-failed', channel: 'train', nRollouts: 1, metadata: { task_id: 'p0' } },
        tick(),
      );
      await pool.completeTrajectory(id, { reward: null, status: 'aborted' }, tick());
      expect(await next(3)).toEqual(['p0']);
      expect((await pool.listPrompts('train', now))[0]).toMatchObject({ taskId: 'p0', groups: 0, handed: 2 });
    });

    it('a claim whose producer died times out and the prompt is handed out again', async () => {
      await register(['only']);
      await schedule({ claim_timeout_ms: 1_000 });
      expect(await next(1)).toEqual(['only']);
      expect(await next(1)).toEqual([]);
      tick(1_001);
      expect(await next(1)).toEqual(['only']);
    });

    it('concurrent producers never get a prompt twice beyond what they asked for', async () => {
      const ids = Array.from({ length: 20 }, (_, i) => `task-${String(i).padStart(2, '0')}`);
      await register(ids);
      for (const policy of ['in_order', 'uniform', 'difficulty']) {
        await schedule({ policy, claim_timeout_ms: 1 });
        tick(10); // every earlier claim has timed out
        const asked = await Promise.all(
          Array.from({ length: 8 }, () => pool.nextPrompts('train', 3, now + 5)),
        );
        const handed = asked.flat().map((p) => p.taskId);
        expect(asked.every((a) => a.length <= 3)).toBe(true);
        expect(handed.length, policy).toBe(20);
        expect(new Set(handed).size, policy).toBe(20);
      }
    });

    it('difficulty: prompts move between pools as their pass rate crosses the thresholds; retired ones are re-tested every N versions', async () => {
      await register(['easy', 'hard', 'mid', 'new']);
      await schedule({ policy: 'difficulty', n_rollouts: 4, retest_every: 2 });
      expect(new Set(await next(4))).toEqual(new Set(['easy', 'hard', 'mid', 'new']));
      await rollOut('easy', [1, 1, 1, 1]);
      await rollOut('hard', [0, 0, 0, 0]);
      await rollOut('mid', [1, 0, 1, 0]);
      expect(await pools()).toEqual({ easy: 'easy', hard: 'hard', mid: 'learnable', new: 'unseen' });
      // Retired prompts are not handed out; the learnable one is ('new' is still in flight).
      expect(await next(4)).toEqual(['mid']);
      await rollOut('mid', [1, 1, 1, 1]);
      expect((await pools()).mid).toBe('easy');
      expect(await next(4)).toEqual([]);
      // Two versions on, the retired prompts are due for a re-test.
      await pool.setPolicyVersion(2, tick());
      expect(await pools()).toMatchObject({ easy: 'retest', hard: 'retest', mid: 'retest' });
      expect(new Set(await next(4))).toEqual(new Set(['easy', 'hard', 'mid']));
      await rollOut('hard', [1, 0, 0, 0]);
      expect((await pools()).hard).toBe('learnable');
      // Thresholds are settings: a pass rate of 1/4 is too hard once hard_at_most is 0.25.
      await schedule({ hard_at_most: 0.25 });
      expect((await pools()).hard).toBe('hard');
    });

    it('difficulty: a pool whose weight is 0 is never drawn', async () => {
      await register(['seen', 'fresh']);
      await schedule({ policy: 'difficulty', n_rollouts: 2 });
      expect(await next(1)).toEqual(['seen']);
      await rollOut('seen', [1, 0]);
      await schedule({ weights: { unseen: 0, learnable: 1, retest: 1 } });
      expect(await next(2)).toEqual(['seen']);
    });

    it('dynamic sampling: the admission budget grows with the share of groups curation drops, so drops are backfilled ahead', async () => {
      await pool.setChannelConfig(
        'train',
        { max_staleness: 0, batch_groups: 2, curation: { zero_variance: 'drop' } },
        tick(),
      );
      /** Starts a group of two rollouts; null when admission refuses its first one. */
      const start = async (rewards: [number, number]) => {
        const groupId = `g-${randomBytes(6).toString('hex')}`;
        const ids = [0, 1].map(() => `t-${randomBytes(8).toString('hex')}`);
        try {
          for (const id of ids)
            await pool.createTrajectory(
              { id, groupId, channel: 'train', nRollouts: 2, metadata: {} },
              tick(),
            );
        } catch (error) {
          expect((error as { code?: string }).code).toBe('staleness_budget');
          return null;
        }
        for (const [i, id] of ids.entries())
          await pool.completeTrajectory(id, { reward: rewards[i]!, status: 'complete' }, tick());
        return groupId;
      };
      const lease = () =>
        pool.leaseBatch(
          { channel: 'train', batchSize: 2, nRollouts: null, maxStaleness: 0, consumer: 'c', ttlMs: 60_000 },
          tick(),
        );
      // No drop seen yet: (0 + 1) × 2 groups, as without curation.
      expect(await start([1, 1])).not.toBeNull();
      expect(await start([0, 0])).not.toBeNull();
      expect(await start([1, 0])).toBeNull();
      // Both were all-equal: curation drops them at lease time (2 dropped, 0 kept: rate 2 / 4).
      expect(await lease()).toBeNull();
      // The budget is now ⌈2 / (1 − 0.5)⌉ = 4: two groups beyond the plain budget are admitted.
      for (let i = 0; i < 4; i++) expect(await start([1, 0])).not.toBeNull();
      expect(await start([1, 0])).toBeNull();
    });

    it('mixture: task sets are drawn by weight; a set of weight 0, or not named, is never handed out', async () => {
      const ids = (prefix: string) => Array.from({ length: 6 }, (_, i) => `${prefix}${i}`);
      await register(ids('m'), 'math');
      await register(ids('c'), 'code');
      await register(['x0'], 'other');
      await schedule({
        claim_timeout_ms: 1,
        mixture: { math: { weight: 1, min_share: 0 }, code: { weight: 0, min_share: 0 } },
      });
      expect(await next(10)).toEqual(ids('m'));
      await schedule({
        claim_timeout_ms: 1,
        mixture: { math: { weight: 1, min_share: 0 }, code: { weight: 3, min_share: 0 } },
      });
      tick(10);
      // Twelve asked, twelve handed: every prompt of both sets once, none of `other`.
      const both = await next(13);
      expect(both.sort()).toEqual([...ids('c'), ...ids('m')].sort());
    });

    it('mixture: every leased batch holds each task set its minimum share, and a lease waits for it', async () => {
      await register(['m1', 'm2', 'm3', 'm4'], 'math');
      await register(['c1', 'c2'], 'code');
      await pool.setChannelConfig(
        'train',
        {
          schedule: { mixture: { math: { weight: 1, min_share: 0.5 }, code: { weight: 1, min_share: 0.5 } } },
        },
        tick(),
      );
      const groupOf = new Map<string, string>();
      const ready = async (taskId: string) => {
        const groupId = `g-${taskId}`;
        groupOf.set(groupId, taskId);
        const id = `t-${randomBytes(8).toString('hex')}`;
        await pool.createTrajectory(
          { id, groupId, channel: 'train', nRollouts: 1, metadata: { task_id: taskId } },
          tick(),
        );
        await pool.completeTrajectory(id, { reward: 1, status: 'complete' }, tick());
      };
      const lease = async () => {
        const leased = await pool.leaseBatch(
          {
            channel: 'train',
            batchSize: 2,
            nRollouts: null,
            maxStaleness: null,
            consumer: 'c',
            ttlMs: 60_000,
          },
          tick(),
        );
        return leased ? leased.groups.map((g) => groupOf.get(g.group.id)).sort() : null;
      };
      for (const t of ['m1', 'm2', 'm3', 'c1']) await ready(t);
      // Queue order is m1, m2, m3, c1: the batch takes m1 and skips to c1 for code's share.
      expect(await lease()).toEqual(['c1', 'm1']);
      // Math alone is ready: no batch holds code's share, so the lease waits (nothing leased).
      expect(await lease()).toBeNull();
      await ready('c2');
      expect(await lease()).toEqual(['c2', 'm2']);
    });

    it('reports per policy version: prompts handed, groups ready and dropped by reason, batch fill time', async () => {
      await register(['a', 'b', 'c']);
      await pool.setChannelConfig('train', { curation: { zero_variance: 'drop' } }, tick());
      expect(await next(2)).toEqual(['a', 'b']);
      await rollOut('a', [1, 0]);
      await rollOut('b', [1, 1]);
      const lease = (askedAt: number) =>
        pool.leaseBatch(
          {
            channel: 'train',
            batchSize: 1,
            nRollouts: null,
            maxStaleness: null,
            consumer: 'c',
            ttlMs: 60_000,
            askedAt,
          },
          now,
        );
      tick(5);
      expect(await lease(now - 5)).not.toBeNull();
      await pool.setPolicyVersion(1, tick());
      expect(await next(1)).toEqual(['c']);
      tick();
      expect(await lease(now)).toBeNull(); // b: all-equal, dropped; nothing else ready
      expect(await versionReport((q) => pool.readEvents(q), 'train')).toEqual([
        {
          version: 0,
          prompts_handed: 2,
          groups_ready: 2,
          groups_dropped: {},
          batches_leased: 1,
          batch_fill_ms: { p50: 5, max: 5 },
        },
        {
          version: 1,
          prompts_handed: 1,
          groups_ready: 0,
          groups_dropped: { zero_variance: 1 },
          batches_leased: 0,
          batch_fill_ms: null,
        },
      ]);
    });

    it("a producer that names its task set is handed that set's prompts only", async () => {
      await register(['x1', 'x2'], 'xs');
      await register(['y1'], 'ys');
      const of = async (set: string) =>
        (await pool.nextPrompts('train', 5, tick(), set)).map((p) => p.taskId);
      expect(await of('ys')).toEqual(['y1']);
      expect(await of('ys')).toEqual([]);
      expect(await of('xs')).toEqual(['x1', 'x2']);
    });

    it('refuses a count out of range, naming it, and hands out nothing', async () => {
      await register(['x']);
      await expect(pool.nextPrompts('train', 0, tick())).rejects.toThrow(/^count: must be an integer/);
      await expect(pool.nextPrompts('train', 257, tick())).rejects.toThrow(/^count/);
      expect(await next(1)).toEqual(['x']);
    });
  });
}

// biome-ignore lint/suspicious/noExplicitAny: a JSON answer, read field by field below
type Json = Record<string, any>;

describe('prompt scheduler over HTTP', () => {
  const { serve } = testServers('schedule-http', {
    apiKeys: ['runner-key-0123456789:runner', 'agent-key-0123456789:agent', 'trainer-key-0123456789:trainer'],
  });
  const call = async (url: string, method: string, key: string, body?: unknown) => {
    const res = await fetch(url, {
      method,
      headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, json: (await res.json()) as Json };
  };

  it('registers, hands out and lists prompts; refuses a bad body naming the field, and an agent key', async () => {
    const server = await serve();
    const base = `${server.url}/v1/channels/train/prompts`;
    const bad = await call(base, 'PUT', 'runner-key-0123456789', { prompts: [{ task_id: '' }] });
    expect(bad.status).toBe(400);
    expect(bad.json.error.message).toMatch(/^prompts\.0\.task_id/);
    expect((await call(base, 'PUT', 'agent-key-0123456789', { prompts: [{ task_id: 'a' }] })).status).toBe(
      403,
    );
    const put = await call(base, 'PUT', 'runner-key-0123456789', {
      prompts: [{ task_id: 'a' }, { task_id: 'b', task_set: 'math' }],
    });
    expect(put.json).toEqual({ channel: 'train', added: 2, total: 2 });
    expect((await call(`${base}/next`, 'POST', 'runner-key-0123456789', { count: 0 })).status).toBe(400);
    const next = await call(`${base}/next`, 'POST', 'runner-key-0123456789', { count: 5 });
    expect(next.status).toBe(200);
    expect(next.json.prompts).toEqual([
      { task_id: 'a', task_set: 'default', n_rollouts: 1, pool: 'unseen' },
      { task_id: 'b', task_set: 'math', n_rollouts: 1, pool: 'unseen' },
    ]);
    const listed = await call(base, 'GET', 'trainer-key-0123456789');
    expect(listed.json).toMatchObject({ total: 2, in_flight: 2, pools: { unseen: 2 } });
    expect(listed.json.prompts[1]).toMatchObject({ task_id: 'b', position: 1, handed: 1, in_flight: true });
    const report = await call(`${server.url}/v1/channels/train/report`, 'GET', 'trainer-key-0123456789');
    expect(report.json.versions).toEqual([
      {
        version: 0,
        prompts_handed: 2,
        groups_ready: 0,
        groups_dropped: {},
        batches_leased: 0,
        batch_fill_ms: null,
      },
    ]);
  });
});
