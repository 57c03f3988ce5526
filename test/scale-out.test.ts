import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { StepwiseClient } from '../src/sdk/client.js';
import { type Balancer, startBalancer } from './support/balancer.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, type ServerProcess, startServerProcess } from './support/server-process.js';

/*
 * Scale-out on loopback: three `stepwise serve --pg` processes over one PostgreSQL schema behind a
 * load balancer, many concurrent agents (the official openai client) and two trainer consumers,
 * with one gateway SIGKILLed mid-run. Afterwards: every answer an agent received is stored once,
 * every group is acked exactly once, and no group was ever in two consumers' leases.
 */

const GROUPS = 8;
const ROLLOUTS = 3;
const TURNS = 4;

const schema = freshSchema('stepwise_scale');
let balancer: Balancer | null = null;

afterAll(async () => {
  await balancer?.close();
  await killAllServerProcesses();
  await dropSchema(schema);
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

describe.skipIf(!pgUrl)('scale-out over PostgreSQL', () => {
  it('three gateways, two consumers, 24 agents, a gateway killed mid-run: nothing acknowledged lost or served twice', async () => {
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
      const init = await fetch(`${lb.url}/init_trajectory`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ group_id: `g${g}`, n_rollouts: ROLLOUTS, metadata: { agent: `${g}.${r}` } }),
      });
      expect(init.status).toBe(200);
      const { trajectory_uid, base_url } = (await init.json()) as {
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
        const done = await fetch(`${base_url}/complete_trajectory`, {
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
  }, 150_000);
});
