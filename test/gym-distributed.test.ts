import { type ChildProcess, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import {
  enqueueRun,
  RolloutQueue,
  type RolloutWorker,
  runGymDistributed,
  startRolloutWorker,
} from '../packages/gym/src/distributed.js';
import { type GymRunOptions, runGym, type SampleResult } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks, taskToJsonLine } from '../packages/gym/src/tasks/index.js';
import { jsonTask, sumTask } from './support/gym-tasks.js';
import { logLine, runCli, spawnCli, waitForExit } from './support/server-process.js';

/*
 * Distributed rollouts end to end: real PostgreSQL (the rollout queue in a schema of its own per
 * test), real Stepwise servers with the sim, rollout workers in this process and as `stepwise worker
 * rollouts` processes, agents in the bubblewrap sandbox. The queue's own rules: queue.test.ts.
 */

const PG_URL = process.env.STEPWISE_TEST_PG_URL;
const sandboxReady = checkSandbox().ok;
const tasks = [sumTask(), jsonTask()];

const scoreMap = (results: readonly SampleResult[]) =>
  Object.fromEntries(results.map((r) => [`${r.taskId}#${r.sample}`, [r.status, r.score, r.agent]]));

describe.skipIf(!PG_URL || !sandboxReady)('distributed rollouts (PostgreSQL rollout queue)', () => {
  let dir: string;
  const schemas: string[] = [];
  const queues: RolloutQueue[] = [];
  const workers: RolloutWorker[] = [];
  const children: ChildProcess[] = [];
  const logs = new Map<ChildProcess, string>();
  const servers: RunningServer[] = [];

  const newSchema = () => {
    const schema = `stepwise_rollq_${randomBytes(6).toString('hex')}`;
    schemas.push(schema);
    return schema;
  };
  const openQueue = async (schema: string) => {
    // Expired leases are failed over by whichever queue next fetches a job or asks for ended ones.
    const queue = await RolloutQueue.open({ url: PG_URL!, schema });
    queues.push(queue);
    return queue;
  };
  const worker = (queue: RolloutQueue, name: string) => {
    const w = startRolloutWorker({ queue, concurrency: 2, workDir: join(dir, name), pollMs: 100, name });
    workers.push(w);
    return w;
  };
  const workerProcess = (schema: string, name: string, concurrency: number) => {
    const child = spawnCli([
      'worker',
      'rollouts',
      '--pg',
      PG_URL!,
      '--queue-schema',
      schema,
      '--concurrency',
      String(concurrency),
      '--poll-ms',
      '100',
      '--work-dir',
      join(dir, name),
    ]);
    children.push(child);
    // Read all of its output (a full pipe would block it); kept for failure messages.
    logs.set(child, '');
    const keep = (chunk: Buffer | string) =>
      logs.set(child, (logs.get(child)! + chunk.toString()).slice(-8_000));
    child.stdout!.on('data', keep);
    child.stderr!.on('data', keep);
    return child;
  };
  const server = async (sim: Record<string, unknown>) => {
    const s = await startServer({
      dbPath: join(dir, `pool-${randomBytes(4).toString('hex')}.db`),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks(tasks), ...sim },
    });
    servers.push(s);
    return s;
  };
  const options = (over: Partial<GymRunOptions> & { gatewayUrl: string; runId: string }): GymRunOptions => ({
    tasks,
    samples: 3,
    concurrency: 3,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 12 },
    stateFile: join(dir, `state-${over.runId}-${randomBytes(3).toString('hex')}.jsonl`),
    workDir: join(dir, 'work'),
    sampleTimeoutMs: 60_000,
    ...over,
  });

  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-gym-distributed-'));
  });
  afterEach(async () => {
    for (const child of children.splice(0)) {
      if (child.exitCode === null && child.signalCode === null) {
        process.kill(child.pid!, 'SIGKILL');
        await waitForExit(child, 10_000);
      }
    }
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await Promise.all(queues.splice(0).map((q) => q.close()));
  });
  afterAll(async () => {
    await Promise.all(servers.splice(0).map((s) => s.close()));
    const client = new pg.Client({ connectionString: PG_URL });
    await client.connect();
    try {
      for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } finally {
      await client.end();
    }
    // A safety net for a test that failed midway: no workspace tmpfs (a host mount) outlives it.
    for (const line of readFileSync('/proc/mounts', 'utf8').split('\n')) {
      const target = line.split(' ')[1];
      if (target?.startsWith(`${dir}/`)) spawnSync('umount', ['--lazy', target]);
    }
    rmSync(dir, { recursive: true, force: true });
  });

  it('two workers produce the per-(task, sample) scores of a local run with the same seeds', async () => {
    // The same sim on two servers: one for the local run, one for the distributed one (the groups
    // of a run id are the same, so they cannot share a pool).
    const sim = { errorRate: 0.5, giveUpRate: 0.4 };
    const localServer = await server(sim);
    const remoteServer = await server(sim);
    const local = await runGym(options({ gatewayUrl: localServer.url, runId: 'mix-b' }));

    const schema = newSchema();
    const coordinator = await openQueue(schema);
    // Each worker with a connection of its own, as on two machines.
    const a = worker(await openQueue(schema), 'worker-a');
    const b = worker(await openQueue(schema), 'worker-b');
    const seen: number[] = [];
    const remote = await runGymDistributed(
      options({
        gatewayUrl: remoteServer.url,
        runId: 'mix-b',
        onSample: (_r, done) => seen.push(done),
      }),
      { queue: coordinator, pollMs: 100 },
    );

    expect(remote.results).toHaveLength(6);
    expect(scoreMap(remote.results)).toEqual(scoreMap(local.results));
    // The comparison means something: the seeds give a mix of solved and failed samples.
    expect(new Set(local.results.map((r) => r.score)).size).toBeGreaterThan(1);
    expect(remote.summary).toEqual(local.summary);
    expect(seen).toEqual([1, 2, 3, 4, 5, 6]);
    // Every sample ran exactly once, on one of the two workers.
    expect(a.stats.ran + b.stats.ran).toBe(6);
    expect(a.stats.replayed + b.stats.replayed).toBe(0);
    // The remote pool holds one complete trajectory per sample, in the groups of a local run.
    for (const task of tasks) {
      const page = await remoteServer.pool.listTrajectories({
        groupId: `mix-b.${task.id}`,
        limit: 100,
        offset: 0,
      });
      expect(page.items.map((t) => t.status)).toEqual(['complete', 'complete', 'complete']);
    }
    for (const r of remote.results) {
      const t = await remoteServer.pool.store.getTrajectory(r.trajectoryUid!);
      expect(t).toMatchObject({ status: 'complete', reward: r.score, groupId: `mix-b.${r.taskId}` });
      expect(t!.metadata).toMatchObject({ task_id: r.taskId, sample: r.sample, rollout_job: { attempt: 1 } });
    }
  }, 120_000);

  it("a killed worker's job is retried by another after its lease, and counted once", async () => {
    // A slow engine (300 ms to the first token): the sample is still running when its worker dies.
    const slow = await server({ errorRate: 0, giveUpRate: 0, ttftMs: 300 });
    const schema = newSchema();
    const coordinator = await openQueue(schema);
    const doomed = workerProcess(schema, 'doomed', 1);
    await logLine(doomed, (e) => e.msg === 'stepwise rollout worker ready');

    const stateFile = join(dir, 'state-killed.jsonl');
    const run = runGymDistributed(options({ gatewayUrl: slow.url, runId: 'killed', samples: 2, stateFile }), {
      queue: coordinator,
      pollMs: 100,
      leaseSeconds: 6,
      retryDelaySeconds: 0,
    });
    const started = await logLine(doomed, (e) => e.msg === 'rollout started');
    const killedJob = started.job as string;
    const killedTrajectory = started.trajectory as string;
    process.kill(doomed.pid!, 'SIGKILL');
    expect((await waitForExit(doomed, 10_000)).signal).toBe('SIGKILL');
    const before = await slow.pool.store.getTrajectory(killedTrajectory);
    expect(before?.status).toBe('open');

    // Another worker takes the rest, and the killed job once its lease has run out: started on the
    // same machine and work folder, as a restarted worker is.
    const rescuer = workerProcess(schema, 'doomed', 2);
    const { results, summary } = await run;

    expect(summary).toMatchObject({ samples: 4, infraFailed: 0, meanScore: 1 });
    expect(Object.keys(scoreMap(results)).sort()).toEqual(['json-1#0', 'json-1#1', 'sum-1#0', 'sum-1#1']);
    const lines = readFileSync(stateFile, 'utf8').trim().split('\n');
    expect(lines).toHaveLength(4);
    // The killed attempt's trajectory is closed as an infrastructure failure, which serving masks;
    // the retry's is the sample's one complete trajectory.
    expect((await slow.pool.store.getTrajectory(killedTrajectory))?.status).toBe('infra_failed');
    const retried = results.find(
      (r) => r.groupId === (before?.groupId ?? '') && r.sample === before?.metadata.sample,
    );
    expect(retried?.trajectoryUid).toBeTruthy();
    expect(retried?.trajectoryUid).not.toBe(killedTrajectory);
    const retriedTrajectory = await slow.pool.store.getTrajectory(retried!.trajectoryUid!);
    expect(retriedTrajectory).toMatchObject({ status: 'complete', reward: 1 });
    expect(retriedTrajectory!.metadata).toMatchObject({ rollout_job: { id: killedJob, attempt: 2 } });
    for (const task of tasks) {
      const page = await slow.pool.listTrajectories({ groupId: `killed.${task.id}`, limit: 100, offset: 0 });
      expect(page.items.filter((t) => t.status === 'complete')).toHaveLength(2);
      expect(page.items.filter((t) => t.status === 'open')).toHaveLength(0);
    }
    // One job per sample; the killed one needed a second attempt.
    const jobs = await coordinator.jobsOfRun('killed');
    expect(jobs).toHaveLength(4);
    expect(jobs.every((j) => j.state === 'completed')).toBe(true);
    expect(jobs.find((j) => j.id === killedJob)?.retryCount).toBe(1);
    expect(rescuer.exitCode).toBeNull();
    // The killed worker's workspace tmpfs (a host mount) was swept by the rescuer's first sample.
    const mounts = readFileSync('/proc/self/mounts', 'utf8').split('\n');
    expect(mounts.filter((line) => line.split(' ')[1]?.startsWith(`${dir}/doomed/`))).toEqual([]);
  }, 120_000);

  it('enqueuing the same run twice (or at once from two coordinators) adds no job', async () => {
    const gateway = await server({ errorRate: 0.5, giveUpRate: 0.4 });
    const schema = newSchema();
    const queue = await openQueue(schema);
    const other = await openQueue(schema);
    const run = options({ gatewayUrl: gateway.url, runId: 'twice' });

    const [first, second] = await Promise.all([
      enqueueRun(run, { queue }),
      enqueueRun(run, { queue: other }),
    ]);
    expect(first.jobs.map((j) => j.id)).toEqual(second.jobs.map((j) => j.id));
    expect(first.created + second.created).toBe(6);
    const again = await enqueueRun(run, { queue });
    expect(again).toMatchObject({ created: 0, existing: 6 });
    const jobs = await queue.jobsOfRun('twice');
    expect(jobs).toHaveLength(6);
    expect(new Set(jobs.map((j) => j.id)).size).toBe(6);

    // The run itself enqueues nothing new, and its results are counted once.
    const w = worker(await openQueue(schema), 'worker-c');
    const done = await runGymDistributed(run, { queue, pollMs: 100 });
    expect(done.summary.samples).toBe(6);
    expect(w.stats.ran).toBe(6);
    await w.stop();
    // A coordinator that lost its state file resumes from the finished jobs: nothing runs again,
    // nothing is enqueued, every sample is counted once.
    unlinkSync(run.stateFile);
    const resumed = await runGymDistributed(run, { queue, pollMs: 100 });
    expect(scoreMap(resumed.results)).toEqual(scoreMap(done.results));
    expect(resumed.summary).toEqual(done.summary);
    expect(await queue.jobsOfRun('twice')).toHaveLength(6);
    expect(w.stats.ran).toBe(6);
    expect(readFileSync(run.stateFile, 'utf8').trim().split('\n')).toHaveLength(6);
  }, 120_000);

  it('processes that open a fresh queue schema at once all get it', async () => {
    const schema = newSchema();
    const opened = await Promise.all(Array.from({ length: 5 }, () => openQueue(schema)));
    expect(opened.map((q) => q.schema)).toEqual(Array(5).fill(schema));
  }, 60_000);

  it('an attempt that recorded its result before dying is replayed, not run again', async () => {
    const gateway = await server({ errorRate: 0, giveUpRate: 0 });
    const schema = newSchema();
    const queue = await openQueue(schema);
    const run = options({ gatewayUrl: gateway.url, runId: 'replay', samples: 1, tasks: [sumTask()] });
    const { jobs } = await enqueueRun(run, { queue });
    const [job] = jobs;
    // What a worker leaves behind when it dies between recording the result and completing the
    // trajectory and the job: an open trajectory with a recorded result.
    const res = await fetch(`${gateway.url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ group_id: job!.data.groupId, n_rollouts: 1 }),
    });
    const opened = (await res.json()) as { trajectory_uid: string; base_url: string };
    const recorded: SampleResult = {
      taskId: 'sum-1',
      category: 'Analysis & Reasoning',
      sample: 0,
      groupId: job!.data.groupId,
      trajectoryUid: opened.trajectory_uid,
      status: 'complete',
      score: 1,
      code: 1,
      rubric: null,
      verifierFailed: false,
      agent: 'finished',
      reason: null,
      toolCalls: 2,
      toolErrors: 0,
      durationMs: 5,
    };
    const attempt = {
      trajectoryUid: opened.trajectory_uid,
      baseUrl: opened.base_url,
      retryCount: 0,
      worker: 'gone',
    };
    await queue.recordAttempt(job!.id, attempt);
    await queue.recordResult(job!.id, attempt, recorded);
    // A second attempt cannot record a result of its own any more.
    const late = { ...attempt, trajectoryUid: 'late-attempt' };
    await expect(
      queue.recordResult(job!.id, late, { ...recorded, trajectoryUid: 'late-attempt' }),
    ).rejects.toThrow(/another attempt recorded the result/);

    const w = worker(await openQueue(schema), 'replayer');
    const { results } = await runGymDistributed(run, { queue, pollMs: 100 });
    expect(results).toEqual([recorded]);
    expect(w.stats).toMatchObject({ ran: 0, replayed: 1 });
    expect(await gateway.pool.store.getTrajectory(opened.trajectory_uid)).toMatchObject({
      status: 'complete',
      reward: 1,
    });
  }, 60_000);

  it('an attempt taken over by a retry (its worker outlived the lease) can record nothing', async () => {
    const gateway = await server({ errorRate: 0, giveUpRate: 0 });
    const schema = newSchema();
    const queue = await openQueue(schema);
    const run = options({ gatewayUrl: gateway.url, runId: 'stale', samples: 1, tasks: [jsonTask()] });
    const [job] = (await enqueueRun(run, { queue })).jobs;
    // A slow attempt that is still running somewhere: its trajectory is open, its result not in.
    const res = await fetch(`${gateway.url}/init_trajectory`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ group_id: job!.data.groupId, n_rollouts: 1 }),
    });
    const slow = (await res.json()) as { trajectory_uid: string; base_url: string };
    const stale = {
      trajectoryUid: slow.trajectory_uid,
      baseUrl: slow.base_url,
      retryCount: 0,
      worker: 'slow',
    };
    await queue.recordAttempt(job!.id, stale);

    const w = worker(await openQueue(schema), 'taker');
    const { results } = await runGymDistributed(run, { queue, pollMs: 100 });
    expect(w.stats.ran).toBe(1);
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ status: 'complete', score: 1 });
    expect(results[0]!.trajectoryUid).not.toBe(slow.trajectory_uid);
    expect((await gateway.pool.store.getTrajectory(slow.trajectory_uid))?.status).toBe('infra_failed');
    // The slow attempt finishing now changes nothing.
    await expect(
      queue.recordResult(job!.id, stale, { ...results[0]!, trajectoryUid: slow.trajectory_uid, score: 0 }),
    ).rejects.toThrow(/took job .* over/);
    expect((await queue.results([job!.id])).get(job!.id)).toEqual(results[0]);
  }, 60_000);

  it('stepwise gym run --distributed with a `stepwise worker rollouts` process', async () => {
    const gateway = await server({ errorRate: 0.5, giveUpRate: 0.4 });
    const schema = newSchema();
    const tasksFile = join(dir, 'tasks.jsonl');
    writeFileSync(tasksFile, tasks.map((t) => `${taskToJsonLine(t)}\n`).join(''));
    const cliWorker = workerProcess(schema, 'cli-worker', 2);
    const out = join(dir, 'cli-out');
    const run = await runCli(
      [
        'gym',
        'run',
        '--tasks',
        tasksFile,
        '--samples',
        '2',
        '--out',
        out,
        '--gateway',
        gateway.url,
        '--run-id',
        'cli',
        '--distributed',
        '--pg',
        PG_URL!,
        '--queue-schema',
        schema,
      ],
      {},
      90_000,
    ).catch((error: Error) => {
      throw new Error(`${error.message}\nworker:\n${logs.get(cliWorker)}`);
    });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/4 samples in the rollout queue .*4 enqueued now, 0 already there/);
    expect(run.stdout).toMatch(/^run cli\nsamples: 4 \(0 already done\)/);
    const { summary } = JSON.parse(readFileSync(join(out, 'summary.json'), 'utf8'));
    expect(summary.samples).toBe(4);
    expect(readFileSync(join(out, 'state-cli.jsonl'), 'utf8').trim().split('\n')).toHaveLength(4);
    // Without a local gateway there is no local store.
    expect(existsSync(join(out, 'stepwise.db'))).toBe(false);
  }, 120_000);
});

describe('distributed rollouts: command-line errors', () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-gym-distributed-cli-'));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  const gymRun = (extra: string[]) => {
    const out = join(dir, `out-${randomBytes(3).toString('hex')}`);
    const args = [
      'gym',
      'run',
      '--tasks',
      'x.jsonl',
      '--out',
      out,
      '--gateway',
      'http://127.0.0.1:9',
      ...extra,
    ];
    return { out, result: runCli(args, { STEPWISE_PG_URL: '' }, 30_000) };
  };

  it('--distributed without --pg names the option and changes nothing', async () => {
    const { out, result } = gymRun(['--distributed']);
    const r = await result;
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/--distributed needs --pg/);
    expect(existsSync(out)).toBe(false);
  });

  it('a --pg that is no PostgreSQL URL is refused by name', async () => {
    const r1 = await gymRun(['--distributed', '--pg', 'not a url']).result;
    expect(r1.code).not.toBe(0);
    expect(r1.stderr).toMatch(/--pg: 'not a url' is not a URL; expected postgres:\/\//);
    const r2 = await gymRun(['--distributed', '--pg', 'http://127.0.0.1:5432/test']).result;
    expect(r2.stderr).toMatch(/--pg: expected a postgres:\/\/ URL/);
    const r3 = await runCli(['worker', 'rollouts'], { STEPWISE_PG_URL: '' });
    expect(r3.code).not.toBe(0);
    expect(r3.stderr).toMatch(/--pg <url> \(or STEPWISE_PG_URL\) is required/);
  });

  it('an unreachable database is named, without its password', async () => {
    const tasksFile = join(dir, 'tasks.jsonl');
    writeFileSync(tasksFile, `${taskToJsonLine(sumTask())}\n`);
    const r = await runCli(
      [
        'gym',
        'run',
        '--tasks',
        tasksFile,
        '--out',
        join(dir, 'unreachable'),
        '--gateway',
        'http://127.0.0.1:9',
        '--distributed',
        '--pg',
        'postgres://someone:secret@127.0.0.1:9/nowhere',
      ],
      {},
      30_000,
    );
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(
      /cannot open the rollout queue at postgres:\/\/someone:\*\*\*@127\.0\.0\.1:9\/nowhere: .*ECONNREFUSED/,
    );
    expect(r.stderr).not.toMatch(/secret/);
  });
});
