import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { llmCallListener } from '../src/gateway/direct.js';
import { parseApiKey } from '../src/http/auth.js';
import { createApp } from '../src/server/app.js';
import { type RunningServer, type ServerOptions, startServer } from '../src/server/server.js';
import { type Listening, listen } from '../src/util/http-server.js';

/*
 * The LLM calls under a base_url are served by a node:http listener ahead of the Hono app
 * (src/gateway/direct.ts). Every answer it gives must be the one the Hono route gives for the same
 * request: the same request is sent over real HTTP to a server with the listener and, in process,
 * to the app's fetch handler over the same gateway and store.
 */

const AGENT_KEY = 'agent-key-0123456789abcdef';
const TRAINER_KEY = 'trainer-key-0123456789abcdef';
const KEY_SPECS = [`${AGENT_KEY}:agent`, `${TRAINER_KEY}:trainer`];

let dir: string;
const closing: (() => Promise<void>)[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-direct-'));
});
afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let dbCount = 0;
async function serve(options: Partial<ServerOptions> = {}): Promise<RunningServer> {
  const server = await startServer({
    dbPath: join(dir, `d${dbCount++}.db`),
    port: 0,
    engines: ['sim'],
    ...options,
  });
  closing.push(() => server.close());
  return server;
}

/**
 * A second listener over the server's gateway and store, built as startServer builds its own, that
 * counts the requests the direct listener took; and the Hono app alone, for the same requests.
 */
async function twoWays(server: RunningServer, keySpecs: string[]) {
  const apiKeys = keySpecs.map(parseApiKey);
  const app = createApp({ pool: server.pool, gateway: server.gateway, apiKeys });
  const direct = llmCallListener(server.gateway, apiKeys);
  let taken = 0;
  const listening: Listening = await listen(app.fetch, '127.0.0.1', 0, {
    direct: (req, res) => {
      const took = direct(req, res);
      if (took) taken++;
      return took;
    },
  });
  closing.push(() => listening.close());
  return { app, url: listening.url, taken: () => taken };
}

interface Sent {
  path: string;
  headers?: Record<string, string>;
  body: string | Buffer;
}

/** Status, content type and body of a request over HTTP. */
function overHttp(origin: string, sent: Sent): Promise<{ status: number; type: string; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(
      `${origin}${sent.path}`,
      { method: 'POST', headers: { 'content-type': 'application/json', ...sent.headers } },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({
            status: res.statusCode!,
            type: String(res.headers['content-type']),
            body: Buffer.concat(chunks).toString(),
          }),
        );
      },
    );
    req.on('error', reject);
    req.end(sent.body);
  });
}

async function inProcess(app: ReturnType<typeof createApp>, sent: Sent) {
  const res = await app.fetch(
    new Request(`http://127.0.0.1${sent.path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...sent.headers },
      body: sent.body,
    }),
  );
  return { status: res.status, type: String(res.headers.get('content-type')), body: await res.text() };
}

async function initTrajectory(url: string, key?: string) {
  const res = await fetch(`${url}/init_trajectory`, {
    method: 'POST',
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });
  expect(res.status).toBe(200);
  return (await res.json()) as { trajectory_uid: string; group_id: string };
}

const chat = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ model: 'm', messages: [{ role: 'user', content }], ...extra });

describe('gateway: LLM calls served straight from node:http', () => {
  it('answers every refused or bad call exactly as the Hono route does, and stores nothing', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const { app, url, taken } = await twoWays(server, KEY_SPECS);
    const t = await initTrajectory(url, AGENT_KEY);
    const base = `/${t.trajectory_uid}/${t.group_id}/v1`;
    const agent = { authorization: `Bearer ${AGENT_KEY}` };
    const cases: [string, Sent][] = [
      ['no key', { path: `${base}/chat/completions`, body: chat('x') }],
      [
        'a wrong key',
        {
          path: `${base}/chat/completions`,
          headers: { authorization: 'Bearer nope-0123456789abcdef' },
          body: chat('x'),
        },
      ],
      [
        'a trainer key',
        { path: `${base}/chat/completions`, headers: { 'x-api-key': TRAINER_KEY }, body: chat('x') },
      ],
      ['malformed JSON', { path: `${base}/chat/completions`, headers: agent, body: '{"messages": [' }],
      ['an empty body', { path: `${base}/completions`, headers: agent, body: '' }],
      ['n = 2', { path: `${base}/chat/completions`, headers: agent, body: chat('x', { n: 2 }) }],
      [
        'no messages',
        { path: `${base}/chat/completions`, headers: agent, body: JSON.stringify({ model: 'm' }) },
      ],
      [
        'an unknown trajectory',
        { path: `/${'0'.repeat(32)}/${t.group_id}/v1/chat/completions`, headers: agent, body: chat('x') },
      ],
      [
        'a wrong group',
        { path: `/${t.trajectory_uid}/other/v1/chat/completions`, headers: agent, body: chat('x') },
      ],
    ];
    for (const [what, sent] of cases) {
      const direct = await overHttp(url, sent);
      const hono = await inProcess(app, sent);
      expect(direct, what).toEqual(hono);
      expect(direct.status, what).toBeGreaterThanOrEqual(400);
      expect(JSON.parse(direct.body).error.message, what).toEqual(expect.any(String));
    }
    expect(taken()).toBe(cases.length);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it('takes the key from Authorization, X-Api-Key or the dashboard cookie, and answers as the Hono route', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const { app, url, taken } = await twoWays(server, KEY_SPECS);
    const t = await initTrajectory(url, AGENT_KEY);
    const ways: [string, Record<string, string>][] = [
      [
        `/${t.trajectory_uid}/${t.group_id}/v1/chat/completions?trace=1`,
        { authorization: `Bearer ${AGENT_KEY}` },
      ],
      [`/${t.trajectory_uid}/${t.group_id}/v1/chat/completions`, { 'x-api-key': AGENT_KEY }],
      [
        `/${t.trajectory_uid}/${t.group_id}/v1/chat/completions`,
        { cookie: `theme=dark; stepwise_key=${AGENT_KEY}` },
      ],
      ['/v1/chat/completions', { 'x-api-key': AGENT_KEY, 'x-stepwise-trajectory': t.trajectory_uid }],
    ];
    for (const [path, headers] of ways) {
      // The sim's echo policy answers the last user message: the same request, the same answer.
      const sent = { path, headers, body: chat('the same question') };
      const direct = await overHttp(url, sent);
      const hono = await inProcess(app, sent);
      expect(direct.status).toBe(200);
      expect(hono.status).toBe(200);
      const content = (body: string) => JSON.parse(body).choices[0].message.content;
      expect(content(direct.body)).toBe(content(hono.body));
      expect(content(direct.body)).toContain('the same question');
    }
    expect(taken()).toBe(ways.length);
    await server.gateway.completeTrajectory(t.trajectory_uid, { reward: 1 });
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps).toHaveLength(ways.length * 2);
  });

  it('reads a body as a fetch Request does (a leading byte-order mark is dropped)', async () => {
    const server = await serve();
    const { url, taken } = await twoWays(server, []);
    const t = await initTrajectory(url);
    const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(chat('héllo wörld'))]);
    const direct = await overHttp(url, {
      path: `/${t.trajectory_uid}/${t.group_id}/v1/chat/completions`,
      body,
    });
    expect(direct.status).toBe(200);
    expect(JSON.parse(direct.body).choices[0].message.content).toContain('héllo wörld');
    expect(taken()).toBe(1);
  });

  it('leaves every other form of these paths, and every other route, to the Hono app', async () => {
    const server = await serve();
    const { url, taken } = await twoWays(server, []);
    const t = await initTrajectory(url);
    const base = `/${t.trajectory_uid}/${t.group_id}/v1`;
    const trailingSlash = await overHttp(url, { path: `${base}/chat/completions/`, body: chat('x') });
    expect(trailingSlash.status).toBe(404);
    expect(JSON.parse(trailingSlash.body).error.message).toMatch(/no route/);
    // A percent-encoded id is decoded by the Hono route: this one is the trajectory's own.
    const encoded = await overHttp(url, {
      path: `/${t.trajectory_uid}/%${t.group_id.charCodeAt(0).toString(16)}${t.group_id.slice(1)}/v1/chat/completions`,
      body: chat('encoded'),
    });
    expect(encoded.status).toBe(200);
    const models = await fetch(`${url}${base}/models`);
    expect(models.status).toBe(200);
    expect(taken()).toBe(0);
    const direct = await overHttp(url, { path: `${base}/chat/completions`, body: chat('x') });
    expect(direct.status).toBe(200);
    expect(taken()).toBe(1);
  });

  it('leaves paths under /dashboard to the Hono app: a caller without a key is sent to the login page', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const { app, url, taken } = await twoWays(server, KEY_SPECS);
    const path = '/dashboard/x/v1/chat/completions';
    const direct = await overHttp(url, { path, body: chat('x') });
    const hono = await inProcess(app, { path, body: chat('x') });
    expect(direct.status).toBe(303);
    expect(hono.status).toBe(303);
    const keyed = { path, headers: { authorization: `Bearer ${AGENT_KEY}` }, body: chat('x') };
    expect(await overHttp(url, keyed)).toEqual(await inProcess(app, keyed));
    expect(taken()).toBe(0);
  });

  it("sends a stream's status and headers as soon as the engine's, before its first event", async () => {
    // An engine that answers with its headers at once and its first event 500 ms later.
    const chunk = JSON.stringify({
      id: 'c',
      object: 'chat.completion.chunk',
      model: 'm',
      prompt_token_ids: [1, 2],
      choices: [
        { index: 0, delta: { role: 'assistant', content: 'hi' }, token_ids: [7], finish_reason: 'stop' },
      ],
    });
    const engine = http.createServer((req, res) => {
      if (req.method !== 'POST') return void res.writeHead(404).end();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.flushHeaders();
      setTimeout(() => res.end(`data: ${chunk}\n\ndata: [DONE]\n\n`), 500);
    });
    await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
    closing.push(() => new Promise((r) => engine.close(() => r())));
    const server = await serve({
      engines: [`vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`],
    });
    const t = await initTrajectory(server.url);
    const sentAt = performance.now();
    const { headersAt, firstDataAt, text } = await new Promise<{
      headersAt: number;
      firstDataAt: number;
      text: string;
    }>((resolve, reject) => {
      const req = http.request(
        `${server.url}/${t.trajectory_uid}/${t.group_id}/v1/chat/completions`,
        { method: 'POST', headers: { 'content-type': 'application/json' } },
        (res) => {
          const headersAt = performance.now();
          expect(res.statusCode).toBe(200);
          expect(res.headers['content-type']).toMatch(/^text\/event-stream/);
          let firstDataAt = 0;
          let text = '';
          res.on('data', (data: Buffer) => {
            firstDataAt ||= performance.now();
            text += data.toString();
          });
          res.on('end', () => resolve({ headersAt, firstDataAt, text }));
        },
      );
      req.on('error', reject);
      req.end(chat('slow start', { stream: true }));
    });
    expect(text).toBe(`data: ${chunk}\n\ndata: [DONE]\n\n`);
    expect(firstDataAt - sentAt).toBeGreaterThanOrEqual(450);
    expect(headersAt - sentAt).toBeLessThan(firstDataAt - sentAt - 250);
    await server.gateway.completeTrajectory(t.trajectory_uid, { reward: null });
    expect((await server.pool.getTrajectorySteps(t.trajectory_uid)).map((s) => s.responseIds)).toEqual([[7]]);
  });
});
