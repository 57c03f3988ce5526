import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import type { SampleResult } from '../runner.js';
import { type RolloutJobData, rolloutJobId, rolloutJobKey } from './jobs.js';
import { AttemptSuperseded, type JobSettings, type QueuedRollout, RolloutQueue } from './queue.js';

/*
 * The rollout queue's own rules against real PostgreSQL ($STEPWISE_TEST_PG_URL), a fresh schema per
 * test, dropped after it: claims, leases, retries and one result per job. No sandbox, no gateway:
 * test/gym-distributed.test.ts runs the queue end to end with workers.
 */

const PG_URL = process.env.STEPWISE_TEST_PG_URL;
/** Jobs that no test's lease or delay could release by accident. */
const LONG: JobSettings = { leaseSeconds: 3_600, retryLimit: 2, retryDelaySeconds: 0 };

function jobs(runId: string, n: number): QueuedRollout[] {
  return Array.from({ length: n }, (_, sample) => {
    const groupId = `${runId}.task`;
    const data: RolloutJobData = {
      v: 1,
      runId,
      taskId: 'task',
      taskSha256: '0'.repeat(64),
      sample,
      seed: sample,
      groupId,
      nRollouts: n,
      gatewayUrl: 'http://127.0.0.1:9',
      model: 'sim-qwen3',
      agent: { kind: 'builtin' },
      sampleTimeoutMs: 1_000,
    };
    return { id: rolloutJobId(runId, groupId, 'task', sample), key: rolloutJobKey(groupId, sample), data };
  });
}

function result(trajectoryUid: string, score: number): SampleResult {
  return {
    taskId: 'task',
    category: 'test',
    sample: 0,
    groupId: 'run.task',
    trajectoryUid,
    status: 'complete',
    score,
    code: score,
    rubric: null,
    verifierFailed: false,
    agent: 'finished',
    reason: null,
    toolCalls: 1,
    toolErrors: 0,
    durationMs: 5,
  };
}

/** Polls `probe` until it gives a value; fails after `ms` (a bound, not a measurement). */
async function eventually<T>(what: string, probe: () => Promise<T | null>, ms = 20_000): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== null) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(100);
  }
}

describe.skipIf(!PG_URL)('rollout queue (PostgreSQL)', () => {
  const schemas: string[] = [];
  const queues: RolloutQueue[] = [];

  const open = async (schema: string) => {
    const queue = await RolloutQueue.open({ url: PG_URL!, schema, maxConnections: 4 });
    queues.push(queue);
    return queue;
  };
  const fresh = async () => {
    const schema = `stepwise_rollq_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    return open(schema);
  };

  afterEach(async () => {
    await Promise.all(queues.splice(0).map((q) => q.close()));
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    try {
      for (const schema of schemas.splice(0)) await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } finally {
      await client.end();
    }
  });

  it('processes that open a fresh schema at once all get it, with nothing enqueued twice', async () => {
    const schema = `stepwise_rollq_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    const [a, b, c, d] = await Promise.all([open(schema), open(schema), open(schema), open(schema)]);
    const run = jobs('twice', 40);
    const [first, second] = await Promise.all([a!.enqueue(run, LONG), b!.enqueue([...run].reverse(), LONG)]);
    expect(first.created + second.created).toBe(40);
    expect(first.created + first.existing).toBe(40);
    expect(await c!.enqueue(run, LONG)).toEqual({ created: 0, existing: 40 });
    const listed = await d!.jobsOfRun('twice');
    expect(listed.map((j) => j.id).sort()).toEqual(run.map((j) => j.id).sort());
    expect(listed.every((j) => j.state === 'created' && j.retryCount === 0)).toBe(true);
    expect(await d!.existing([run[0]!.id, rolloutJobId('other', 'g', 't', 0)])).toEqual(
      new Set([run[0]!.id]),
    );
  });

  it('concurrent fetchers never get the same job, and a leased job is not handed out again', async () => {
    const first = await fresh();
    const others = await Promise.all([open(first.schema), open(first.schema)]);
    const run = jobs('claims', 60);
    await first.enqueue(run, LONG);
    const claimed: string[] = [];
    // Twelve fetch loops over three pools, until the queue has nothing left to hand out.
    const loop = async (queue: RolloutQueue) => {
      for (let job = await queue.fetch(); job; job = await queue.fetch()) {
        expect(job).toMatchObject({ retryCount: 0, retryLimit: 2, leaseSeconds: 3_600 });
        claimed.push(job.id);
      }
    };
    await Promise.all([first, ...others].flatMap((q) => [loop(q), loop(q), loop(q), loop(q)]));
    expect(claimed).toHaveLength(60);
    expect(claimed.sort()).toEqual(run.map((j) => j.id).sort());
    expect(await first.fetch()).toBeNull();
    expect((await first.jobsOfRun('claims')).every((j) => j.state === 'active')).toBe(true);
    expect(await first.ended(run.map((j) => j.id))).toEqual([]);
  });

  it('a stale completion after lease expiry and re-claim changes nothing: one result per job', async () => {
    const queue = await fresh();
    const [job] = jobs('stale', 1);
    await queue.enqueue([job!], { leaseSeconds: 1, retryLimit: 2, retryDelaySeconds: 0 });
    const a = await queue.fetch();
    expect(a).toMatchObject({ id: job!.id, retryCount: 0 });
    const attemptA = { trajectoryUid: 'traj-a', baseUrl: 'http://gw/a', retryCount: 0, worker: 'a' };
    await queue.recordAttempt(job!.id, attemptA);

    // A's lease runs out while it still runs; the next fetch fails the job over and claims it again.
    const b = await eventually('the re-claim', () => queue.fetch());
    expect(b).toMatchObject({ id: job!.id, retryCount: 1 });
    expect((await queue.takeOver(job!.id)).map((x) => [x.trajectoryUid, x.abandoned])).toEqual([
      ['traj-a', true],
    ]);
    const attemptB = { trajectoryUid: 'traj-b', baseUrl: 'http://gw/b', retryCount: 1, worker: 'b' };
    await queue.recordAttempt(job!.id, attemptB);

    // A finishes late, while B holds the job: it can neither record, complete nor fail it.
    await expect(queue.recordResult(job!.id, attemptA, result('traj-a', 0))).rejects.toThrow(
      AttemptSuperseded,
    );
    expect(await queue.complete(job!.id, result('traj-a', 0), 0)).toBe(false);
    expect(await queue.fail(job!.id, 'stale failure', 0)).toBe(false);
    expect(await queue.jobsOfRun('stale')).toEqual([{ id: job!.id, state: 'active', retryCount: 1 }]);

    await queue.recordResult(job!.id, attemptB, result('traj-b', 1));
    expect(await queue.complete(job!.id, result('traj-b', 1), 1)).toBe(true);
    // Once completed, no completion changes the job, fenced or not.
    expect(await queue.complete(job!.id, result('traj-a', 0), 0)).toBe(false);
    expect(await queue.complete(job!.id, result('traj-a', 0))).toBe(false);
    expect(await queue.ended([job!.id])).toEqual([
      { id: job!.id, state: 'completed', output: result('traj-b', 1), retryCount: 1 },
    ]);
    expect(await queue.results([job!.id])).toEqual(new Map([[job!.id, result('traj-b', 1)]]));
    expect(await queue.fetch()).toBeNull();
  });

  it('a failed attempt waits its retry delay before another may start', async () => {
    const queue = await fresh();
    const [job] = jobs('delayed', 1);
    await queue.enqueue([job!], { leaseSeconds: 3_600, retryLimit: 2, retryDelaySeconds: 3_600 });
    expect(await queue.fetch()).toMatchObject({ id: job!.id, retryCount: 0 });
    expect(await queue.fail(job!.id, 'gateway down', 0)).toBe(true);
    expect(await queue.jobsOfRun('delayed')).toEqual([{ id: job!.id, state: 'retry', retryCount: 0 }]);
    expect(await queue.fetch()).toBeNull();
    expect(await queue.ended([job!.id])).toEqual([]);
    // Only an active job fails: this one is waiting.
    expect(await queue.fail(job!.id, 'again')).toBe(false);
  });

  it('fail goes to a retry after the delay, and at the retry limit the job has failed', async () => {
    const queue = await fresh();
    const [job] = jobs('failing', 1);
    await queue.enqueue([job!], { leaseSeconds: 3_600, retryLimit: 1, retryDelaySeconds: 1 });
    expect(await queue.fetch()).toMatchObject({ id: job!.id, retryCount: 0, retryLimit: 1 });
    const failedAt = Date.now();
    expect(await queue.fail(job!.id, 'sandbox down', 0)).toBe(true);
    const retry = await eventually('the retry', () => queue.fetch());
    // Not before its delay (the database's clock decides; this one only bounds it from below).
    expect(Date.now() - failedAt).toBeGreaterThanOrEqual(900);
    expect(retry).toMatchObject({ id: job!.id, retryCount: 1, retryLimit: 1 });
    expect(await queue.fail(job!.id, 'sandbox still down', 1)).toBe(true);
    expect(await queue.ended([job!.id])).toEqual([
      { id: job!.id, state: 'failed', output: { message: 'sandbox still down' }, retryCount: 1 },
    ]);
    expect(await queue.fetch()).toBeNull();
    expect(await queue.fail(job!.id, 'once more', 1)).toBe(false);
  });

  it('an expired lease is failed over to a retry, and past the retry limit the job fails', async () => {
    const queue = await fresh();
    const coordinator = await open(queue.schema);
    const [job] = jobs('expiring', 1);
    await queue.enqueue([job!], { leaseSeconds: 1, retryLimit: 1, retryDelaySeconds: 0 });
    expect(await queue.fetch()).toMatchObject({ id: job!.id, retryCount: 0, leaseSeconds: 1 });
    // Its worker dies: a fetch after the lease fails the job over and claims the retry.
    const retry = await eventually('the retry', () => queue.fetch());
    expect(retry).toMatchObject({ id: job!.id, retryCount: 1 });
    // The retry's worker dies too, and no worker asks for work: the coordinator's look for ended
    // jobs fails it for good once that lease has run out.
    const [ended] = await eventually('the failure', async () => {
      const found = await coordinator.ended([job!.id]);
      return found.length > 0 ? found : null;
    });
    expect(ended).toMatchObject({ id: job!.id, state: 'failed', retryCount: 1 });
    expect((ended!.output as { message: string }).message).toMatch(/attempt 2 outlived its lease of 1 s/);
    expect(await queue.fetch()).toBeNull();
    // The dead attempt's completion arrives after all: the job has ended, nothing changes.
    expect(await queue.complete(job!.id, result('late', 1), 1)).toBe(false);
    expect(await coordinator.jobsOfRun('expiring')).toEqual([
      { id: job!.id, state: 'failed', retryCount: 1 },
    ]);
  });

  it('close may be called twice', async () => {
    const queue = await fresh();
    await queue.close();
    await queue.close();
    await expect(queue.fetch()).rejects.toThrow();
  });
});
