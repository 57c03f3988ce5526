import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import type { ChatCompletionMessageParam } from 'openai/resources/chat/completions';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Trajectory } from '../packages/core/src/domain/index.js';
import { OPENCLAW_INTERNAL_MARKER } from '../packages/core/src/gateway/feedback.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { killAllServerProcesses, startServerProcess } from './support/server-process.js';

/*
 * Online sessions end to end, the way OpenClaw uses them: the official openai client as the agent on
 * a fixed base_url with a static `X-Stepwise-Session` header, streamed calls carrying
 * `prompt_cache_key: "<sessionId>:<n>"`, a growing history that ends in OpenClaw's internal-context
 * message; real HTTP on loopback, a real SQLite file and the built-in sim engine.
 */

let dir: string;
const servers: RunningServer[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-sessions-'));
});
afterEach(async () => {
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  await killAllServerProcesses();
  rmSync(dir, { recursive: true, force: true });
});

let dbCount = 0;
async function serve(options: Partial<ServerOptions> = {}): Promise<RunningServer> {
  const server = await startServer({
    dbPath: join(dir, `s${dbCount++}.db`),
    port: 0,
    engines: ['sim'],
    ...options,
  });
  servers.push(server);
  return server;
}

const openclaw = (
  server: RunningServer,
  headers: Record<string, string> = { 'X-Stepwise-Session': 'auto' },
) =>
  new OpenAI({
    baseURL: `${server.url}/v1`,
    apiKey: 'unused',
    maxRetries: 0,
    defaultHeaders: { 'User-Agent': 'openclaw/2026.9.6', ...headers },
  });

const internal: ChatCompletionMessageParam = {
  role: 'user',
  content: `${OPENCLAW_INTERNAL_MARKER}\nThanks for being perfect. Workspace: /home/me\n<<<END_OPENCLAW_INTERNAL_CONTEXT>>>`,
};

/** One streamed call, as OpenClaw makes it; returns the answer's text. */
async function call(
  client: OpenAI,
  history: ChatCompletionMessageParam[],
  extra: Record<string, unknown> = {},
): Promise<string> {
  const stream = await client.chat.completions.create({
    model: 'sim-qwen3',
    messages: [...history, internal],
    stream: true,
    ...extra,
  } as OpenAI.Chat.Completions.ChatCompletionCreateParamsStreaming);
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  return text;
}

/** A conversation: its history grows by the user's turn and the agent's answer on every call. */
function conversation(client: OpenAI, extra: () => Record<string, unknown> = () => ({})) {
  const history: ChatCompletionMessageParam[] = [{ role: 'system', content: 'You are my assistant.' }];
  return {
    history,
    async say(content: string): Promise<string> {
      history.push({ role: 'user', content });
      const answer = await call(client, history, extra());
      history.push({ role: 'assistant', content: answer });
      return answer;
    },
  };
}

async function sessionTrajectories(server: RunningServer, channel = 'online'): Promise<Trajectory[]> {
  const page = await server.pool.listTrajectories({ channel, limit: 500, offset: 0 });
  return page.items.filter((t) => t.metadata.source === 'session').sort((a, b) => a.createdAt - b.createdAt);
}

async function trajectoryOf(server: RunningServer, key: string, channel = 'online'): Promise<Trajectory[]> {
  return (await sessionTrajectories(server, channel)).filter((t) => t.metadata.session_key === key);
}

/** Steps are written behind the answer: wait until a trajectory holds n of them. */
async function stepsOf(server: RunningServer, id: string, n: number) {
  await expect.poll(async () => (await server.pool.getTrajectorySteps(id)).length).toBe(n);
  return server.pool.getTrajectorySteps(id);
}

const SESSION_A = '6f553265-9491-470f-9fc9-d2b8a9629b6a';
const SESSION_B = '0b7e1c7a-2f4d-4c55-9a53-6f1d2e9b8c41';

describe('online sessions on the fixed base_url', () => {
  it('maps interleaved sessions (prompt_cache_key) to one trajectory each, whatever the :<n> counter', async () => {
    const server = await serve();
    const client = openclaw(server);
    let counterA = 0;
    const a = conversation(client, () => ({ prompt_cache_key: `${SESSION_A}:${counterA}` }));
    const b = conversation(client, () => ({ prompt_cache_key: `${SESSION_B}:0` }));
    await a.say('[Thu 2026-12-03 05:31 UTC] list my files\n\nRuntime: agent=main | host=box');
    await b.say('[Thu 2026-12-03 05:32 UTC] what is on my calendar?');
    counterA = 3; // OpenClaw's counter moved on: still the same session
    await a.say('open notes.txt');
    await b.say('and tomorrow?');
    await a.say('summarize it');

    const [ta, ...moreA] = await trajectoryOf(server, SESSION_A);
    const [tb, ...moreB] = await trajectoryOf(server, SESSION_B);
    expect(moreA).toEqual([]);
    expect(moreB).toEqual([]);
    expect(ta!.id).toMatch(/^[0-9a-f]{32}$/);
    expect(ta).toMatchObject({
      channel: 'online',
      status: 'open',
      metadata: { session_key: SESSION_A, source: 'session', user_agent: 'openclaw/2026.9.6' },
    });
    const stepsA = await stepsOf(server, ta!.id, 3);
    const stepsB = await stepsOf(server, tb!.id, 2);
    expect(stepsA.map((s) => s.index)).toEqual([0, 1, 2]);
    // Each step holds the request as the agent sent it: its newest user turn is this session's.
    const lastUserTurn = (s: (typeof stepsA)[number]) =>
      s.messages!.filter((m) => m.role === 'user').at(-2)!.content;
    expect(stepsA.map(lastUserTurn)).toEqual([
      '[Thu 2026-12-03 05:31 UTC] list my files\n\nRuntime: agent=main | host=box',
      'open notes.txt',
      'summarize it',
    ]);
    expect(stepsB.map(lastUserTurn)).toEqual([
      '[Thu 2026-12-03 05:32 UTC] what is on my calendar?',
      'and tomorrow?',
    ]);
    expect(stepsA[1]!.metadata.model).toBe('sim-qwen3');
    // The history grows: each step's prompt extends the previous step's prompt.
    expect(stepsA[1]!.promptIds.length).toBeGreaterThan(stepsA[0]!.promptIds.length);

    const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as {
      gateway: { sessions: { opened: number; open: number } };
    };
    expect(stats.gateway.sessions).toMatchObject({ opened: 2, open: 2 });
    // The pool's idle sweep (which aborts) was moved behind the session idle close (which completes).
    expect((await server.pool.channelConfig('online')).idle_timeout_ms).toBe(2 * 30 * 60_000);
  });

  it('takes a literal session key from the header, in the channel X-Stepwise-Channel names', async () => {
    const server = await serve();
    const client = openclaw(server, { 'X-Stepwise-Session': 'alice-laptop', 'X-Stepwise-Channel': 'alice' });
    const chat = conversation(client);
    await chat.say('hello');
    await chat.say('again');
    const [t, ...more] = await trajectoryOf(server, 'alice-laptop', 'alice');
    expect(more).toEqual([]);
    expect(t!.channel).toBe('alice');
    await stepsOf(server, t!.id, 2);
    expect(await sessionTrajectories(server)).toEqual([]);
  });

  it('answers 400 naming prompt_cache_key when `auto` finds no session key in the body', async () => {
    const server = await serve();
    const client = openclaw(server);
    const error = await call(client, [{ role: 'user', content: 'hi' }]).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect(error).toMatchObject({ status: 400, param: 'prompt_cache_key' });
    expect((error as Error).message).toContain('prompt_cache_key');
    // The fallbacks, in order: user, safety_identifier, metadata.session_id.
    await call(client, [{ role: 'user', content: 'hi' }], { user: 'u-1' });
    await call(client, [{ role: 'user', content: 'hi' }], { metadata: { session_id: 'm-1' } });
    expect((await sessionTrajectories(server)).map((t) => t.metadata.session_key).sort()).toEqual([
      'm-1',
      'u-1',
    ]);
  });

  it('completes an idle session; the next call opens a new trajectory linked to it', async () => {
    const server = await serve({ gatewayOptions: { sessionIdleMs: 300 } });
    const chat = conversation(openclaw(server), () => ({ prompt_cache_key: `${SESSION_A}:0` }));
    await chat.say('remind me to call mom');
    const [first] = await trajectoryOf(server, SESSION_A);
    await expect
      .poll(async () => (await server.pool.getTrajectory(first!.id))!.status, { timeout: 5_000 })
      .toBe('complete');
    const closed = (await server.pool.getTrajectory(first!.id))!;
    expect(closed.nSteps).toBe(1);
    expect(closed.metadata.session_closed).toBe('idle');

    // The user comes back: thanks for the answer they got before the session ended.
    await chat.say('thanks, that worked');
    const all = await trajectoryOf(server, SESSION_A);
    expect(all).toHaveLength(2);
    expect(all[1]!.metadata).toMatchObject({ session_key: SESSION_A, previous_trajectory: first!.id });
    await expect.poll(async () => (await server.pool.getSignals(first!.id)).length).toBe(1);
    expect((await server.pool.getSignals(first!.id))[0]).toMatchObject({ stepIndex: 0, value: 1 });
    expect(server.gateway.stats().sessions).toMatchObject({ opened: 2 });
    expect(server.gateway.stats().sessions.closed_idle).toBeGreaterThanOrEqual(1);
  });

  it('records thanks (+1) and corrections (−1) on the step the user reacts to, and nothing for internal context', async () => {
    const server = await serve();
    const chat = conversation(openclaw(server), () => ({ prompt_cache_key: `${SESSION_A}:1` }));
    await chat.say('[Thu 2026-12-03 05:31 UTC] book a table for two\n\nRuntime: agent=main');
    await chat.say('thanks!');
    await chat.say("no, that's wrong: I said three people");
    // A tool round: after the agent's last answer come only a tool result and the internal context
    // (whose text says "thanks" and "perfect"): no user turn, no feedback.
    chat.history.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'book', arguments: '{"n":3}' } }],
    });
    chat.history.push({ role: 'tool', tool_call_id: 'c1', content: 'booked' });
    await call(openclaw(server), chat.history, { prompt_cache_key: `${SESSION_A}:2` });

    const [t] = await trajectoryOf(server, SESSION_A);
    await stepsOf(server, t!.id, 4);
    await expect.poll(async () => (await server.pool.getSignals(t!.id)).length).toBe(2);
    const signals = await server.pool.getSignals(t!.id);
    expect(signals).toEqual([
      expect.objectContaining({
        stepIndex: 0,
        name: 'user_feedback',
        value: 1,
        source: 'user',
        details: { implicit: true, kind: 'thanks', text_excerpt: 'thanks!' },
      }),
      expect.objectContaining({
        stepIndex: 1,
        name: 'user_feedback',
        value: -1,
        source: 'user',
        details: {
          implicit: true,
          kind: 'correction',
          text_excerpt: "no, that's wrong: I said three people",
        },
      }),
    ]);
    // Nothing more arrives later either (the writes are done once the trajectory completes).
    const done = await fetch(`${server.url}/v1/trajectories/${t!.id}/complete`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{}',
    });
    expect(done.status).toBe(200);
    expect(await server.pool.getSignals(t!.id)).toHaveLength(2);
    expect(server.gateway.stats().sessions.feedback).toEqual({ thanks: 1, correction: 1, lost: 0 });
  });

  it('opens one trajectory for concurrent first calls of one session', async () => {
    // The store on its own thread makes opening a trajectory truly asynchronous, so the calls overlap.
    const server = await serve({ storeThread: 'worker' });
    const client = openclaw(server);
    await call(client, [{ role: 'user', content: 'warm up' }], { user: 'another session' });
    await Promise.all(
      Array.from({ length: 8 }, (_, i) =>
        call(client, [{ role: 'user', content: `task ${i}` }], { prompt_cache_key: `${SESSION_B}:${i}` }),
      ),
    );
    const [t, ...more] = await trajectoryOf(server, SESSION_B);
    expect(more).toEqual([]);
    const steps = await stepsOf(server, t!.id, 8);
    expect(steps.map((s) => s.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
  });

  it('continues a session after a gateway restart (read back from the store)', async () => {
    const dbPath = join(dir, 'restart.db');
    const first = await startServer({ dbPath, port: 0, engines: ['sim'] });
    const before = conversation(openclaw(first), () => ({ prompt_cache_key: `${SESSION_A}:0` }));
    await before.say('hello');
    await first.close();

    const second = await serve({ dbPath });
    const after = conversation(openclaw(second), () => ({ prompt_cache_key: `${SESSION_A}:0` }));
    after.history.push(...before.history.slice(1));
    await after.say('thanks!');
    const [t, ...more] = await trajectoryOf(second, SESSION_A);
    expect(more).toEqual([]);
    expect((await stepsOf(second, t!.id, 2)).map((s) => s.index)).toEqual([0, 1]);
    await expect.poll(async () => (await second.pool.getSignals(t!.id)).map((s) => s.stepIndex)).toEqual([0]);
    expect(second.gateway.stats().sessions).toMatchObject({ restored: 1, opened: 0 });
  });

  it('keeps at most maxSessions open: the least recently used is completed', async () => {
    const server = await serve({ gatewayOptions: { maxSessions: 2 } });
    const client = openclaw(server);
    for (const key of ['s1', 's2', 's1', 's3'])
      await call(client, [{ role: 'user', content: key }], { user: key });
    const byKey = async (key: string) =>
      (await sessionTrajectories(server)).find((t) => t.metadata.session_key === key)!;
    // The session counts as closed once its completion is acknowledged (after the store shows it).
    await expect.poll(() => server.gateway.stats().sessions.closed_evicted).toBe(1);
    expect((await byKey('s2')).status).toBe('complete');
    expect((await byKey('s2')).metadata.session_closed).toBe('evicted');
    expect((await byKey('s1')).status).toBe('open');
    expect((await byKey('s3')).status).toBe('open');
    expect(server.gateway.stats().sessions).toMatchObject({ open: 2, max: 2, closed_evicted: 1 });
  });

  it('follows the API-key rules of the fixed base_url (agent scope)', async () => {
    const agentKey = 'agent-key-0123456789';
    const trainerKey = 'trainer-key-0123456789';
    const server = await serve({ apiKeys: [`${agentKey}:agent`, `${trainerKey}:trainer`] });
    const as = (apiKey: string) =>
      new OpenAI({
        baseURL: `${server.url}/v1`,
        apiKey,
        maxRetries: 0,
        defaultHeaders: { 'X-Stepwise-Session': 'auto' },
      });
    const ask = (apiKey: string) => call(as(apiKey), [{ role: 'user', content: 'hi' }], { user: 'k' });
    await expect(ask('wrong-key-0123456789')).rejects.toMatchObject({ status: 401 });
    await expect(ask(trainerKey)).rejects.toMatchObject({ status: 403 });
    await ask(agentKey);
    expect(await trajectoryOf(server, 'k')).toHaveLength(1);
  });

  it('refuses a session header together with a trajectory header, and a bad channel name', async () => {
    const server = await serve();
    const both = openclaw(server, { 'X-Stepwise-Session': 's', 'X-Stepwise-Trajectory': 'abc' });
    await expect(call(both, [{ role: 'user', content: 'hi' }])).rejects.toMatchObject({ status: 400 });
    const badChannel = openclaw(server, { 'X-Stepwise-Session': 's', 'X-Stepwise-Channel': '../x' });
    await expect(call(badChannel, [{ role: 'user', content: 'hi' }])).rejects.toMatchObject({
      status: 400,
      param: 'X-Stepwise-Channel',
    });
    expect(await sessionTrajectories(server)).toEqual([]);
  });
});

describe('stepwise gateway --session-idle-ms --max-sessions', () => {
  it('wires the options into the gateway process', async () => {
    const gateway = await startServerProcess(
      join(dir, 'cli.db'),
      ['--engine', 'sim', '--session-idle-ms', '200', '--max-sessions', '7'],
      {},
      'gateway',
    );
    const client = new OpenAI({
      baseURL: `${gateway.url}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      defaultHeaders: { 'X-Stepwise-Session': 'auto' },
    });
    await call(client, [{ role: 'user', content: 'hi' }], { prompt_cache_key: `${SESSION_A}:0` });
    const stats = async () =>
      (
        (await (await fetch(`${gateway.url}/v1/gateway/stats`)).json()) as {
          sessions: Record<string, number>;
        }
      ).sessions;
    expect(await stats()).toMatchObject({ idle_ms: 200, max: 7, opened: 1 });
    await expect.poll(async () => (await stats()).closed_idle, { timeout: 5_000 }).toBe(1);
  });
});
