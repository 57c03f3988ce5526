import { describe, expect, it } from 'vitest';
import type { SignalOut } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import type { BatchJson } from '../packages/core/src/serving/json-batch.js';
import { callJson } from './support/http.js';
import { episode } from './support/steps.js';
import { testServers } from './support/test-servers.js';

/*
 * Signals over real HTTP on loopback and a real SQLite file: the trainer routes, the capability route
 * under a trajectory's base_url, scopes with API keys, and the `json` batch carrying current signals.
 */

const { serve } = testServers('signals');

const request = callJson;
const post = (url: string, body: unknown, key?: string) => request('POST', url, body, key);
const get = (url: string, key?: string) => request('GET', url, undefined, key);

async function init(
  server: RunningServer,
  key?: string,
): Promise<{ trajectory_uid: string; base_url: string }> {
  const { status, json } = await post(`${server.url}/init_trajectory`, { group_id: 'p1' }, key);
  expect(status).toBe(200);
  return json;
}

describe('signals over HTTP', () => {
  it('POST /v1/signals stores trajectory- and step-level signals; GET reads history or the current ones', async () => {
    const server = await serve();
    await server.pool.submitSteps(episode('t1', 'g1', 2));
    const details = { checks: [{ id: 'a', ok: true }], judge: { model: 'x', rationale: 'fine' } };
    const first = await post(`${server.url}/v1/signals`, {
      signals: [
        { trajectory_uid: 't1', name: 'outcome', value: 1, source: 'verifier', details },
        { trajectory_uid: 't1', step_index: 1, name: 'format', value: 0, source: 'rule', version: 'r2' },
        { trajectory_uid: 't1', step_index: null, name: 'quality', value: 0.25, source: 'judge' },
      ],
    });
    expect(first.status).toBe(200);
    const added = first.json.signals as SignalOut[];
    expect(added[0]).toEqual({
      trajectory_uid: 't1',
      step_index: null,
      name: 'outcome',
      value: 1,
      source: 'verifier',
      version: '1',
      details,
      created_at: expect.any(Number),
    });
    expect(added[1]).toMatchObject({ step_index: 1, version: 'r2', details: {} });
    // The judge scores again: the old score stays as history, the new one is in force.
    const again = await post(`${server.url}/v1/signals`, {
      signals: [{ trajectory_uid: 't1', name: 'quality', value: 0.75, source: 'judge', version: 'v2' }],
    });
    expect(again.status).toBe(200);

    const all = await get(`${server.url}/v1/trajectories/t1/signals`);
    expect(all.status).toBe(200);
    expect(all.json.trajectory_uid).toBe('t1');
    expect(all.json.signals.map((s: SignalOut) => [s.name, s.value])).toEqual([
      ['outcome', 1],
      ['format', 0],
      ['quality', 0.25],
      ['quality', 0.75],
    ]);
    const current = await get(`${server.url}/v1/trajectories/t1/signals?current=true`);
    expect(current.json.signals.map((s: SignalOut) => [s.name, s.value, s.version])).toEqual([
      ['outcome', 1, '1'],
      ['format', 0, 'r2'],
      ['quality', 0.75, 'v2'],
    ]);
    expect((await get(`${server.url}/v1/trajectories/t1/signals?current=false`)).json.signals).toHaveLength(
      4,
    );
    expect((await get(`${server.url}/v1/trajectories/nope/signals`)).status).toBe(404);

    const events = await get(`${server.url}/v1/events?type=signal_added`);
    expect(events.json.events).toHaveLength(4);
    expect(events.json.events[0].data).toMatchObject({
      trajectory_uid: 't1',
      name: 'outcome',
      source: 'verifier',
    });
  });

  describe('bad input gets a 4xx naming the field, and stores nothing', () => {
    const good = { trajectory_uid: 't1', step_index: 0, name: 'ok', value: 1, source: 'rule' };
    const cases: [string, unknown, number, string][] = [
      ['malformed JSON', '{"signals": [', 400, 'body'],
      ['no signals field', {}, 400, 'signals'],
      ['an empty list', { signals: [] }, 400, 'signals'],
      ['an unknown source', { signals: [good, { ...good, source: 'oracle' }] }, 400, 'signals.1.source'],
      ['a value that is not a number', { signals: [{ ...good, value: '1' }] }, 400, 'signals.0.value'],
      ['a negative step index', { signals: [{ ...good, step_index: -1 }] }, 400, 'signals.0.step_index'],
      ['a fractional step index', { signals: [{ ...good, step_index: 0.5 }] }, 400, 'signals.0.step_index'],
      ['an empty name', { signals: [{ ...good, name: '' }] }, 400, 'signals.0.name'],
      [
        'a missing trajectory',
        { signals: [{ ...good, trajectory_uid: undefined }] },
        400,
        'signals.0.trajectory_uid',
      ],
      ['details that are not an object', { signals: [{ ...good, details: [1] }] }, 400, 'signals.0.details'],
      ['an unknown field', { signals: [{ ...good, score: 1 }] }, 400, 'signals.0'],
    ];
    for (const [what, body, status, field] of cases) {
      it(what, async () => {
        const server = await serve();
        await server.pool.submitSteps(episode('t1', 'g1', 2));
        const res = await post(`${server.url}/v1/signals`, body);
        expect(res.status).toBe(status);
        expect(res.json.error.field).toBe(field);
        expect(res.json.error.message).toContain(field === 'body' ? 'JSON' : field);
        expect(await server.pool.getSignals('t1')).toEqual([]);
      });
    }

    it('an unknown trajectory or step (404 naming it; the rest of the batch is not stored)', async () => {
      const server = await serve();
      await server.pool.submitSteps(episode('t1', 'g1', 2));
      const unknownTrajectory = await post(`${server.url}/v1/signals`, {
        signals: [good, { ...good, trajectory_uid: 'ghost' }],
      });
      expect(unknownTrajectory.status).toBe(404);
      expect(unknownTrajectory.json.error.message).toMatch(/signals\.1\.trajectory_uid: .*ghost/);
      const unknownStep = await post(`${server.url}/v1/signals`, {
        signals: [good, { ...good, step_index: null }, { ...good, step_index: 7 }],
      });
      expect(unknownStep.status).toBe(404);
      expect(unknownStep.json.error.message).toMatch(/signals\.2\.step_index: step 7/);
      expect(await server.pool.getSignals('t1')).toEqual([]);
      expect((await get(`${server.url}/v1/events?type=signal_added`)).json.events).toEqual([]);
    });

    it('a bad current flag on GET', async () => {
      const server = await serve();
      await server.pool.submitSteps(episode('t1', 'g1', 2));
      const res = await get(`${server.url}/v1/trajectories/t1/signals?current=yes`);
      expect(res.status).toBe(400);
      expect(res.json.error.field).toBe('current');
    });
  });

  it('the json batch carries each trajectory’s current signals', async () => {
    const server = await serve();
    await server.pool.submitSteps([...episode('a', 'g', 2, 1), ...episode('b', 'g', 2, 0, 5)], {
      nRollouts: 2,
    });
    await post(`${server.url}/v1/signals`, {
      signals: [
        { trajectory_uid: 'a', name: 'judge', value: 0.1, source: 'judge' },
        {
          trajectory_uid: 'a',
          step_index: 0,
          name: 'tool_ok',
          value: 1,
          source: 'env',
          details: { tool: 'ls' },
        },
      ],
    });
    await post(`${server.url}/v1/signals`, {
      signals: [{ trajectory_uid: 'a', name: 'judge', value: 0.9, source: 'judge' }],
    });
    const res = await post(`${server.url}/v1/batches/lease`, {
      channel: 'train',
      batch_size: 1,
      n_rollouts: 2,
    });
    expect(res.status).toBe(200);
    const batch = res.json as BatchJson;
    const byId = new Map(batch.groups[0]!.trajectories.map((t) => [t.trajectory_uid, t.signals]));
    expect(byId.get('a')!.map((s) => [s.step_index, s.name, s.value, s.details])).toEqual([
      [0, 'tool_ok', 1, { tool: 'ls' }],
      [null, 'judge', 0.9, {}],
    ]);
    expect(byId.get('b')).toEqual([]);
  });

  describe('under a trajectory’s base_url (the capability)', () => {
    it('writes signals for its own trajectory only, before and after it completes (a channel that trusts agents)', async () => {
      const server = await serve();
      // Claw-R1's black-box clients score and complete their own episodes: the operator opts in.
      await server.pool.configureChannel('train', { trust_agent_reward: true });
      const mine = await init(server);
      const other = await init(server);
      const ok = await post(`${mine.base_url}/signals`, {
        signals: [{ name: 'env_reward', value: 0.5, source: 'env', details: { turns: 3 } }],
      });
      expect(ok.status).toBe(200);
      expect(ok.json.signals).toEqual([
        {
          trajectory_uid: mine.trajectory_uid,
          step_index: null,
          name: 'env_reward',
          value: 0.5,
          source: 'env',
          version: '1',
          details: { turns: 3 },
          created_at: expect.any(Number),
        },
      ]);
      // Naming its own trajectory is allowed; naming another one is refused, and nothing is stored.
      const same = await post(`${mine.base_url}/signals`, {
        signals: [{ trajectory_uid: mine.trajectory_uid, name: 'x', value: 1, source: 'rule' }],
      });
      expect(same.status).toBe(200);
      const foreign = await post(`${mine.base_url}/signals`, {
        signals: [
          { name: 'x', value: 2, source: 'rule' },
          { trajectory_uid: other.trajectory_uid, name: 'x', value: 3, source: 'rule' },
        ],
      });
      expect(foreign.status).toBe(403);
      expect(foreign.json.error).toMatchObject({
        type: 'permission_error',
        param: 'signals.1.trajectory_uid',
      });
      expect(await server.pool.getSignals(other.trajectory_uid)).toEqual([]);
      expect((await server.pool.getSignals(mine.trajectory_uid)).map((s) => s.value)).toEqual([0.5, 1]);
      // A base_url with the wrong group is no capability at all.
      const wrongGroup = `${server.url}/${mine.trajectory_uid}/p2/v1/signals`;
      expect((await post(wrongGroup, { signals: [{ name: 'x', value: 1, source: 'rule' }] })).status).toBe(
        404,
      );
      // Environments often score after the episode ended.
      expect((await post(`${mine.base_url}/complete_trajectory`, { status: 'aborted' })).status).toBe(200);
      const late = await post(`${mine.base_url}/signals`, {
        signals: [{ name: 'late', value: 1, source: 'env' }],
      });
      expect(late.status).toBe(200);
      // Errors have OpenAI's shape here, naming the field in `param`.
      const bad = await post(`${mine.base_url}/signals`, {
        signals: [{ name: 'x', value: 1, source: 'nope' }],
      });
      expect(bad.status).toBe(400);
      expect(bad.json.error.param).toBe('signals.0.source');
      const noStep = await post(`${mine.base_url}/signals`, {
        signals: [{ step_index: 0, name: 'x', value: 1, source: 'env' }],
      });
      expect(noStep.status).toBe(404);
      expect(noStep.json.error.message).toMatch(/signals\.0\.step_index/);
    });

    it('may name the step it was answered a moment ago (stored before the answer)', async () => {
      const server = await serve({ engines: ['sim'] });
      const t = await init(server);
      const chat = await post(`${t.base_url}/chat/completions`, {
        model: 'policy',
        messages: [{ role: 'user', content: 'hello' }],
        max_tokens: 8,
      });
      expect(chat.status).toBe(200);
      const res = await post(`${t.base_url}/signals`, {
        signals: [{ step_index: 0, name: 'tool_ok', value: 1 }],
      });
      expect(res.status).toBe(200);
      expect(res.json.signals[0]).toMatchObject({
        trajectory_uid: t.trajectory_uid,
        step_index: 0,
        source: 'agent',
      });
    });
  });

  it('enforces scopes: runner, trainer or admin on the pool routes, agent on the capability route', async () => {
    const agentKey = 'agent-key-0123456789abcdef';
    const trainerKey = 'trainer-key-0123456789abcdef';
    const adminKey = 'admin-key-0123456789abcdef';
    const server = await serve({
      apiKeys: [`${agentKey}:agent`, `${trainerKey}:trainer`, `${adminKey}:admin`],
    });
    const t = await init(server, agentKey);
    const body = (value: number) => ({
      signals: [{ trajectory_uid: t.trajectory_uid, name: 'judge', value, source: 'judge' }],
    });
    const signalsUrl = `${server.url}/v1/signals`;
    const readUrl = `${server.url}/v1/trajectories/${t.trajectory_uid}/signals`;
    expect((await post(signalsUrl, body(0))).status).toBe(401);
    expect((await post(signalsUrl, body(0), agentKey)).status).toBe(403);
    expect((await get(readUrl, agentKey)).status).toBe(403);
    expect((await post(signalsUrl, body(1), trainerKey)).status).toBe(200);
    expect((await post(signalsUrl, body(2), adminKey)).status).toBe(200);
    expect((await get(readUrl, trainerKey)).json.signals.map((s: SignalOut) => s.value)).toEqual([1, 2]);
    // The capability route wants the agent scope (admin holds every scope).
    const capability = { signals: [{ name: 'env', value: 3 }] };
    expect((await post(`${t.base_url}/signals`, capability)).status).toBe(401);
    expect((await post(`${t.base_url}/signals`, capability, trainerKey)).status).toBe(403);
    expect((await post(`${t.base_url}/signals`, capability, agentKey)).status).toBe(200);
    expect((await post(`${t.base_url}/signals`, capability, adminKey)).status).toBe(200);
    expect(
      (await get(`${readUrl}?current=true`, adminKey)).json.signals.map((s: SignalOut) => s.value),
    ).toEqual([2, 3]);
  });
});
