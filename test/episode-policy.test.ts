import { describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { testServers } from './support/test-servers.js';

/*
 * The episode policy at the gateway (issue 42, docs/datapool.md#episode-policy): per-channel limits on
 * turns and tokens, tightened per trajectory at init, and forced sampling settings, on every protocol
 * the gateway speaks. Real HTTP on loopback, the built-in sim, a real SQLite file (and PostgreSQL).
 */

const { serve, dir } = testServers('episode', { engines: ['sim'] });

type Json = Record<string, unknown>;

async function post(url: string, body: unknown): Promise<{ status: number; json: Json }> {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Json };
}

async function configure(server: RunningServer, channel: string, patch: Json): Promise<Json> {
  const res = await fetch(`${server.url}/v1/channels/${channel}`, {
    method: 'PUT',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(patch),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { config: Json }).config;
}

async function init(
  server: RunningServer,
  body: Json = {},
): Promise<{ trajectory_uid: string; base_url: string }> {
  const { status, json } = await post(`${server.url}/init_trajectory`, { channel: 'limited', ...body });
  expect(status).toBe(200);
  return json as { trajectory_uid: string; base_url: string };
}

const USER = 'list three colours';

/** One LLM call in each protocol the gateway speaks, on a trajectory's base_url. */
const PROTOCOLS: Record<string, (base: string, sampling: Json) => Promise<{ status: number; json: Json }>> = {
  chat: (base, sampling) =>
    post(`${base}/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: USER }],
      ...sampling,
    }),
  completions: (base, sampling) => post(`${base}/completions`, { model: 'm', prompt: USER, ...sampling }),
  responses: (base, { max_tokens, ...sampling }) =>
    post(`${base}/responses`, {
      model: 'm',
      input: USER,
      ...(max_tokens !== undefined ? { max_output_tokens: max_tokens } : {}),
      ...sampling,
    }),
  messages: (base, { max_tokens, ...sampling }) =>
    post(`${base}/messages`, {
      model: 'm',
      max_tokens: max_tokens ?? 64,
      messages: [{ role: 'user', content: USER }],
      ...sampling,
    }),
};

/** The message of an error answer, in OpenAI's shape or Anthropic's. */
const errorMessage = (json: Json) => (json.error as { message: string }).message;

async function stepsOf(server: RunningServer, id: string) {
  const { items } = await server.pool.listSteps({ trajectoryId: id, limit: 100, offset: 0 });
  return items.sort((a, b) => a.index - b.index);
}

describe('episode limits on every protocol', () => {
  for (const [protocol, call] of Object.entries(PROTOCOLS)) {
    it(`${protocol}: a call past max_turns is refused naming the limit; the stored steps stay, the trajectory says why`, async () => {
      const server = await serve();
      await configure(server, 'limited', { episode: { max_turns: 2 } });
      const t = await init(server);
      for (let turn = 0; turn < 2; turn++) expect((await call(t.base_url, {})).status).toBe(200);
      const refused = await call(t.base_url, {});
      expect(refused.status).toBe(400);
      expect(errorMessage(refused.json)).toMatch(
        /episode limit reached: max_turns is 2 and this episode has used 2/,
      );
      // Each protocol's own error shape: Anthropic's on Messages, OpenAI's (with the code) elsewhere.
      if (protocol === 'messages') expect(refused.json.type).toBe('error');
      else expect(refused.json.error).toMatchObject({ code: 'episode_limit', param: 'max_turns' });
      // Refused again, the same way: the episode stays over.
      expect((await call(t.base_url, {})).status).toBe(400);
      expect(await stepsOf(server, t.trajectory_uid)).toHaveLength(2);
      const stored = await server.pool.getTrajectory(t.trajectory_uid);
      expect(stored?.status).toBe('open');
      expect(stored?.metadata.episode_limit).toEqual({ limit: 'max_turns', value: 2, used: 2 });
    });

    it(`${protocol}: forced sampling replaces the agent's values and the stored step records both`, async () => {
      const server = await serve();
      await configure(server, 'limited', {
        forced_sampling: { temperature: 0.25, top_p: 0.5, max_tokens: 3 },
      });
      const t = await init(server);
      const res = await call(t.base_url, { temperature: 1.5, max_tokens: 50 });
      expect(res.status).toBe(200);
      const [step] = await stepsOf(server, t.trajectory_uid);
      expect(step!.responseIds.length).toBeLessThanOrEqual(3);
      expect(step!.metadata).toMatchObject({ temperature: 0.25, top_p: 0.5, max_tokens: 3 });
      expect(step!.metadata.forced_sampling).toEqual({
        temperature: { agent: 1.5, forced: 0.25 },
        top_p: { agent: null, forced: 0.5 },
        max_tokens: { agent: 50, forced: 3 },
      });
    });
  }

  it('/generate: the prompt is the context; max_tokens is clamped to the total left, and a prompt at the limit is refused', async () => {
    const server = await serve();
    await configure(server, 'limited', {
      episode: { max_total_tokens: 24 },
      forced_sampling: { temperature: 0 },
    });
    const t = await init(server);
    const ids = (n: number) => Array.from({ length: n }, (_, i) => 100 + i);
    const ok = await post(`${server.url}/generate`, {
      trajectory_uid: t.trajectory_uid,
      prompt_ids: ids(20),
      sampling_params: { max_new_tokens: 100, temperature: 1 },
    });
    expect(ok.status).toBe(200);
    const response = ok.json.response_ids as number[];
    expect(response.length).toBeGreaterThan(0);
    expect(response.length).toBeLessThanOrEqual(4);
    const refused = await post(`${server.url}/generate`, {
      trajectory_uid: t.trajectory_uid,
      prompt_ids: ids(24),
      sampling_params: { max_new_tokens: 8 },
    });
    expect(refused.status).toBe(400);
    expect(errorMessage(refused.json)).toMatch(/max_total_tokens is 24 and this episode has used 24/);
    expect((await server.pool.getTrajectory(t.trajectory_uid))?.metadata.episode_limit).toMatchObject({
      limit: 'max_total_tokens',
    });
  });
});

describe('token budgets', () => {
  it('max_response_tokens: each call is clamped to what is left, so the episode never passes it; then it is refused', async () => {
    const server = await serve();
    await configure(server, 'limited', { episode: { max_response_tokens: 10 } });
    const t = await init(server);
    let refused: { status: number; json: Json } | null = null;
    for (let turn = 0; turn < 12 && refused === null; turn++) {
      const res = await PROTOCOLS.chat!(t.base_url, { max_tokens: 4 });
      if (res.status !== 200) refused = res;
    }
    expect(refused?.status).toBe(400);
    expect(errorMessage(refused!.json)).toMatch(/max_response_tokens is 10/);
    const steps = await stepsOf(server, t.trajectory_uid);
    const total = steps.reduce((n, s) => n + s.responseIds.length, 0);
    expect(total).toBe(10);
    // The last call was clamped below what the agent asked for, and its step says so.
    expect(steps.at(-1)!.metadata.forced_sampling).toMatchObject({ max_tokens_clamped: { asked: 4 } });
  });

  it('max_prompt_tokens: the call after the context reached the limit is refused', async () => {
    const server = await serve();
    await configure(server, 'limited', { episode: { max_prompt_tokens: 8 } });
    const t = await init(server);
    expect((await PROTOCOLS.chat!(t.base_url, { max_tokens: 4 })).status).toBe(200);
    const refused = await PROTOCOLS.chat!(t.base_url, { max_tokens: 4 });
    expect(refused.status).toBe(400);
    expect(errorMessage(refused.json)).toMatch(/^episode limit reached: max_prompt_tokens is 8/);
  });
});

describe('who sets the limits', () => {
  it('a trajectory tightens its channel limits at init, never loosens them', async () => {
    const server = await serve();
    await configure(server, 'limited', { episode: { max_turns: 3 } });
    const tight = await init(server, { episode: { max_turns: 1 } });
    expect((await PROTOCOLS.chat!(tight.base_url, {})).status).toBe(200);
    expect((await PROTOCOLS.chat!(tight.base_url, {})).status).toBe(400);
    const loose = await init(server, { episode: { max_turns: 10 } });
    for (let turn = 0; turn < 3; turn++) expect((await PROTOCOLS.chat!(loose.base_url, {})).status).toBe(200);
    const refused = await PROTOCOLS.chat!(loose.base_url, {});
    expect(errorMessage(refused.json)).toMatch(/max_turns is 3/);
  });

  it('nobody may set episode_limit at init, and a bad limit is a 400 naming the field; nothing is created', async () => {
    const server = await serve();
    const claimed = await post(`${server.url}/init_trajectory`, { metadata: { episode_limit: 'max_turns' } });
    expect(claimed.status).toBe(400);
    expect(errorMessage(claimed.json)).toMatch(/^metadata\.episode_limit: set by the gateway/);
    const bad = await post(`${server.url}/init_trajectory`, { episode: { max_turns: 0 } });
    expect(bad.status).toBe(400);
    expect(errorMessage(bad.json)).toMatch(/^episode\.max_turns/);
    const badChannel = await fetch(`${server.url}/v1/channels/limited`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ forced_sampling: { top_p: 0 } }),
    });
    expect(badChannel.status).toBe(400);
    expect((await server.pool.listTrajectories({ limit: 10, offset: 0 })).total).toBe(0);
  });

  it('a channel patch keeps the episode settings it does not name', async () => {
    const server = await serve();
    await configure(server, 'limited', { episode: { max_turns: 4 }, forced_sampling: { temperature: 0.5 } });
    const config = await configure(server, 'limited', { episode: { max_response_tokens: 100 } });
    expect(config.episode).toEqual({
      max_turns: 4,
      max_prompt_tokens: null,
      max_response_tokens: 100,
      max_total_tokens: null,
    });
    expect(config.forced_sampling).toEqual({ temperature: 0.5, top_p: null, max_tokens: null });
  });
});

describe('the limits hold across a restart (the session is rebuilt from the store)', () => {
  const stores: [string, () => Promise<{ options: Json; cleanup(): Promise<void> }>][] = [
    ['SQLite', async () => ({ options: { dbPath: `${dir()}/restart.db` }, cleanup: async () => {} })],
  ];
  if (pgUrl)
    stores.push([
      'PostgreSQL',
      async () => {
        const schema = freshSchema('stepwise_episode');
        return { options: { pg: { url: pgUrl, schema } }, cleanup: () => dropSchema(schema) };
      },
    ]);
  for (const [name, open] of stores) {
    it(name, async () => {
      const { options, cleanup } = await open();
      const start = () => startServer({ dbPath: '', port: 0, engines: ['sim'], ...options });
      let second: RunningServer | null = null;
      try {
        const first = await start();
        await configure(first, 'limited', { episode: { max_turns: 3, max_response_tokens: 9 } });
        const t = await init(first);
        expect((await PROTOCOLS.chat!(t.base_url, { max_tokens: 4 })).status).toBe(200);
        expect((await PROTOCOLS.chat!(t.base_url, { max_tokens: 4 })).status).toBe(200);
        await first.close();
        second = await start();
        const base = t.base_url.replace(first.url, second.url);
        // 8 response tokens stored: the third call may generate only 1 more.
        expect((await PROTOCOLS.chat!(base, { max_tokens: 4 })).status).toBe(200);
        const steps = await stepsOf(second, t.trajectory_uid);
        expect(steps.map((s) => s.responseIds.length)).toEqual([4, 4, 1]);
        const refused = await PROTOCOLS.chat!(base, { max_tokens: 4 });
        expect(errorMessage(refused.json)).toMatch(/max_turns is 3/);
      } finally {
        await second?.close();
        await cleanup();
      }
    });
  }
});
