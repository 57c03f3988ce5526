import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { parseApiKey } from '../packages/core/src/http/auth.js';
import { createApp } from '../packages/core/src/server/app.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';

/*
 * The LLM calls (chat/completions and completions under a base_url or at the fixed one, /generate,
 * models) have one HTTP path: a node:http listener ahead of the Hono app (packages/core/src/gateway/direct.ts).
 * Each answer is checked over real HTTP against what the API promises: OpenAI's error shape for the
 * call, the API's for a refused key or query, paths read as the app reads them.
 */

const AGENT_KEY = 'agent-key-0123456789abcdef';
const TRAINER_KEY = 'trainer-key-0123456789abcdef';
const ADMIN_KEY = 'admin-key-0123456789abcdefgh';
const KEY_SPECS = [`${AGENT_KEY}:agent`, `${TRAINER_KEY}:trainer`, `${ADMIN_KEY}:admin`];

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

interface Sent {
  method?: string;
  path: string;
  headers?: Record<string, string>;
  body?: string | Buffer;
}

interface Got {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
}

/** A request over HTTP, its path sent exactly as given. */
function overHttp(origin: string, sent: Sent): Promise<Got> {
  return new Promise((resolve, reject) => {
    const { hostname, port } = new URL(origin);
    const req = http.request(
      {
        hostname,
        port,
        path: sent.path,
        method: sent.method ?? 'POST',
        headers: {
          ...(sent.body !== undefined ? { 'content-type': 'application/json' } : {}),
          ...sent.headers,
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () =>
          resolve({ status: res.statusCode!, headers: res.headers, body: Buffer.concat(chunks).toString() }),
        );
      },
    );
    req.on('error', reject);
    req.end(sent.body);
  });
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

/** OpenAI's error body. */
const openaiError = (status: number, message: string, param: string | null, code: string) => ({
  error: {
    message,
    type: { 400: 'invalid_request_error', 404: 'not_found_error' }[status] ?? 'api_error',
    param,
    code,
  },
});

describe('gateway: the one HTTP path of the LLM calls', () => {
  it('answers every refused or bad call in its shape (a refused key in the API’s), and stores nothing', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const t = await initTrajectory(server.url, AGENT_KEY);
    const base = `/${t.trajectory_uid}/${t.group_id}/v1`;
    const agent = { authorization: `Bearer ${AGENT_KEY}` };
    const missingKey = {
      error: { code: 'unauthorized', message: 'missing API key (Authorization: Bearer <key>)' },
    };
    const malformed = openaiError(
      400,
      'body: malformed JSON (Unexpected end of JSON input)',
      'body',
      'invalid_request',
    );
    const cases: [string, Sent, number, unknown][] = [
      ['no key', { path: `${base}/chat/completions`, body: chat('x') }, 401, missingKey],
      [
        'a wrong key',
        {
          path: `${base}/chat/completions`,
          headers: { authorization: 'Bearer nope-0123456789abcdef' },
          body: chat('x'),
        },
        401,
        { error: { code: 'unauthorized', message: 'invalid API key' } },
      ],
      [
        'a trainer key',
        { path: `${base}/chat/completions`, headers: { 'x-api-key': TRAINER_KEY }, body: chat('x') },
        403,
        { error: { code: 'forbidden', message: 'this key lacks the agent scope' } },
      ],
      [
        'a NUL in the query',
        { path: `${base}/chat/completions?x=%00`, headers: agent, body: chat('x') },
        400,
        {
          error: {
            code: 'invalid_request',
            message: 'x: text holds U+0000 (NUL), which cannot be stored',
            field: 'x',
          },
        },
      ],
      [
        'malformed JSON',
        { path: `${base}/chat/completions`, headers: agent, body: '{"messages": [' },
        400,
        malformed,
      ],
      ['an empty body', { path: `${base}/completions`, headers: agent, body: '' }, 400, malformed],
      [
        'n = 2',
        { path: `${base}/chat/completions`, headers: agent, body: chat('x', { n: 2 }) },
        400,
        openaiError(
          400,
          'n: only n=1 is supported (each choice would be its own step; send n separate requests, one trajectory each)',
          'n',
          'invalid_request',
        ),
      ],
      [
        'no messages',
        { path: `${base}/chat/completions`, headers: agent, body: JSON.stringify({ model: 'm' }) },
        400,
        openaiError(400, 'messages: must be a non-empty array of messages', 'messages', 'invalid_request'),
      ],
      [
        'an unknown trajectory',
        { path: `/${'0'.repeat(32)}/${t.group_id}/v1/chat/completions`, headers: agent, body: chat('x') },
        404,
        openaiError(
          404,
          `trajectory ${'0'.repeat(32)} does not exist (create one with POST /init_trajectory)`,
          null,
          'not_found',
        ),
      ],
      [
        'an id that is no id, once decoded',
        { path: `/${t.trajectory_uid}/a%2Fb/v1/chat/completions`, headers: agent, body: chat('x') },
        400,
        openaiError(
          400,
          'group_id: may contain only letters, digits and . _ : -',
          'group_id',
          'invalid_request',
        ),
      ],
      [
        'no trajectory at the fixed base_url',
        { path: '/v1/chat/completions', headers: agent, body: chat('x') },
        400,
        openaiError(
          400,
          'no trajectory named: send the header X-Stepwise-Trajectory, set model to "<trajectory>__<model>", or use the base_url from POST /init_trajectory',
          'model',
          'missing_trajectory',
        ),
      ],
      [
        '/generate without ids',
        { path: '/generate', headers: agent, body: JSON.stringify({ prompt_ids: [] }) },
        400,
        openaiError(
          400,
          'prompt_ids: must be a non-empty array of token ids',
          'prompt_ids',
          'invalid_request',
        ),
      ],
      [
        '/generate with a NUL in the body',
        { path: '/generate', headers: agent, body: JSON.stringify({ prompt_ids: [1], x: 'a\u0000b' }) },
        400,
        openaiError(400, 'x: text holds U+0000 (NUL), which cannot be stored', 'x', 'invalid_request'),
      ],
      [
        '/generate without a key',
        { path: '/generate', body: JSON.stringify({ prompt_ids: [1] }) },
        401,
        missingKey,
      ],
      [
        'models of another group',
        { method: 'GET', path: `/${t.trajectory_uid}/other/v1/models`, headers: agent },
        404,
        openaiError(
          404,
          `trajectory ${t.trajectory_uid} has no group other (check the base_url; a trajectory joins the group its base_url names, as Claw-R1's prompt_uid, at register_trajectory, where its channel sets trust_agent_reward)`,
          null,
          'not_found',
        ),
      ],
    ];
    for (const [what, sent, status, body] of cases) {
      const got = await overHttp(server.url, sent);
      expect(got.status, what).toBe(status);
      expect(got.headers['content-type'], what).toBe('application/json');
      expect(JSON.parse(got.body), what).toEqual(body);
    }
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it('takes the key from Authorization, X-Api-Key or the dashboard cookie', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const t = await initTrajectory(server.url, AGENT_KEY);
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
      // The sim's echo policy answers the last user message.
      const got = await overHttp(server.url, { path, headers, body: chat('the same question') });
      expect(got.status, path).toBe(200);
      expect(JSON.parse(got.body).choices[0].message.content).toContain('the same question');
    }
    await server.gateway.completeTrajectory(t.trajectory_uid, { reward: 1 });
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toHaveLength(ways.length);
  });

  it('reads a body as a fetch Request does (a leading byte-order mark is dropped)', async () => {
    const server = await serve();
    const t = await initTrajectory(server.url);
    const body = Buffer.concat([Buffer.from([0xef, 0xbb, 0xbf]), Buffer.from(chat('héllo wörld'))]);
    const got = await overHttp(server.url, {
      path: `/${t.trajectory_uid}/${t.group_id}/v1/chat/completions`,
      body,
    });
    expect(got.status).toBe(200);
    expect(JSON.parse(got.body).choices[0].message.content).toContain('héllo wörld');
  });

  it('reads paths as the app does: encoded ids are decoded; a trailing slash or another method is no route', async () => {
    const server = await serve();
    const t = await initTrajectory(server.url);
    const base = `/${t.trajectory_uid}/${t.group_id}/v1`;
    const noRoute = (method: string, path: string) => ({
      error: { code: 'not_found', message: `no route for ${method} ${path}` },
    });
    const trailingSlash = await overHttp(server.url, { path: `${base}/chat/completions/`, body: chat('x') });
    expect(trailingSlash.status).toBe(404);
    expect(JSON.parse(trailingSlash.body)).toEqual(noRoute('POST', `${base}/chat/completions/`));
    const get = await overHttp(server.url, { method: 'GET', path: `${base}/chat/completions` });
    expect(JSON.parse(get.body)).toEqual(noRoute('GET', `${base}/chat/completions`));
    const postModels = await overHttp(server.url, { path: '/v1/models', body: '{}' });
    expect(JSON.parse(postModels.body)).toEqual(noRoute('POST', '/v1/models'));

    const encodedGroup = `%${t.group_id.charCodeAt(0).toString(16)}${t.group_id.slice(1)}`;
    const encoded = await overHttp(server.url, {
      path: `/${t.trajectory_uid}/${encodedGroup}/v1/chat/completions`,
      body: chat('encoded'),
    });
    expect(encoded.status).toBe(200);
    expect(JSON.parse(encoded.body).choices[0].message.content).toContain('encoded');
    const generate = await overHttp(server.url, {
      path: '/%67enerate',
      body: JSON.stringify({ prompt_ids: [1, 2], sampling_params: { max_new_tokens: 2 } }),
    });
    expect(generate.status).toBe(200);
    expect(JSON.parse(generate.body)).toMatchObject({ prompt_ids: [1, 2], engine_id: expect.any(String) });
    const dotted = await overHttp(server.url, {
      path: `/x/..${base}/chat/completions`,
      body: chat('dotted'),
    });
    expect(dotted.status).toBe(200);
    await server.gateway.completeTrajectory(t.trajectory_uid, { reward: null });
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toHaveLength(2);
  });

  it('answers models under a base_url and at the fixed one; a HEAD gets the headers alone', async () => {
    const server = await serve();
    const t = await initTrajectory(server.url);
    for (const path of [`/${t.trajectory_uid}/${t.group_id}/v1/models`, '/v1/models']) {
      const got = await overHttp(server.url, { method: 'GET', path });
      expect(got.status).toBe(200);
      expect(JSON.parse(got.body)).toMatchObject({ object: 'list', data: [{ object: 'model' }] });
      const head = await overHttp(server.url, { method: 'HEAD', path });
      expect(head.status).toBe(200);
      expect(head.headers['content-type']).toBe('application/json');
      expect(head.body).toBe('');
    }
  });

  it('leaves paths under /dashboard to the app: sign-in, then its admin scope', async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const path = '/dashboard/x/v1/chat/completions';
    const anonymous = await overHttp(server.url, { path, body: chat('x') });
    expect(anonymous.status).toBe(303);
    expect(anonymous.headers.location).toBe(`/dashboard/login?next=${encodeURIComponent(path)}`);
    const agent = await overHttp(server.url, { path, headers: { 'x-api-key': AGENT_KEY }, body: chat('x') });
    expect(agent.status).toBe(403);
    expect(JSON.parse(agent.body).error.message).toBe('this key lacks the admin scope');
    const admin = await overHttp(server.url, { path, headers: { 'x-api-key': ADMIN_KEY }, body: chat('x') });
    expect(admin.status).toBe(404);
    expect(JSON.parse(admin.body).error.code).toBe('not_found');
  });

  it("declares the routes once: the app alone (no socket) serves the listener's table, answering as it does", async () => {
    const server = await serve({ apiKeys: KEY_SPECS });
    const t = await initTrajectory(server.url, AGENT_KEY);
    const app = createApp({
      pool: server.pool,
      gateway: server.gateway,
      apiKeys: KEY_SPECS.map(parseApiKey),
    });
    const agent = { authorization: `Bearer ${AGENT_KEY}`, 'content-type': 'application/json' };
    const trainer = { authorization: `Bearer ${TRAINER_KEY}`, 'content-type': 'application/json' };
    const base = `/${t.trajectory_uid}/${t.group_id}/v1`;
    const cases: [string, string, Record<string, string>, string | undefined][] = [
      ['POST', `${base}/chat/completions`, agent, chat('x')],
      ['POST', `${base}/completions`, agent, JSON.stringify({ model: 'm', prompt: 'x', max_tokens: 2 })],
      ['POST', `${base}/messages`, agent, JSON.stringify({ model: 'm', max_tokens: 2, messages: [] })],
      ['POST', `${base}/responses`, agent, JSON.stringify({ model: 'm', input: [] })],
      ['POST', '/v1/completions', agent, chat('x')],
      ['POST', '/generate', agent, '{}'],
      ['GET', '/v1/models', agent, undefined],
      ['GET', `${base}/models`, agent, undefined],
      // The agent scope is checked as the listener checks it, in the call's API's shape.
      ['POST', `${base}/chat/completions`, trainer, chat('x')],
      ['POST', `${base}/messages`, trainer, chat('x')],
      // Another method is no route, as on the socket.
      ['GET', `${base}/chat/completions`, agent, undefined],
    ];
    for (const [method, path, headers, body] of cases) {
      const viaApp = await app.request(path, { method, headers, ...(body !== undefined ? { body } : {}) });
      const viaSocket = await overHttp(server.url, { method, path, headers, body });
      const json = (text: string) => {
        const value = JSON.parse(text) as Record<string, unknown>;
        // Ids and times are each answer's own.
        for (const key of ['id', 'created', 'created_at', 'usage', 'choices', 'content', 'output', 'text'])
          delete value[key];
        return value;
      };
      const label = `${method} ${path}`;
      expect(viaApp.status, label).toBe(viaSocket.status);
      expect(json(await viaApp.text()), label).toEqual(json(viaSocket.body));
    }
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
