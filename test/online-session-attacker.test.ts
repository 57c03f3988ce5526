import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import type { Trajectory } from '../packages/core/src/domain/index.js';
import { type RewardsConfigFile, resolveRewardsConfig } from '../packages/core/src/rewards/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { callJson } from './support/http.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * The attacker suite, online sessions (issue 38, finding 2) and the reward oracle (finding 3): a
 * hostile policy holding only an `agent` key, and a second tenant's `agent` key, against a real
 * `stepwise serve` over loopback HTTP with real keys, on SQLite and (with STEPWISE_TEST_PG_URL)
 * PostgreSQL. Each case was a success for the attacker on d06c0e0.
 */

const A = 'agent-a-key-0123456789abcdef';
const B = 'agent-b-key-0123456789abcdef';
const RUNNER = 'runner-key-0123456789abcdef';
const TRAINER = 'trainer-key-0123456789abcdef';
const KEYS = [`${A}:agent`, `${B}:agent`, `${RUNNER}:agent,runner`, `${TRAINER}:trainer`];

/** Where a server keeps its pool: a SQLite file or a PostgreSQL schema, reusable across restarts. */
type Place = Pick<ServerOptions, 'dbPath' | 'pg'>;

const dirs: string[] = [];
const schemas: string[] = [];
const servers: RunningServer[] = [];
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

const places: [string, () => Place][] = [
  [
    'SQLite',
    () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-session-attack-'));
      dirs.push(dir);
      return { dbPath: join(dir, 'pool.db') };
    },
  ],
];
if (pgUrl) {
  places.push([
    'PostgreSQL',
    () => {
      const schema = freshSchema('stepwise_session_attack');
      schemas.push(schema);
      return { dbPath: '', pg: { url: pgUrl!, schema } };
    },
  ]);
}

async function start(place: Place, options: Partial<ServerOptions> = {}): Promise<RunningServer> {
  const server = await startServer({ ...place, port: 0, engines: ['sim'], apiKeys: KEYS, ...options });
  servers.push(server);
  return server;
}

/** Rewards where a trajectory scores 1 when its final answer is the `answer` its metadata names. */
const answerRewards = (channel: string, answer: Record<string, unknown>): RewardsConfigFile => ({
  functions: { answer: { plugin: 'rule', params: { kind: 'exact', ...answer } } },
  channels: { [channel]: { functions: ['answer'], combination: 'answer' } },
  workers: { concurrency: 1, poll_ms: 20 },
});

/** An assistant on the fixed base_url, as OpenClaw is configured: a key and static headers. */
function assistant(server: RunningServer, key: string, headers: Record<string, string>) {
  const client = new OpenAI({
    baseURL: `${server.url}/v1`,
    apiKey: key,
    maxRetries: 0,
    defaultHeaders: headers,
  });
  const history: ChatCompletionMessageParam[] = [];
  return {
    history,
    /** One turn: the user's words, the sim's answer (it echoes them) kept in the history. */
    async say(content: string): Promise<string> {
      history.push({ role: 'user', content });
      const answer = await client.chat.completions.create({ model: 'sim', messages: history });
      const text = answer.choices[0]!.message.content ?? '';
      history.push({ role: 'assistant', content: text });
      return text;
    },
  };
}

async function inChannel(server: RunningServer, channel: string): Promise<Trajectory[]> {
  const page = await server.pool.listTrajectories({ channel, limit: 500, offset: 0 });
  return page.items.sort((a, b) => a.createdAt - b.createdAt);
}

/** Steps are written behind the answer: wait until a trajectory holds n of them. */
async function steps(server: RunningServer, id: string, n: number): Promise<void> {
  await expect.poll(async () => (await server.pool.getTrajectory(id))?.nSteps).toBe(n);
}

async function refusals(server: RunningServer) {
  const events = await server.pool.events({ after: 0, limit: 1000, types: ['access_refused'] });
  return events.map((e) => e.data as Record<string, unknown>);
}

for (const [name, place] of places) {
  describe(`a hostile agent against online sessions, on ${name}`, () => {
    it('cannot forge a session trajectory: metadata.source other than `agent` is refused, and the read-back adopts only what the gateway opened', async () => {
      const server = await start(place(), {
        rewards: resolveRewardsConfig(answerRewards('online', { expected_key: 'answer' })),
        gatewayOptions: { sessionIdleMs: 300 },
      });
      const forged = await callJson(
        'POST',
        `${server.url}/init_trajectory`,
        { channel: 'online', metadata: { source: 'session', session_key: 'mine', answer: 'paris' } },
        A,
      );
      expect(forged.status).toBe(403);
      expect(forged.json.error).toMatchObject({ param: 'metadata.source' });
      for (const source of ['verifier', 'human', 'user', 7])
        expect(
          (await callJson('POST', `${server.url}/init_trajectory`, { metadata: { source } }, A)).status,
        ).toBe(403);
      // The agent's own word is still welcome as such.
      const own = await callJson(
        'POST',
        `${server.url}/init_trajectory`,
        { metadata: { source: 'agent' } },
        A,
      );
      expect(own.status).toBe(200);
      // Nor through register_trajectory, even on a channel that trusts agents with their metadata.
      await server.pool.configureChannel('claw', { trust_agent_reward: true });
      const claw = await callJson('POST', `${server.url}/init_trajectory`, { channel: 'claw' }, A);
      const register = await callJson(
        'POST',
        `${claw.json.base_url}/register_trajectory`,
        { metadata: { source: 'session', session_key: 'mine' } },
        A,
      );
      expect(register.status).toBe(403);
      expect(register.json.error).toMatchObject({ param: 'metadata.source' });
      expect((await server.pool.getTrajectory(claw.json.trajectory_uid))!.metadata).toEqual({});

      // The first session call reads the channel back, then says the answer the forgery expected.
      await assistant(server, A, { 'X-Stepwise-Session': 'mine' }).say('paris');
      await expect
        .poll(async () => (await inChannel(server, 'online')).map((t) => t.status), { timeout: 10_000 })
        .not.toContain('open');
      const online = await inChannel(server, 'online');
      const used = online.filter((t) => t.nSteps > 0);
      expect(used).toHaveLength(1);
      expect(used[0]!.metadata).toMatchObject({ source: 'session', session_key: 'mine' });
      expect(used[0]!.metadata.answer).toBeUndefined();
      if (forged.status === 200) {
        const stored = await server.pool.getTrajectory(forged.json.trajectory_uid);
        expect(stored!.status).not.toBe('complete');
      }
      // What a trainer would lease: no reward 1 anywhere in the channel.
      for (const t of online) {
        const scored = await callJson(
          'POST',
          `${server.url}/v1/rewards/compute`,
          { trajectory_uid: t.id, wait_ms: 2_000 },
          TRAINER,
        );
        expect(scored.json.reward ?? null).not.toBe(1);
      }
    });

    it("a session is bound to the key that opened it: another key's same X-Stepwise-Session gets its own trajectory, before and after a restart", async () => {
      const at = place();
      const first = await start(at);
      const victim = assistant(first, A, { 'X-Stepwise-Session': 'shared' });
      await victim.say('hello');
      const [mine] = await inChannel(first, 'online');
      await steps(first, mine!.id, 1);
      // The other tenant replays the victim's conversation and complains about the answer.
      const other = assistant(first, B, { 'X-Stepwise-Session': 'shared' });
      other.history.push(...victim.history);
      await other.say("that's wrong");
      const both = await inChannel(first, 'online');
      expect(both).toHaveLength(2);
      const theirs = both.find((t) => t.id !== mine!.id)!;
      await steps(first, theirs.id, 1);
      expect((await first.pool.getTrajectory(mine!.id))!.nSteps).toBe(1);
      await expect.poll(async () => (await first.pool.getSignals(theirs.id)).length).toBe(0);
      expect(await first.pool.getSignals(mine!.id)).toEqual([]);
      expect(mine!.metadata.session_owner).not.toEqual(theirs.metadata.session_owner);
      await first.close();

      // After a restart each key continues its own trajectory.
      const second = await start(at);
      await assistant(second, B, { 'X-Stepwise-Session': 'shared' }).say('again');
      await assistant(second, A, { 'X-Stepwise-Session': 'shared' }).say('again');
      await steps(second, mine!.id, 2);
      await steps(second, theirs.id, 2);
      expect(await inChannel(second, 'online')).toHaveLength(2);
      expect(second.gateway.stats().sessions).toMatchObject({ restored: 2, opened: 0 });
    });

    it("takes the session's channel from the operator's configuration; X-Stepwise-Channel only where the channel trusts agents", async () => {
      const server = await start(place(), { gatewayOptions: { sessionChannel: 'assist' } });
      await assistant(server, A, { 'X-Stepwise-Session': 's1' }).say('hi');
      expect((await inChannel(server, 'assist')).map((t) => t.metadata.session_key)).toEqual(['s1']);

      const chosen = assistant(server, A, { 'X-Stepwise-Session': 's2', 'X-Stepwise-Channel': 'train' });
      const error = await chosen.say('hi').catch((e: unknown) => e);
      expect(error).toMatchObject({ status: 403, param: 'X-Stepwise-Channel' });
      expect((error as Error).message).toMatch(/trust_agent_reward/);
      expect(await inChannel(server, 'train')).toEqual([]);
      expect(await refusals(server)).toEqual([expect.objectContaining({ by: 'gateway', count: 1 })]);

      // The operator's own driver may name it; so may an agent where the channel trusts agents.
      await assistant(server, RUNNER, { 'X-Stepwise-Session': 's3', 'X-Stepwise-Channel': 'train' }).say(
        'hi',
      );
      expect((await inChannel(server, 'train')).map((t) => t.metadata.session_key)).toEqual(['s3']);
      await server.pool.configureChannel('claw', { trust_agent_reward: true });
      await assistant(server, A, { 'X-Stepwise-Session': 's4', 'X-Stepwise-Channel': 'claw' }).say('hi');
      expect((await inChannel(server, 'claw')).map((t) => t.metadata.session_key)).toEqual(['s4']);
    });

    it("records implicit feedback as the user's word (source `user`), never as `human`", async () => {
      const server = await start(place());
      await server.pool.configureChannel('online', { n_rollouts: 1, required_signals: ['user_feedback'] });
      const chat = assistant(server, A, { 'X-Stepwise-Session': 'thanks' });
      await chat.say('book a table');
      await chat.say('thanks, perfect!');
      await chat.say('that is wrong');
      const [t] = await inChannel(server, 'online');
      await expect.poll(async () => (await server.pool.getSignals(t!.id)).length).toBe(2);
      const signals = await server.pool.getSignals(t!.id);
      expect(signals.map((s) => [s.stepIndex, s.name, s.value, s.source])).toEqual([
        [0, 'user_feedback', 1, 'user'],
        [1, 'user_feedback', -1, 'user'],
      ]);
      // Nor does the user's word release a group that waits for a required signal of that name.
      const signal = (source: string) => ({
        signals: [{ trajectory_uid: t!.id, name: 'user_feedback', value: 1, source }],
      });
      expect((await callJson('POST', `${server.url}/v1/signals`, signal('user'), RUNNER)).status).toBe(200);
      const done = await callJson('POST', `${server.url}/v1/trajectories/${t!.id}/complete`, {}, RUNNER);
      expect(done.json.status).toBe('complete');
      const group = async () => (await server.pool.store.getGroup('online', t!.groupId))!.state;
      expect(await group()).toBe('collecting');
      await callJson('POST', `${server.url}/v1/signals`, signal('human'), RUNNER);
      expect(await group()).toBe('ready');
    });

    it("caps each key's open sessions; opening past a cap evicts only the key's own, never another key's", async () => {
      const server = await start(place(), { gatewayOptions: { maxSessions: 3, maxSessionsPerKey: 2 } });
      await assistant(server, A, { 'X-Stepwise-Session': 'victim' }).say('hi');
      for (const key of ['b1', 'b2', 'b3', 'b4'])
        await assistant(server, B, { 'X-Stepwise-Session': key }).say('hi');
      await expect.poll(() => server.gateway.stats().sessions.closed_evicted).toBe(2);
      const byKey = new Map((await inChannel(server, 'online')).map((t) => [t.metadata.session_key, t]));
      expect(byKey.get('victim')!.status).toBe('open');
      expect(['b1', 'b2', 'b3', 'b4'].map((k) => byKey.get(k)!.status)).toEqual([
        'complete',
        'complete',
        'open',
        'open',
      ]);
      // Every place is taken by sessions of other keys: a third key is refused, and evicts nothing.
      const third = await assistant(server, RUNNER, { 'X-Stepwise-Session': 'r1' })
        .say('hi')
        .catch((e: unknown) => e);
      expect(third).toMatchObject({ status: 429, param: 'X-Stepwise-Session' });
      expect(byKey.get('victim')!.status).toBe('open');
      expect((await server.pool.getTrajectory(byKey.get('victim')!.id))!.status).toBe('open');
      expect(server.gateway.stats().sessions).toMatchObject({ open: 3, closed_evicted: 2 });
    });

    it('is no reward oracle: /compute_reward on its own trajectory is refused to an agent key unless the channel trusts agents', async () => {
      const server = await start(place(), {
        rewards: resolveRewardsConfig(answerRewards('train', { expected: 'paris' })),
      });
      const init = await callJson('POST', `${server.url}/init_trajectory`, {}, A);
      const id = init.json.trajectory_uid as string;
      const agent = new OpenAI({ baseURL: init.json.base_url, apiKey: A, maxRetries: 0 });
      await agent.chat.completions.create({ model: 'sim', messages: [{ role: 'user', content: 'london' }] });
      const probe = await callJson(
        'POST',
        `${server.url}/compute_reward`,
        { trajectory_uid: id, wait_ms: 5_000 },
        A,
      );
      expect(probe.status).toBe(403);
      expect(probe.json.error).toMatchObject({ param: 'trust_agent_reward' });
      expect(probe.json.error.message).toMatch(/trust_agent_reward: true on channel 'train'/);
      expect(await server.pool.getSignals(id)).toEqual([]);
      expect(await refusals(server)).toEqual([
        expect.objectContaining({ trajectory_uid: id, by: 'gateway' }),
      ]);
      // The episode's owner may ask; so may the agent where the operator trusts agents.
      const owner = await callJson('POST', `${server.url}/compute_reward`, { trajectory_uid: id }, RUNNER);
      expect(owner.status).toBe(200);
      expect(owner.json.functions.answer).toMatchObject({ value: 0 });
      await server.pool.configureChannel('train', { trust_agent_reward: true });
      const trusted = await callJson('POST', `${server.url}/compute_reward`, { trajectory_uid: id }, A);
      expect(trusted.status).toBe(200);
    });
  });
}
