import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { callJson } from './support/http.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * The agent is untrusted (issue 24, docs/security.md): what it sends under its base_url is its own
 * word, and what only an episode's owner may do (complete with a reward, score, merge metadata, write
 * steps, join groups) is refused, recorded as an `access_refused` event, and changes nothing, unless
 * the channel lets agents own their episodes (`trust_agent_reward`). Real HTTP on loopback, the
 * official OpenAI client as the agent, on SQLite and (with STEPWISE_TEST_PG_URL) PostgreSQL.
 */

const dirs: string[] = [];
const schemas: string[] = [];
const servers: RunningServer[] = [];
afterAll(async () => {
  for (const server of servers) await server.close();
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

const AGENT = 'agent-key-0123456789abcdef';
const RUNNER = 'runner-key-0123456789abcdef';
const TRAINER = 'trainer-key-0123456789abcdef';

type Start = (options?: Partial<ServerOptions>) => Promise<RunningServer>;
const stores: [string, Start][] = [
  [
    'SQLite',
    async (options = {}) => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-trust-'));
      dirs.push(dir);
      const server = await startServer({
        dbPath: join(dir, 'pool.db'),
        port: 0,
        engines: ['sim'],
        ...options,
      });
      servers.push(server);
      return server;
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async (options = {}) => {
      const schema = freshSchema('stepwise_trust');
      schemas.push(schema);
      const server = await startServer({
        dbPath: '',
        pg: { url: pgUrl!, schema },
        port: 0,
        engines: ['sim'],
        ...options,
      });
      servers.push(server);
      return server;
    },
  ]);
}

const call = callJson;

/** An episode opened by `key` with one LLM call by the agent. */
async function episode(server: RunningServer, body: Record<string, unknown>, key?: string) {
  const init = await call('POST', `${server.url}/init_trajectory`, body, key);
  expect(init.status).toBe(200);
  const agent = new OpenAI({ baseURL: init.json.base_url, apiKey: key ?? 'none', maxRetries: 0 });
  await agent.chat.completions.create({ model: 'sim', messages: [{ role: 'user', content: 'hi' }] });
  return init.json as { trajectory_uid: string; group_id: string; base_url: string };
}

async function refusals(server: RunningServer) {
  const events = await server.pool.events({ after: 0, limit: 1000, types: ['access_refused'] });
  return events.map((e) => e.data);
}

for (const [name, start] of stores) {
  describe(`the agent under its base_url, on ${name}`, () => {
    it('cannot complete its trajectory, with a reward or without, nor merge metadata; each try is an event and changes nothing', async () => {
      const server = await start();
      const t = await episode(server, { group_id: 'g1', n_rollouts: 1, metadata: { answer: '42' } });
      for (const body of [{ reward: 1 }, {}, { status: 'aborted' }]) {
        const forged = await call('POST', `${t.base_url}/complete_trajectory`, body);
        expect(forged.status).toBe(403);
        expect(forged.json.error).toMatchObject({ type: 'permission_error', param: 'trust_agent_reward' });
        expect(forged.json.error.message).toMatch(/trust_agent_reward: true on channel 'train'/);
      }
      const metadata = await call('POST', `${t.base_url}/register_trajectory`, { metadata: { answer: '7' } });
      expect(metadata.status).toBe(403);
      const stored = await server.pool.getTrajectory(t.trajectory_uid);
      expect(stored).toMatchObject({ status: 'open', reward: null, metadata: { answer: '42' } });
      const events = await refusals(server);
      expect(events).toHaveLength(4);
      expect(events[0]).toMatchObject({
        trajectory_uid: t.trajectory_uid,
        by: 'gateway',
        attempts: [`POST /${t.trajectory_uid}/g1/v1/complete_trajectory`],
        count: 1,
      });
      // The agent's LLM calls go on; its owner completes the episode with the verifier's reward.
      const owner = await call('POST', `${server.url}/v1/trajectories/${t.trajectory_uid}/complete`, {
        reward: 0,
      });
      expect(owner.json).toMatchObject({ status: 'complete', reward: 0, n_steps: 1 });
    });

    it('posts signals only as its own (`agent`), which never satisfy required_signals', async () => {
      const server = await start();
      await server.pool.configureChannel('train', { required_signals: ['score'], n_rollouts: 1 });
      const t = await episode(server, { group_id: 'g2' });
      const claimed = await call('POST', `${t.base_url}/signals`, {
        signals: [{ name: 'score', value: 1, source: 'verifier' }],
      });
      expect(claimed.status).toBe(403);
      expect(claimed.json.error.message).toMatch(/source 'verifier'/);
      expect(await server.pool.getSignals(t.trajectory_uid)).toEqual([]);
      const own = await call('POST', `${t.base_url}/signals`, { signals: [{ name: 'score', value: 1 }] });
      expect(own.status).toBe(200);
      expect(own.json.signals[0]).toMatchObject({ name: 'score', value: 1, source: 'agent' });
      await call('POST', `${server.url}/v1/trajectories/${t.trajectory_uid}/complete`, {});
      // Complete, with an agent-declared `score`: still waiting for the verifier's.
      expect((await server.pool.store.getGroup('train', 'g2'))?.state).toBe('collecting');
      await call('POST', `${server.url}/v1/signals`, {
        signals: [{ trajectory_uid: t.trajectory_uid, name: 'score', value: 0, source: 'verifier' }],
      });
      expect((await server.pool.store.getGroup('train', 'g2'))?.state).toBe('ready');
      expect(await refusals(server)).toHaveLength(1);
    });

    it('does all of it where the operator sets trust_agent_reward on the channel (Claw-R1 clients)', async () => {
      const server = await start();
      const setting = await call('PUT', `${server.url}/v1/channels/clawr1`, { trust_agent_reward: true });
      expect(setting.json.config.trust_agent_reward).toBe(true);
      const t = await episode(server, { group_id: 'g3', channel: 'clawr1', n_rollouts: 1 });
      expect(
        (await call('POST', `${t.base_url}/register_trajectory`, { metadata: { task: 'x' } })).status,
      ).toBe(200);
      const signal = await call('POST', `${t.base_url}/signals`, {
        signals: [{ name: 'env', value: 1, source: 'env' }],
      });
      expect(signal.json.signals[0].source).toBe('env');
      const done = await call('POST', `${t.base_url}/complete_trajectory`, { reward: 1 });
      expect(done.json).toMatchObject({ status: 'complete', reward: 1 });
      expect(await refusals(server)).toEqual([]);
    });
  });

  describe(`scoped keys, on ${name}`, () => {
    it("an agent key cannot open a task's rollout (its group would free and score a scheduled prompt) unless the channel trusts agents", async () => {
      const server = await start({
        apiKeys: [`${AGENT}:agent`, `${RUNNER}:agent,runner`, `${TRAINER}:trainer`],
      });
      await server.pool.registerPrompts('train', [{ taskId: 'sum-1', taskSet: 'default' }]);
      const [claimed] = await server.pool.nextPrompts('train', 1);
      expect(claimed?.taskId).toBe('sum-1');
      const opened = await call(
        'POST',
        `${server.url}/init_trajectory`,
        { metadata: { task_id: 'sum-1' } },
        AGENT,
      );
      expect(opened.status).toBe(403);
      expect(opened.json.error.message).toMatch(/^opening a rollout of a task \(metadata\.task_id\)/);
      expect((await server.pool.listTrajectories({ limit: 10, offset: 0 })).total).toBe(0);
      // The claim still holds: the prompt is not handed out again.
      expect(await server.pool.nextPrompts('train', 1)).toEqual([]);
      expect(
        (await call('POST', `${server.url}/init_trajectory`, { metadata: { task_id: 'sum-1' } }, RUNNER))
          .status,
      ).toBe(200);
      await server.pool.configureChannel('trusted', { trust_agent_reward: true });
      const trusted = { channel: 'trusted', metadata: { task_id: 'sum-1' } };
      expect((await call('POST', `${server.url}/init_trajectory`, trusted, AGENT)).status).toBe(200);
    });

    it("an agent key opens trajectories and calls LLMs, but cannot write steps, complete or score by id, or join another's group", async () => {
      const server = await start({
        apiKeys: [`${AGENT}:agent`, `${RUNNER}:agent,runner`, `${TRAINER}:trainer`],
      });
      const theirs = await episode(server, { group_id: 'g4', n_rollouts: 2 }, RUNNER);
      const mine = await episode(server, {}, AGENT);
      const id = mine.trajectory_uid;
      const step = {
        trajectory_uid: 'planted',
        prompt_uid: 'g4',
        step_index: 0,
        prompt_ids: [1],
        response_ids: [2],
        is_last: true,
        reward: 1,
      };
      const attempts: [string, string, unknown][] = [
        ['POST', '/v1/steps', { steps: [step] }],
        ['POST', '/submit_steps', [step]],
        ['POST', `/v1/trajectories/${id}/complete`, { reward: 1 }],
        ['POST', `/complete_trajectory/${theirs.trajectory_uid}`, { reward: 1 }],
        [
          'POST',
          '/v1/signals',
          { signals: [{ trajectory_uid: id, name: 'score', value: 1, source: 'verifier' }] },
        ],
        ['POST', `/v1/trajectories/${id}/metadata`, { metadata: { a: 1 } }],
        ['PUT', '/v1/policy-version', { version: 9 }],
        ['GET', '/v1/trajectories', undefined],
        // Holding a group back from training (ActGuide's pending_guidance) is the owner's.
        ['POST', '/init_trajectory', { group_id: 'g6', hold_for_guidance: 0.5 }],
        ['POST', '/v1/groups/guidance', { channel: 'train', group_id: 'g4', action: 'hold' }],
      ];
      for (const [method, path, body] of attempts) {
        const res = await call(method, `${server.url}${path}`, body, AGENT);
        expect([method, path, res.status]).toEqual([method, path, 403]);
      }
      const join = await call('POST', `${server.url}/init_trajectory`, { group_id: 'g4' }, AGENT);
      expect(join.status).toBe(403);
      expect(join.json.error.message).toMatch(/joining group g4/);
      // Its own new group is fine; the runner adds rollouts to the group it opened.
      expect((await call('POST', `${server.url}/init_trajectory`, { group_id: 'g5' }, AGENT)).status).toBe(
        200,
      );
      expect((await call('POST', `${server.url}/init_trajectory`, { group_id: 'g4' }, RUNNER)).status).toBe(
        200,
      );
      expect(await server.pool.getTrajectory('planted')).toBeNull();
      expect(await server.pool.store.getGroup('train', 'g6')).toBeNull();
      expect((await server.pool.store.getGroup('train', 'g4'))?.state).not.toBe('pending_guidance');
      expect(await server.pool.getTrajectory(id)).toMatchObject({ status: 'open', reward: null });
      expect((await server.pool.getTrajectory(theirs.trajectory_uid))?.status).toBe('open');
      expect((await server.pool.store.getGroup('train', 'g4'))?.nTrajectories).toBe(2);
      expect(await refusals(server)).toEqual([
        expect.objectContaining({ trajectory_uid: null, attempts: ['POST /init_trajectory'] }),
      ]);
      // The runner completes by id and posts what the gym's bridge refused.
      const done = await call('POST', `${server.url}/v1/trajectories/${id}/complete`, { reward: 0 }, RUNNER);
      expect(done.json).toMatchObject({ status: 'complete', reward: 0 });
      const posted = await call(
        'POST',
        `${server.url}/v1/trajectories/${id}/refusals`,
        { attempts: ['GET /v1/stats'], reason: 'outside the LLM routes' },
        RUNNER,
      );
      expect(posted.status).toBe(200);
      expect((await refusals(server)).at(-1)).toMatchObject({ by: 'bridge', attempts: ['GET /v1/stats'] });
    });
  });
}
