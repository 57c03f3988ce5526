import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type RewardsConfigFile, resolveRewardsConfig } from '../packages/core/src/rewards/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { eventually, type FakeServer, fakeServer } from './rewards-support.js';
import { callJson, type Json } from './support/http.js';

/*
 * The rewards API over real HTTP: `stepwise serve` with a rewards config, the official openai client
 * as the agent (sim engine), a fake reward model on loopback, and plain fetch for the routes.
 */

let dir: string;
let n = 0;
const servers: RunningServer[] = [];
const fakes: FakeServer[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-rewards-http-'));
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
  await Promise.all(fakes.splice(0).map((f) => f.close()));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function serve(
  rewards: RewardsConfigFile,
  options: Partial<ServerOptions> = {},
): Promise<RunningServer> {
  const server = await startServer({
    dbPath: join(dir, `h${n++}.db`),
    port: 0,
    engines: ['sim'],
    rewards: resolveRewardsConfig(rewards),
    ...options,
  });
  servers.push(server);
  return server;
}

async function rm(answer: Parameters<typeof fakeServer>[0]): Promise<FakeServer> {
  const f = await fakeServer(answer);
  fakes.push(f);
  return f;
}

const call = callJson;

/** One episode through the gateway: the sim echoes the user's message as the answer. */
async function episode(server: RunningServer, say: string, channel = 'train', key?: string): Promise<string> {
  const init = await call('POST', `${server.url}/init_trajectory`, { channel }, key);
  expect(init.status).toBe(200);
  const client = new OpenAI({ baseURL: init.json.base_url, apiKey: key ?? 'unused', maxRetries: 0 });
  await client.chat.completions.create({ model: 'sim', messages: [{ role: 'user', content: say }] });
  const done = await call(
    'POST',
    `${server.url}/v1/trajectories/${init.json.trajectory_uid}/complete`,
    {},
    key,
  );
  expect(done.status).toBe(200);
  return init.json.trajectory_uid;
}

const workers = {
  concurrency: 2,
  timeout_ms: 5_000,
  max_attempts: 2,
  backoff_ms: 20,
  backoff_max_ms: 50,
  poll_ms: 20,
};

function config(rmUrl: string, extra: Partial<RewardsConfigFile> = {}): RewardsConfigFile {
  return {
    functions: {
      exact: { plugin: 'rule', params: { kind: 'regex', pattern: '\\b42\\b' } },
      rm: { plugin: 'rm', params: { url: `${rmUrl}/score` } },
    },
    channels: { train: { functions: ['exact', 'rm'], combination: '0.5*exact + 0.5*rm' } },
    workers,
    ...extra,
  };
}

describe('POST /compute_reward', () => {
  it('computes, combines and answers the reward synchronously; computes a version once unless asked again', async () => {
    const model = await rm(() => ({ body: '{"score": 0.5}' }));
    const server = await serve(config(model.url));
    const id = await episode(server, 'The answer is 42.');
    const { status, json } = await call('POST', `${server.url}/compute_reward`, {
      trajectory_uid: id,
      wait_ms: 10_000,
    });
    expect(status).toBe(200);
    expect(json).toMatchObject({
      trajectory_uid: id,
      status: 'done',
      reward: 0.75,
      combined: { signal: 'reward', value: 0.75, inputs: { exact: 1, rm: 0.5 }, reward_written: true },
      missing: [],
      functions: { exact: { state: 'done', value: 1 }, rm: { state: 'done', value: 0.5 } },
    });
    // The completion queued the same jobs: they ran once.
    expect(model.requests).toHaveLength(1);
    expect(model.requests[0]!.body).toMatchObject({ trajectory_uid: id, final_answer: 'The answer is 42.' });
    const t = await call('GET', `${server.url}/v1/trajectories/${id}`);
    expect(t.json.reward).toBe(0.75);

    const again = await call('POST', `${server.url}/compute_reward`, {
      trajectory_uid: id,
      recompute: true,
      functions: ['rm'],
    });
    expect(again.json).toMatchObject({ status: 'done', reward: 0.75 });
    expect(Object.keys(again.json.functions)).toEqual(['rm']);
    expect(model.requests).toHaveLength(2);
  });

  it('answers 202 with the job ids when the result takes longer than wait_ms, and the jobs go on', async () => {
    const model = await rm(() => ({ body: '{"score": 1}', delayMs: 800 }));
    const server = await serve(config(model.url));
    const id = await episode(server, 'no number here');
    const pending = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id, wait_ms: 50 });
    expect(pending.status).toBe(202);
    expect(pending.json.status).toBe('pending');
    expect(pending.json.job_ids.length).toBeGreaterThan(0);
    const rmJob = pending.json.functions.rm.job_id;
    const job = await eventually(async () => {
      const { json } = await call('GET', `${server.url}/v1/rewards/jobs/${rmJob}`);
      return json.state === 'done' ? json : null;
    });
    expect(job).toMatchObject({ function: 'rm', trajectory_uid: id, kind: 'function', attempts: 1 });
    const done = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id });
    expect(done.status).toBe(200);
    expect(done.json).toMatchObject({
      status: 'done',
      reward: 0.5,
      functions: { exact: { value: 0 }, rm: { value: 1 } },
    });
  });

  it('works with the store on its own thread (the queue has its own connection to the file)', async () => {
    const model = await rm(() => ({ body: '{"reward": 1}' }));
    const server = await serve(config(model.url), { storeThread: 'worker' });
    const id = await episode(server, 'it is 42');
    const { status, json } = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id });
    expect(status).toBe(200);
    expect(json).toMatchObject({ status: 'done', reward: 1 });
  });

  it('reports a failed function with its error, and no reward (never a silent 0)', async () => {
    const model = await rm(() => ({ status: 500, body: 'model crashed' }));
    const server = await serve(config(model.url));
    const id = await episode(server, '42');
    const { status, json } = await call('POST', `${server.url}/compute_reward`, {
      trajectory_uid: id,
      wait_ms: 10_000,
    });
    expect(status).toBe(200);
    expect(json).toMatchObject({
      status: 'failed',
      reward: null,
      combined: null,
      missing: ['rm'],
      functions: {
        exact: { state: 'done', value: 1 },
        rm: {
          state: 'failed',
          value: null,
          attempts: 2,
          error: expect.stringMatching(/HTTP 500: model crashed/),
        },
      },
    });
    const t = await call('GET', `${server.url}/v1/trajectories/${id}`);
    expect(t.json.reward).toBeNull();
    const failed = await call('GET', `${server.url}/v1/rewards/jobs?state=failed&trajectory_uid=${id}`);
    expect(failed.json.jobs).toHaveLength(1);
    expect(failed.json.jobs[0].errors).toHaveLength(2);
    const ready = await call('GET', `${server.url}/v1/rewards/status/${id}`);
    expect(ready.json).toEqual({
      trajectory_uid: id,
      ready: false,
      required: ['exact', 'rm'],
      missing: ['rm'],
    });
  });

  it('answers bad requests in OpenAI shape, naming the field', async () => {
    const model = await rm(() => ({ body: '1' }));
    const server = await serve(config(model.url));
    const id = await episode(server, '42');
    const badWait = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id, wait_ms: -1 });
    expect(badWait.status).toBe(400);
    expect(badWait.json.error).toMatchObject({ type: 'invalid_request_error', param: 'wait_ms' });
    const extra = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id, mode: 'x' });
    expect(extra.status).toBe(400);
    const unknownFn = await call('POST', `${server.url}/compute_reward`, {
      trajectory_uid: id,
      functions: ['judge'],
    });
    expect(unknownFn.status).toBe(400);
    expect(unknownFn.json.error.param).toBe('functions.0');
    const missing = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: 'nope' });
    expect(missing.status).toBe(404);
    expect(missing.json.error.type).toBe('not_found_error');
    const other = await episode(server, '42', 'eval');
    const unconfigured = await call('POST', `${server.url}/compute_reward`, { trajectory_uid: other });
    expect(unconfigured.status).toBe(422);
    expect(unconfigured.json.error).toMatchObject({
      code: 'not_applicable',
      message: expect.stringMatching(/channel eval/),
    });
  });
});

describe('/v1/rewards', () => {
  it('describes plugins and functions, lists jobs, and recomputes a channel', async () => {
    const model = await rm(() => ({ body: '0.25' }));
    const server = await serve(config(model.url));
    const ids = [await episode(server, '42'), await episode(server, '41')];
    for (const id of ids)
      await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id, wait_ms: 10_000 });
    const info = await call('GET', `${server.url}/v1/rewards`);
    expect(info.json.plugins.map((p: Json) => p.name)).toContain('judge_group');
    expect(info.json.functions.rm).toMatchObject({
      plugin: 'rm',
      target: 'trajectory',
      source: 'rm',
      max_attempts: 2,
    });
    expect(info.json.channels.train.combination).toMatchObject({
      expression: '0.5*exact + 0.5*rm',
      required: ['exact', 'rm'],
    });
    expect(info.json.jobs.done).toBeGreaterThanOrEqual(6);

    const requests = model.requests.length;
    const re = await call('POST', `${server.url}/v1/rewards/recompute`, { channel: 'train', function: 'rm' });
    expect(re.status).toBe(202);
    expect(re.json).toMatchObject({ trajectories: 2, queued: 2 });
    await eventually(async () => model.requests.length === requests + 2);
    const jobs = await call('GET', `${server.url}/v1/rewards/jobs?function=rm&limit=10`);
    expect(jobs.json.jobs.map((j: Json) => j.reason)).toEqual(expect.arrayContaining(['recompute']));
    const bad = await call('POST', `${server.url}/v1/rewards/recompute`, { function: 'nope' });
    expect(bad.status).toBe(400);
    expect(bad.json.error.field).toBe('function');
  });

  it('keeps the scopes: compute_reward for agents, recompute for admins', async () => {
    const model = await rm(() => ({ body: '1' }));
    const [ak, tk, mk] = ['agent-key-0123456789', 'trainer-key-0123456789', 'admin-key-0123456789'];
    const server = await serve(config(model.url), {
      apiKeys: [`${ak}:agent,runner`, `${tk}:trainer`, `${mk}:admin`],
    });
    const id = await episode(server, '42', 'train', ak);
    expect((await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id }, ak)).status).toBe(200);
    expect((await call('POST', `${server.url}/compute_reward`, { trajectory_uid: id })).status).toBe(401);
    expect((await call('POST', `${server.url}/v1/rewards/recompute`, {}, tk)).status).toBe(403);
    expect((await call('POST', `${server.url}/v1/rewards/recompute`, {}, mk)).status).toBe(202);
    expect((await call('GET', `${server.url}/v1/rewards/jobs`, undefined, ak)).status).toBe(403);
    expect((await call('GET', `${server.url}/v1/rewards/jobs`, undefined, tk)).status).toBe(200);
  });
});
