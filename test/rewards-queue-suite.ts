/**
 * The reward job queue's contract (packages/core/src/rewards/job-queue.ts), run against every backend: SQLite and
 * PostgreSQL must agree on states, leases, retries, supersede, dedup, claim order and cursors. Times
 * are explicit numbers: the queue never reads a clock.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { StepwiseError } from '../packages/core/src/domain/index.js';
import type {
  AttemptError,
  JobRequest,
  RewardJob,
  RewardJobQueue,
} from '../packages/core/src/rewards/index.js';

export interface QueueDatabase {
  /** A queue on this database; every call is another instance (its own connection or pool). */
  open(): Promise<RewardJobQueue>;
  /** Drops what the database left behind (queues are closed before). */
  cleanup(): Promise<void>;
}

const T0 = 1_000_000;
const lease = () => 60_000;

function fnJob(trajectoryId: string, fn = 'judge', extra: Partial<JobRequest> = {}): JobRequest {
  return {
    kind: 'function',
    channel: 'train',
    trajectoryId,
    groupId: null,
    function: fn,
    version: 'v1',
    maxAttempts: 3,
    reason: 'completed',
    ...extra,
  };
}

const combineJob = (trajectoryId: string): JobRequest =>
  fnJob(trajectoryId, 'reward', { kind: 'combine', reason: 'signal' });

const attempt = (n: number, at: number, message = 'boom', retryable = true): AttemptError => ({
  attempt: n,
  at,
  message,
  retryable,
});

export function runRewardJobQueueSuite(name: string, database: () => Promise<QueueDatabase>): void {
  describe(`reward job queue (${name})`, () => {
    const cleanups: (() => Promise<void>)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });

    /** A fresh database and a queue on it (more instances via `db.open`, closed afterwards too). */
    async function fresh(): Promise<{ queue: RewardJobQueue; open(): Promise<RewardJobQueue> }> {
      const db = await database();
      cleanups.push(() => db.cleanup());
      const open = async () => {
        const q = await db.open();
        cleanups.push(() => q.close());
        return q;
      };
      return { queue: await open(), open };
    }

    it('queues a pending job, and the same request again reuses it (one pending per kind, function, target)', async () => {
      const { queue } = await fresh();
      const [a] = await queue.enqueue([fnJob('t1')], T0);
      expect(a).toMatchObject({
        created: true,
        job: {
          kind: 'function',
          channel: 'train',
          trajectoryId: 't1',
          groupId: null,
          function: 'judge',
          version: 'v1',
          state: 'pending',
          attempts: 0,
          maxAttempts: 3,
          runAt: T0,
          leaseUntil: null,
          worker: null,
          error: null,
          errors: [],
          result: null,
          reason: 'completed',
          createdAt: T0,
          updatedAt: T0,
          finishedAt: null,
        },
      });
      expect(typeof a!.job.id).toBe('number');
      const [again, other, combine] = await queue.enqueue(
        [fnJob('t1'), fnJob('t1', 'rm'), combineJob('t1')],
        T0 + 1,
      );
      expect(again).toEqual({ job: a!.job, created: false });
      expect(other!.created).toBe(true);
      expect(combine!.created).toBe(true);
      // A pending job takes the version and attempt limit of a later equal request.
      const [bumped] = await queue.enqueue([fnJob('t1', 'judge', { version: 'v2', maxAttempts: 5 })], T0 + 2);
      expect(bumped).toMatchObject({
        created: false,
        job: { id: a!.job.id, version: 'v2', maxAttempts: 5, updatedAt: T0 + 2, state: 'pending' },
      });
      expect(await queue.counts()).toEqual({ pending: 3, running: 0, done: 0, failed: 0, superseded: 0 });
    });

    it('a trajectory and a group of the same name are different targets', async () => {
      const { queue } = await fresh();
      const out = await queue.enqueue(
        [fnJob('x'), fnJob('x', 'judge', { trajectoryId: null, groupId: 'x' }), fnJob('y')],
        T0,
      );
      expect(out.map((o) => o.created)).toEqual([true, true, true]);
      const [group] = await queue.list({ groupId: 'x', limit: 10 });
      expect(group).toMatchObject({ trajectoryId: null, groupId: 'x' });
    });

    it('a function is not queued again for a version that ran, unless forced, new, or computed while open', async () => {
      const { queue } = await fresh();
      const [first] = await queue.enqueue(
        [fnJob('t1'), fnJob('t2', 'judge', { reason: 'compute_reward:open' })],
        T0,
      );
      const claimed = await queue.claim('w', 10, T0, lease);
      expect(claimed).toHaveLength(2);
      // Running: an equal request returns it.
      const [whileRunning] = await queue.enqueue([fnJob('t1')], T0 + 1);
      expect(whileRunning).toMatchObject({ created: false, job: { id: first!.job.id, state: 'running' } });
      for (const j of claimed) await queue.complete(j.id, 'w', { value: 1 }, T0 + 2);
      const [same, forced] = await queue.enqueue(
        [fnJob('t1'), fnJob('t1', 'judge', { force: true })],
        T0 + 3,
      );
      expect(same).toMatchObject({ created: false, job: { id: first!.job.id, state: 'done' } });
      expect(forced).toMatchObject({ created: true, job: { state: 'pending', reason: 'completed' } });
      const [open] = await queue.enqueue([fnJob('t2')], T0 + 3);
      expect(open!.created).toBe(true);
      // Failed counts as ran too; a new version is queued.
      const { queue: q2 } = await fresh();
      await q2.enqueue([fnJob('t3')], T0);
      const [j] = await q2.claim('w', 1, T0, lease);
      await q2.fail(j!.id, 'w', attempt(1, T0 + 1, 'nope', false), T0 + 1);
      expect((await q2.enqueue([fnJob('t3')], T0 + 2))[0]).toMatchObject({
        created: false,
        job: { state: 'failed' },
      });
      expect((await q2.enqueue([fnJob('t3', 'judge', { version: 'v2' })], T0 + 2))[0]!.created).toBe(true);
      // Combinations are queued again whenever none is pending.
      await q2.enqueue([combineJob('t3')], T0);
      const [c] = await q2.claim('w', 1, T0 + 3, lease);
      expect(c!.kind).toBe('combine');
      await q2.complete(c!.id, 'w', {}, T0 + 4);
      expect((await q2.enqueue([combineJob('t3')], T0 + 5))[0]!.created).toBe(true);
    });

    it('unlessCreated skips a request when an earlier one of the call queued a job', async () => {
      const { queue } = await fresh();
      const [fn, combine] = await queue.enqueue(
        [fnJob('t1'), { ...combineJob('t1'), unlessCreated: [0] }],
        T0,
      );
      expect(fn!.created).toBe(true);
      expect(combine).toEqual({ job: fn!.job, created: false });
      const [, again] = await queue.enqueue([fnJob('t1'), { ...combineJob('t1'), unlessCreated: [0] }], T0);
      expect(again).toMatchObject({ created: true, job: { kind: 'combine' } });
    });

    it('claims due jobs by run_at then id, up to the limit, each with its own lease', async () => {
      const { queue } = await fresh();
      await queue.enqueue([fnJob('a'), fnJob('b'), fnJob('c', 'judge')], T0 + 5);
      await queue.enqueue([fnJob('d'), combineJob('e')], T0);
      await queue.enqueue([fnJob('late')], T0 + 1_000);
      expect(await queue.nextDue()).toBe(T0);
      const leases = (job: RewardJob) => (job.kind === 'combine' ? 10 : 1_000);
      const first = await queue.claim('w1', 3, T0 + 10, leases);
      expect(first.map((j) => j.trajectoryId)).toEqual(['d', 'e', 'a']);
      expect(first.map((j) => [j.state, j.attempts, j.worker, j.leaseUntil, j.updatedAt])).toEqual([
        ['running', 1, 'w1', T0 + 1_010, T0 + 10],
        ['running', 1, 'w1', T0 + 20, T0 + 10],
        ['running', 1, 'w1', T0 + 1_010, T0 + 10],
      ]);
      expect((await queue.claim('w2', 10, T0 + 10, lease)).map((j) => j.trajectoryId)).toEqual(['b', 'c']);
      expect(await queue.claim('w2', 10, T0 + 10, lease)).toEqual([]);
      expect(await queue.claim('w2', 0, T0 + 2_000, lease)).toEqual([]);
      expect(await queue.nextDue()).toBe(T0 + 1_000);
      expect(await queue.counts()).toMatchObject({ pending: 1, running: 5 });
    });

    it('never runs two jobs of one target and function at once: a pending twin waits for the running one', async () => {
      const { queue } = await fresh();
      const [first] = await queue.enqueue([fnJob('t1')], T0);
      const [running] = await queue.claim('w', 1, T0, lease);
      const [second] = await queue.enqueue(
        [fnJob('t1', 'judge', { force: true, reason: 'recompute' })],
        T0 + 1,
      );
      expect(second!.created).toBe(true);
      await queue.enqueue([fnJob('t2')], T0 + 2);
      // The twin waits; another target's job is taken.
      expect((await queue.claim('w', 5, T0 + 10, lease)).map((j) => j.trajectoryId)).toEqual(['t2']);
      expect(await queue.nextDue()).toBe(T0 + 1);
      const done = await queue.complete(running!.id, 'w', { value: 0.5 }, T0 + 20);
      expect(done).toMatchObject({
        id: first!.job.id,
        state: 'done',
        result: { value: 0.5 },
        finishedAt: T0 + 20,
      });
      expect(done!.leaseUntil).toBeNull();
      expect((await queue.claim('w', 5, T0 + 30, lease)).map((j) => j.id)).toEqual([second!.job.id]);
    });

    it('complete: only the running job of this worker, with its follow-ups in the same transaction', async () => {
      const { queue } = await fresh();
      await queue.enqueue([fnJob('t1')], T0);
      const [job] = await queue.claim('w', 1, T0, lease);
      expect(await queue.complete(job!.id, 'other', {}, T0 + 1)).toBeNull();
      expect(await queue.complete(9_999, 'w', {}, T0 + 1)).toBeNull();
      const done = await queue.complete(job!.id, 'w', { value: 1, n: [1, 2] }, T0 + 2, [
        combineJob('t1'),
        combineJob('t1'),
      ]);
      expect(done).toMatchObject({ state: 'done', worker: 'w', result: { value: 1, n: [1, 2] } });
      expect(await queue.complete(job!.id, 'w', {}, T0 + 3)).toBeNull();
      const combines = await queue.list({ kind: 'combine', limit: 10 });
      expect(combines).toHaveLength(1);
      expect(combines[0]).toMatchObject({ state: 'pending', trajectoryId: 't1', createdAt: T0 + 2 });
    });

    it('retry: back to pending at runAt with the error recorded; superseded when a twin is pending', async () => {
      const { queue } = await fresh();
      await queue.enqueue([fnJob('t1'), fnJob('t2')], T0);
      const [a, b] = await queue.claim('w', 2, T0, lease);
      expect(await queue.retry(a!.id, 'other', attempt(1, T0), T0 + 100, T0)).toBeNull();
      const retried = await queue.retry(a!.id, 'w', attempt(1, T0 + 1, 'timed out'), T0 + 100, T0 + 1);
      expect(retried).toMatchObject({
        state: 'pending',
        runAt: T0 + 100,
        attempts: 1,
        leaseUntil: null,
        worker: null,
        error: 'timed out',
        errors: [attempt(1, T0 + 1, 'timed out')],
      });
      expect(await queue.claim('w', 5, T0 + 99, lease)).toEqual([]);
      const [again] = await queue.claim('w', 5, T0 + 100, lease);
      expect(again).toMatchObject({ id: a!.id, attempts: 2, state: 'running' });
      // A twin queued while b runs (recompute): b's retry gives way to it.
      const [twin] = await queue.enqueue([fnJob('t2', 'judge', { force: true })], T0 + 2);
      const superseded = await queue.retry(b!.id, 'w', attempt(1, T0 + 3), T0 + 50, T0 + 3);
      expect(superseded).toMatchObject({
        state: 'superseded',
        error: 'boom',
        errors: [attempt(1, T0 + 3)],
        worker: null,
        leaseUntil: null,
        finishedAt: T0 + 3,
      });
      expect((await queue.get(twin!.job.id))!.state).toBe('pending');
    });

    it('fail: the job has failed, its errors are the record', async () => {
      const { queue } = await fresh();
      await queue.enqueue([fnJob('t1')], T0);
      const [job] = await queue.claim('w', 1, T0, lease);
      await queue.retry(job!.id, 'w', attempt(1, T0 + 1), T0 + 2, T0 + 1);
      await queue.claim('w', 1, T0 + 2, lease);
      expect(await queue.fail(job!.id, 'other', attempt(2, T0 + 3), T0 + 3)).toBeNull();
      const failed = await queue.fail(job!.id, 'w', attempt(2, T0 + 3, 'bad key', false), T0 + 3);
      expect(failed).toMatchObject({
        state: 'failed',
        attempts: 2,
        error: 'bad key',
        errors: [attempt(1, T0 + 1), attempt(2, T0 + 3, 'bad key', false)],
        leaseUntil: null,
        finishedAt: T0 + 3,
      });
      expect(await queue.counts()).toEqual({ pending: 0, running: 0, done: 0, failed: 1, superseded: 0 });
      expect(await queue.nextDue()).toBeNull();
    });

    it('release: gives a running job back without counting the attempt; superseded when a twin is pending', async () => {
      const { queue } = await fresh();
      await queue.enqueue([fnJob('t1'), fnJob('t2')], T0);
      const [a, b] = await queue.claim('w', 2, T0, lease);
      await queue.release(a!.id, 'other', T0 + 1);
      expect((await queue.get(a!.id))!.state).toBe('running');
      await queue.release(a!.id, 'w', T0 + 5);
      expect(await queue.get(a!.id)).toMatchObject({
        state: 'pending',
        attempts: 0,
        runAt: T0 + 5,
        worker: null,
        leaseUntil: null,
        updatedAt: T0 + 5,
      });
      await queue.enqueue([fnJob('t2', 'judge', { force: true })], T0 + 6);
      await queue.release(b!.id, 'w', T0 + 7);
      expect(await queue.get(b!.id)).toMatchObject({ state: 'superseded', finishedAt: T0 + 7 });
    });

    it('a lapsed lease: the job is claimed again and the lost attempt counts, fails at its limit, or gives way to a twin', async () => {
      const { queue, open } = await fresh();
      await queue.enqueue([fnJob('t1'), fnJob('t2'), fnJob('t3', 'judge', { maxAttempts: 1 })], T0);
      const [a, b, c] = await queue.claim('dead', 3, T0, () => 100);
      const [twin] = await queue.enqueue([fnJob('t2', 'judge', { force: true })], T0 + 1);
      const other = await open();
      // Before the lease passes nothing is lost.
      expect(await other.claim('alive', 5, T0 + 100, lease)).toEqual([]);
      const taken = await other.claim('alive', 5, T0 + 101, () => 1_000);
      expect(taken.map((j) => j.id)).toEqual([a!.id, twin!.job.id]);
      expect(taken[0]).toMatchObject({
        state: 'running',
        worker: 'alive',
        attempts: 2,
        leaseUntil: T0 + 1_101,
        error: 'attempt 1 was lost: its worker (dead) stopped before finishing',
        errors: [
          {
            attempt: 1,
            at: T0 + 101,
            message: 'attempt 1 was lost: its worker (dead) stopped before finishing',
            retryable: true,
          },
        ],
      });
      expect(await queue.get(b!.id)).toMatchObject({ state: 'superseded', worker: null });
      expect(await queue.get(c!.id)).toMatchObject({ state: 'failed', attempts: 1, finishedAt: T0 + 101 });
      // The dead worker's late answer is refused.
      expect(await queue.complete(a!.id, 'dead', {}, T0 + 102)).toBeNull();
      expect(await queue.complete(a!.id, 'alive', {}, T0 + 102)).toMatchObject({
        state: 'done',
        attempts: 2,
      });
    });

    it('reads: get, getMany in the order asked, list with filters and pages newest first, counts', async () => {
      const { queue } = await fresh();
      const out = await queue.enqueue(
        [
          fnJob('t1'),
          fnJob('t1', 'rm'),
          fnJob('t2', 'judge', { channel: 'val' }),
          fnJob('g1', 'rank', { trajectoryId: null, groupId: 'g1' }),
          combineJob('t1'),
        ],
        T0,
      );
      const ids = out.map((o) => o.job.id);
      expect(await queue.get(ids[1]!)).toEqual(out[1]!.job);
      expect(await queue.get(123_456)).toBeNull();
      expect((await queue.getMany([ids[3]!, 123_456, ids[0]!])).map((j) => j.id)).toEqual([ids[3], ids[0]]);
      expect(await queue.getMany([])).toEqual([]);
      const listed = async (filter: Omit<Parameters<RewardJobQueue['list']>[0], 'limit'>, limit = 10) =>
        (await queue.list({ ...filter, limit })).map((j) => j.id);
      expect(await listed({})).toEqual([...ids].reverse());
      expect(await listed({}, 2)).toEqual([ids[4], ids[3]]);
      expect(await listed({ beforeId: ids[3]! }, 2)).toEqual([ids[2], ids[1]]);
      expect(await listed({ trajectoryId: 't1' })).toEqual([ids[4], ids[1], ids[0]]);
      expect(await listed({ trajectoryId: 't1', kind: 'function' })).toEqual([ids[1], ids[0]]);
      expect(await listed({ trajectoryId: 't1', function: 'judge' })).toEqual([ids[0]]);
      expect(await listed({ groupId: 'g1' })).toEqual([ids[3]]);
      expect(await listed({ channel: 'val' })).toEqual([ids[2]]);
      await queue.claim('w', 1, T0, lease);
      expect(await listed({ state: 'running' })).toEqual([ids[0]]);
      expect(await listed({ state: 'pending', trajectoryId: 't1' })).toEqual([ids[4], ids[1]]);
      expect(await queue.counts()).toEqual({ pending: 4, running: 1, done: 0, failed: 0, superseded: 0 });
    });

    it('cursors: advance queues jobs and moves the cursor in one transaction, never backwards', async () => {
      const { queue, open } = await fresh();
      expect(await queue.cursor('scheduler')).toBeNull();
      const [o] = await queue.advance('scheduler', 7, [fnJob('t1')], T0);
      expect(o!.created).toBe(true);
      expect(await queue.cursor('scheduler')).toBe(7);
      expect(await queue.advance('scheduler', 3, [fnJob('t1')], T0 + 1)).toMatchObject([{ created: false }]);
      expect(await queue.cursor('scheduler')).toBe(7);
      await queue.advance('scheduler', 2 ** 40, [], T0 + 2);
      await queue.advance('other', 1, [], T0 + 2);
      const again = await open();
      expect(await again.cursor('scheduler')).toBe(2 ** 40);
      expect(await again.cursor('other')).toBe(1);
      expect(await again.counts()).toMatchObject({ pending: 1 });
    });

    it('a closed queue refuses work with a retryable 503', async () => {
      const { open } = await fresh();
      const queue = await open();
      await queue.close();
      await queue.close();
      const refused = await queue.enqueue([fnJob('t1')], T0).catch((e: unknown) => e);
      expect(refused).toBeInstanceOf(StepwiseError);
      expect(refused).toMatchObject({ status: 503 });
    });

    it('two queue instances claiming concurrently: every job is claimed exactly once, none lost', async () => {
      const { queue, open } = await fresh();
      const other = await open();
      const total = 240;
      const requests = Array.from({ length: total }, (_, i) => fnJob(`t${i}`, i % 2 ? 'judge' : 'rm'));
      for (let i = 0; i < total; i += 60) await queue.enqueue(requests.slice(i, i + 60), T0);
      const claims = new Map<number, string[]>();
      // Four claimers per instance, each claiming small batches and finishing what it took.
      const claimer = async (q: RewardJobQueue, worker: string) => {
        let now = T0;
        for (;;) {
          const jobs = await q.claim(worker, 7, ++now, lease);
          if (jobs.length === 0) return;
          for (const j of jobs) claims.set(j.id, [...(claims.get(j.id) ?? []), worker]);
          for (const j of jobs) expect(await q.complete(j.id, worker, { by: worker }, now)).not.toBeNull();
        }
      };
      await Promise.all([queue, other].flatMap((q, i) => [0, 1, 2, 3].map((k) => claimer(q, `w${i}-${k}`))));
      expect(claims.size).toBe(total);
      expect([...claims.values()].every((workers) => workers.length === 1)).toBe(true);
      expect(await queue.counts()).toEqual({ pending: 0, running: 0, done: total, failed: 0, superseded: 0 });
      // Both instances took part.
      const byInstance = new Set([...claims.values()].map(([w]) => w!.slice(0, 2)));
      expect(byInstance).toEqual(new Set(['w0', 'w1']));
    });

    it('two queue instances queueing the same jobs concurrently: one pending job per target', async () => {
      const { queue, open } = await fresh();
      const other = await open();
      const requests = Array.from({ length: 50 }, (_, i) =>
        fnJob(`t${i % 25}`, 'judge', { version: `v${i}` }),
      );
      const outcomes = await Promise.all(
        [queue, other, queue, other].map((q, k) => q.enqueue(k % 2 ? [...requests].reverse() : requests, T0)),
      );
      expect(outcomes.flat().filter((o) => o.created)).toHaveLength(25);
      expect(await queue.counts()).toMatchObject({ pending: 25 });
      const pending = await queue.list({ state: 'pending', limit: 100 });
      expect(new Set(pending.map((j) => j.trajectoryId)).size).toBe(25);
    });
  });
}
