import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { RolloutQueue, runGymDistributed } from '../packages/gym/src/distributed.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { sweepDeadWorkspaces } from '../packages/gym/src/sandbox/workspace-volume.js';
import { type Balancer, startBalancer } from './support/balancer.js';
import { jsonTask, sumTask } from './support/gym-tasks.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import {
  killAllServerProcesses,
  logLine,
  type ServerProcess,
  spawnCli,
  startServerProcess,
} from './support/server-process.js';

/*
 * Scale-out on loopback: three `stepwise serve --pg` processes over one PostgreSQL schema behind a
 * load balancer; many concurrent agents (the official openai client); two trainer consumers; three
 * `stepwise worker rollouts` processes running a distributed gym run through the same gateways. One
 * gateway and one worker are SIGKILLed mid-run. Afterwards: every answer an agent received is stored
 * once, every group is acked exactly once, no group was ever in two consumers' leases, and every gym
 * sample is counted once with its trajectory complete.
 */

const GROUPS = 8;
const ROLLOUTS = 3;
const TURNS = 4;

const schema = freshSchema('stepwise_scale');
const queueSchema = freshSchema('stepwise_scale_queue');
const sandboxReady = checkSandbox().ok;
const dir = mkdtempSync(join(tmpdir(), 'stepwise-scale-out-'));
let balancer: Balancer | null = null;
let queue: RolloutQueue | null = null;

afterAll(async () => {
  await balancer?.close();
  await queue?.close();
  await killAllServerProcesses();
  await dropSchema(schema);
  await dropSchema(queueSchema);
  // The worker killed mid-sample left its workspace mounted (run as root): unmounted first.
  for (const w of [0, 1, 2]) await sweepDeadWorkspaces(join(dir, `worker-${w}`)).catch(() => []);
  rmSync(dir, { recursive: true, force: true });
});

interface AgentRecord {
  trajectory: string;
  group: string;
  /** What the agent received, call by call. */
  answers: string[];
  /** HTTP attempts of its LLM calls (the SDK retries a call whose gateway went away). */
  attempts: number;
  completed: boolean;
}

describe.skipIf(!pgUrl || !sandboxReady)('scale-out over PostgreSQL', () => {
  it('3 gateways, 2 consumers, 3 rollout workers, 24 agents; a gateway and a worker killed: nothing acknowledged lost or counted twice', async () => {
    // The balancer comes first so that gateways write its address into the base_urls they hand out.
    const ports: string[] = [];
    const lb = await startBalancer(ports);
    balancer = lb;
    const args = ['--pg', pgUrl!, '--pg-schema', schema, '--engine', 'sim', '--sim-ttft-ms', '20'];
    args.push('--public-url', lb.url, '--n-rollouts', String(ROLLOUTS));
    // One process creates the schema; the others join it.
    const gateways: ServerProcess[] = [await startServerProcess('', args)];
    gateways.push(...(await Promise.all([startServerProcess('', args), startServerProcess('', args)])));
    ports.push(...gateways.map((g) => g.url));

    // ---- rollout workers and a distributed gym run through the same gateways ----------------------
    queue = await RolloutQueue.open({ url: pgUrl!, schema: queueSchema });
    const workers = [0, 1, 2].map((w) =>
      spawnCli([
        'worker',
        'rollouts',
        '--pg',
        pgUrl!,
        '--queue-schema',
        queueSchema,
        '--gateway',
        lb.url,
        '--concurrency',
        '2',
        '--poll-ms',
        '100',
        '--work-dir',
        join(dir, `worker-${w}`),
      ]),
    );
    // The first sample any worker starts, it does not finish: that worker is killed then. (Which
    // worker claims a sample first is up to the queue; waiting for a given one could wait forever.)
    const starts = workers.map((w) =>
      logLine(w, (e) => e.msg === 'rollout started').then((started) => ({ worker: w, started })),
    );
    for (const start of starts) start.catch(() => {}); // a killed worker's never comes
    const first = Promise.race(starts).then((s) => {
      s.worker.kill('SIGKILL');
      return s;
    });
    const killedRollout = first.then((s) => s.started);
    const tasks = [sumTask(), jsonTask()];
    const stateFile = join(dir, 'gym-state.jsonl');
    const gym = runGymDistributed(
      {
        tasks,
        samples: 4,
        concurrency: 4,
        gatewayUrl: lb.url,
        model: 'sim-qwen3',
        agent: { kind: 'builtin', maxTurns: 6 },
        runId: 'scale',
        channel: 'gym',
        stateFile,
        workDir: join(dir, 'gym-work'),
        sampleTimeoutMs: 60_000,
      },
      { queue, pollMs: 100, leaseSeconds: 8, retryDelaySeconds: 0 },
    );

    // ---- agents ------------------------------------------------------------------------------
    let answered = 0;
    let killedAt: number | null = null;
    const victim = gateways[1]!;
    const maybeKill = () => {
      answered++;
      if (killedAt === null && answered >= (GROUPS * ROLLOUTS * TURNS) / 3) {
        killedAt = answered;
        victim.child.kill('SIGKILL');
      }
    };
    const ask = async (client: OpenAI, messages: OpenAI.ChatCompletionMessageParam[], stream: boolean) => {
      if (!stream) {
        const answer = await client.chat.completions.create({ model: 'sim', messages });
        return answer.choices[0]!.message.content ?? '';
      }
      const chunks = await client.chat.completions.create({ model: 'sim', messages, stream: true });
      let text = '';
      for await (const chunk of chunks) text += chunk.choices[0]?.delta?.content ?? '';
      return text;
    };
    const runAgent = async (g: number, r: number): Promise<AgentRecord> => {
      // An init whose gateway died may have created a trajectory nobody will use: ask again.
      let init: Response | null = null;
      for (let attempt = 0; attempt < 5 && init?.status !== 200; attempt++) {
        init = await fetch(`${lb.url}/init_trajectory`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ group_id: `g${g}`, n_rollouts: ROLLOUTS, metadata: { agent: `${g}.${r}` } }),
        });
      }
      expect(init!.status).toBe(200);
      const { trajectory_uid, base_url } = (await init!.json()) as {
        trajectory_uid: string;
        base_url: string;
      };
      expect(base_url.startsWith(lb.url)).toBe(true);
      const record: AgentRecord = {
        trajectory: trajectory_uid,
        group: `g${g}`,
        answers: [],
        attempts: 0,
        completed: false,
      };
      const counting: typeof fetch = (input, init) => {
        record.attempts++;
        return fetch(input, init);
      };
      const client = new OpenAI({ baseURL: base_url, apiKey: 'x', maxRetries: 5, fetch: counting });
      const messages: OpenAI.ChatCompletionMessageParam[] = [];
      for (let t = 0; t < TURNS; t++) {
        messages.push({ role: 'user', content: `agent ${g}.${r} turn ${t}` });
        // A stream cut off by a dying gateway fails mid-way (the SDK retries only whole requests):
        // the agent asks again, as any agent would.
        let text: string | null = null;
        for (let attempt = 0; text === null; attempt++) {
          try {
            text = await ask(client, messages, t % 2 === 1);
          } catch (error) {
            if (attempt >= 3) throw error;
          }
        }
        record.answers.push(text);
        messages.push({ role: 'assistant', content: text });
        maybeKill();
      }
      // Completion is retried through the balancer like any call (the first try may meet the victim).
      for (let attempt = 0; attempt < 5 && !record.completed; attempt++) {
        const done = await fetch(`${lb.url}/v1/trajectories/${trajectory_uid}/complete`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ reward: r % 2 }),
        });
        record.completed = done.status === 200;
      }
      return record;
    };

    // ---- consumers ---------------------------------------------------------------------------
    const leases: { consumer: string; leaseId: string; groups: string[]; acked: boolean }[] = [];
    let agentsDone = false;
    const consume = async (consumer: string) => {
      const client = new StepwiseClient({ baseUrl: lb.url });
      const deadline = Date.now() + 90_000;
      while (Date.now() < deadline) {
        const ackedGroups = leases.filter((l) => l.acked).reduce((n, l) => n + l.groups.length, 0);
        if (agentsDone && ackedGroups >= GROUPS) return;
        let batch: Awaited<ReturnType<StepwiseClient['lease']>>;
        try {
          batch = await client.lease({
            batchSize: 1,
            nRollouts: ROLLOUTS,
            waitMs: 1_000,
            consumer,
            ttlMs: 5_000,
          });
        } catch {
          continue; // the balancer met the killed gateway mid-poll: lease again
        }
        if (!batch) continue;
        const entry = {
          consumer,
          leaseId: batch.lease_id,
          groups: batch.groups.map((x) => x.group_id),
          acked: false,
        };
        leases.push(entry);
        for (const group of batch.groups) expect(group.trajectories).toHaveLength(ROLLOUTS);
        try {
          await client.ack(batch.lease_id);
          entry.acked = true;
        } catch {
          // The ack's gateway died: the lease expires and its group is served again.
        }
      }
    };

    const consumers = [consume('trainer-a'), consume('trainer-b')];
    const agents: Promise<AgentRecord>[] = [];
    for (let g = 0; g < GROUPS; g++) for (let r = 0; r < ROLLOUTS; r++) agents.push(runAgent(g, r));
    const records = await Promise.all(agents);
    agentsDone = true;
    await Promise.all(consumers);
    const { results, summary } = await gym;
    const killed = await killedRollout;

    // The victim was killed mid-run and taken out by the balancer; the others served the rest.
    expect(killedAt).not.toBeNull();
    expect(victim.child.signalCode).toBe('SIGKILL');
    expect(lb.down.has(1)).toBe(true);
    expect(records.every((r) => r.completed)).toBe(true);

    // ---- every acknowledged answer is stored, once ----------------------------------------------
    const reader = new StepwiseClient({ baseUrl: lb.url });
    let retried = 0;
    for (const record of records) {
      const res = await fetch(`${lb.url}/v1/trajectories/${record.trajectory}`);
      const stored = (await res.json()) as {
        status: string;
        steps: { step_index: number; response_text: string }[];
      };
      expect(stored.status).toBe('complete');
      const indexes = stored.steps.map((s) => s.step_index);
      expect(indexes).toEqual(indexes.map((_, i) => i));
      const texts = stored.steps.map((s) => s.response_text);
      // Every answer the agent received is stored; a call retried after its gateway died may have
      // been generated (and stored) twice, never more often than it was attempted.
      for (const answer of record.answers) expect(texts).toContain(answer);
      expect(stored.steps.length).toBeLessThanOrEqual(record.attempts);
      if (record.attempts === TURNS) expect(texts).toEqual(record.answers);
      else retried++;
    }
    // Most agents never met the victim mid-call: their trajectories are exactly what they saw.
    expect(retried).toBeLessThan(records.length);

    // ---- every group acked exactly once, never in two leases at a time --------------------------
    const acked = leases.filter((l) => l.acked).flatMap((l) => l.groups);
    expect([...acked].sort()).toEqual(Array.from({ length: GROUPS }, (_, g) => `g${g}`).sort());
    for (const [i, a] of leases.entries()) {
      for (const b of leases.slice(i + 1)) {
        if (a.acked && b.acked) expect(a.groups.filter((g) => b.groups.includes(g))).toEqual([]);
      }
    }
    expect(new Set(leases.map((l) => l.consumer)).size).toBe(2);
    const stats = await reader.stats('train');
    expect(stats.consumed.groups).toBe(GROUPS);
    expect(stats.produced.trajectories).toBe(GROUPS * ROLLOUTS);
    expect(stats.groups.consumed).toBe(GROUPS);

    // ---- every gym sample counted once, its trajectory complete ---------------------------------
    const doomed = (await first).worker;
    expect(doomed.signalCode).toBe('SIGKILL');
    expect(workers.filter((w) => w.signalCode === 'SIGKILL')).toHaveLength(1);
    expect(summary.samples).toBe(tasks.length * 4);
    expect(new Set(results.map((r) => `${r.taskId}#${r.sample}`)).size).toBe(tasks.length * 4);
    expect(readFileSync(stateFile, 'utf8').trim().split('\n')).toHaveLength(tasks.length * 4);
    const killedAttempt = await fetch(`${lb.url}/v1/trajectories/${killed.trajectory as string}`);
    expect(((await killedAttempt.json()) as { status: string }).status).toBe('infra_failed');
    for (const task of tasks) {
      const page = (await (
        await fetch(`${lb.url}/v1/trajectories?prompt_uid=scale.${task.id}&channel=gym&limit=100`)
      ).json()) as {
        items: { trajectory_uid: string; status: string; n_steps: number; metadata: unknown }[];
      };
      const complete = page.items.filter((t) => t.status === 'complete');
      expect(complete).toHaveLength(4);
      // Still open: only an init whose gateway died before answering (no call was ever made on it).
      for (const t of page.items.filter((t) => t.status === 'open')) expect(t.n_steps).toBe(0);
      const served = results.filter((r) => r.taskId === task.id).map((r) => r.trajectoryUid);
      expect(complete.map((t) => t.trajectory_uid).sort()).toEqual([...served].sort());
    }
  }, 180_000);
});
