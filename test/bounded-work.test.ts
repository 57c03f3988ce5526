import { mkdtempSync, rmSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Bounded work (issue 38, finding 6; docs/security.md): keys are checked before a body is read, the
 * server caps its connections, the request bytes it buffers at once and each key's rates; metadata
 * and other free-form JSON the API stores is capped (a 400 naming the field, nothing stored), and
 * lists never return unbounded metadata. Real HTTP on loopback; the store half on SQLite and, with
 * STEPWISE_TEST_PG_URL, PostgreSQL.
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
const AGENT_2 = 'agent-key-2-0123456789abcdef';
const ADMIN = 'admin-key-0123456789abcdef';
const keys = [`${AGENT}:agent`, `${AGENT_2}:agent`, `${ADMIN}:admin`];

async function sqliteServer(options: Partial<ServerOptions> = {}): Promise<RunningServer> {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-bounded-'));
  dirs.push(dir);
  const server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'], ...options });
  servers.push(server);
  return server;
}

/**
 * Sends a request's head and the first `sent` bytes of a body declared as `declared` bytes long, then
 * waits for the answer without sending the rest: an answer proves the server did not wait for the
 * body. Resolves with the status line and headers (or null if the server closed without one).
 */
function partialPost(
  url: string,
  path: string,
  headers: Record<string, string>,
  declared: number,
  sent = 1024,
): Promise<{ status: number; head: string } | null> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = net.connect(Number(port), hostname);
    // A server that waits for the rest of the body never answers: give up (null) rather than hang.
    const gaveUp = setTimeout(() => socket.destroy(), 15_000);
    socket.on('close', () => clearTimeout(gaveUp));
    let text = '';
    const lines = Object.entries({
      host: `${hostname}:${port}`,
      ...headers,
      'content-length': String(declared),
    })
      .map(([k, v]) => `${k}: ${v}\r\n`)
      .join('');
    socket.on('connect', () => {
      socket.write(`POST ${path} HTTP/1.1\r\n${lines}\r\n`);
      socket.write(Buffer.alloc(sent, 0x20));
    });
    socket.on('data', (chunk) => {
      text += chunk.toString('latin1');
      const end = text.indexOf('\r\n\r\n');
      if (end === -1) return;
      socket.destroy();
      resolve({ status: Number(text.slice(9, 12)), head: text.slice(0, end) });
    });
    socket.on('close', () => resolve(null));
    socket.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code === 'ECONNRESET') resolve(null);
      else reject(error);
    });
  });
}

describe('keys before bodies', () => {
  it('answers a keyless 64 MiB POST with a 401 before reading its body (and a dashboard one with the sign-in page)', async () => {
    const server = await sqliteServer({ apiKeys: keys });
    const json = { 'content-type': 'application/json' };
    const big = 64 * 1024 * 1024 - 1;
    for (const path of ['/init_trajectory', '/v1/labels', '/x/y/v1/chat/completions', '/nowhere']) {
      const answer = await partialPost(server.url, path, json, big);
      expect(answer?.status, path).toBe(401);
    }
    const wrong = await partialPost(
      server.url,
      '/v1/steps',
      { ...json, authorization: 'Bearer wrong-key-0123456789' },
      big,
    );
    expect(wrong?.status).toBe(401);
    const dashboard = await partialPost(
      server.url,
      '/dashboard/labels',
      { 'content-type': 'application/x-www-form-urlencoded' },
      big,
    );
    expect(dashboard?.status).toBe(303);
    expect(dashboard?.head).toMatch(/location: \/dashboard\/login/i);
    // The sign-in form is open without a key: it takes a small body only.
    const login = await partialPost(
      server.url,
      '/dashboard/login',
      { 'content-type': 'application/x-www-form-urlencoded' },
      big,
    );
    expect(login?.status).toBe(413);
  });
});

describe('caps on connections and bodies in flight', () => {
  it('closes a connection past --max-connections, and takes one again once another closes', async () => {
    const server = await sqliteServer({ maxConnections: 3 });
    const { port } = new URL(server.url);
    const ask = (socket: net.Socket) =>
      new Promise<string>((resolve) => {
        let text = '';
        const done = () => resolve(text);
        socket.on('data', (c) => {
          text += c.toString();
          if (text.includes('"ok":true')) done();
        });
        socket.on('close', done);
        socket.on('error', done);
        socket.write(`GET /ready HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\n\r\n`);
      });
    const open = async () => {
      const socket = net.connect(Number(port), '127.0.0.1');
      await new Promise((r) => socket.once('connect', r));
      return socket;
    };
    const held = [await open(), await open(), await open()];
    for (const socket of held) expect(await ask(socket)).toContain('200 OK');
    const extra = await open();
    expect(await ask(extra)).toBe('');
    extra.destroy();
    held.pop()!.destroy();
    // The server counts the closed one out as it sees the close.
    let again = '';
    for (let i = 0; i < 50 && !again.includes('200 OK'); i++) {
      const socket = await open();
      again = await ask(socket);
      socket.destroy();
    }
    expect(again).toContain('200 OK');
    for (const socket of held) socket.destroy();
  });

  it('answers 503 before reading a body that would pass --max-bodies-in-flight, and takes it once the first is read', async () => {
    const server = await sqliteServer({ maxBodiesInFlightBytes: 8 * 1024 * 1024 });
    const json = { 'content-type': 'application/json' };
    const { port } = new URL(server.url);
    // A first body of 6 MiB, held half sent.
    const first = net.connect(Number(port), '127.0.0.1');
    await new Promise((r) => first.once('connect', r));
    const sixMiB = 6 * 1024 * 1024;
    const body = `{"metadata":{"a":"${'x'.repeat(sixMiB - 20)}"}}`.padEnd(sixMiB, ' ');
    first.write(
      `POST /init_trajectory HTTP/1.1\r\nhost: 127.0.0.1:${port}\r\ncontent-type: application/json\r\ncontent-length: ${sixMiB}\r\n\r\n`,
    );
    first.write(body.slice(0, 1024));
    const answered = new Promise<string>((resolve) => {
      let text = '';
      first.on('data', (c) => {
        text += c.toString();
        if (text.includes('\r\n\r\n')) resolve(text);
      });
    });
    // The server has the first request's head once a /ready on another connection is answered.
    await fetch(`${server.url}/ready`);
    const second = await partialPost(server.url, '/init_trajectory', json, sixMiB);
    expect(second?.status).toBe(503);
    expect(second?.head).toMatch(/retry-after: 1/i);
    first.end(body.slice(1024));
    expect((await answered).slice(9, 12)).toMatch(/^[24]\d\d$/);
    first.destroy();
    const retried = await fetch(`${server.url}/init_trajectory`, {
      method: 'POST',
      headers: json,
      body: '{}',
    });
    expect(retried.status).toBe(200);
  });
});

describe('per-key rates', () => {
  it('refuses a key opening trajectories past its rate with a 429 and Retry-After, and not another key', async () => {
    const server = await sqliteServer({
      apiKeys: keys,
      // One more trajectory every 1,000 s: the fourth in a row is refused whatever the machine's speed.
      rateLimits: { trajectoriesPerSecond: 0.001, trajectoryBurst: 3 },
    });
    const open = (key: string) =>
      fetch(`${server.url}/init_trajectory`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${key}` },
        body: '{}',
      });
    for (let i = 0; i < 3; i++) expect((await open(AGENT)).status).toBe(200);
    const refused = await open(AGENT);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(((await refused.json()) as { error: { field: string } }).error.field).toBe('api_key');
    expect((await open(AGENT_2)).status).toBe(200);
    const listed = await fetch(`${server.url}/v1/trajectories?limit=1`, {
      headers: { authorization: `Bearer ${ADMIN}` },
    });
    expect(((await listed.json()) as { total: number }).total).toBe(4);
  });

  it('refuses a key past its request rate, LLM calls included', async () => {
    const server = await sqliteServer({
      apiKeys: keys,
      rateLimits: { requestsPerSecond: 0.001, requestBurst: 2 },
    });
    const auth = { authorization: `Bearer ${AGENT}` };
    expect((await fetch(`${server.url}/v1/models`, { headers: auth })).status).toBe(200);
    expect((await fetch(`${server.url}/v1/models`, { headers: auth })).status).toBe(200);
    expect((await fetch(`${server.url}/v1/models`, { headers: auth })).status).toBe(429);
    expect(
      (await fetch(`${server.url}/v1/models`, { headers: { authorization: `Bearer ${AGENT_2}` } })).status,
    ).toBe(200);
  });
});

// ---- the store half: metadata caps and list views, on both stores ----------------------------

const stores: [string, () => Promise<RunningServer>][] = [['SQLite', () => sqliteServer()]];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_bounded');
      schemas.push(schema);
      const server = await startServer({
        dbPath: '',
        pg: { url: pgUrl!, schema },
        port: 0,
        engines: ['sim'],
      });
      servers.push(server);
      return server;
    },
  ]);
}

/** `n` small objects: the shape that costs the most to parse per byte. */
const smallObjects = (n: number) =>
  Object.fromEntries(Array.from({ length: n }, (_, i) => [`k${i}`, { v: i }]));

for (const [name, start] of stores) {
  describe(`metadata caps and list views on ${name}`, () => {
    it('refuses metadata and free-form JSON past the cap with a 400 naming the field, storing nothing', async () => {
      const server = await start();
      const post = (path: string, body: unknown) =>
        fetch(`${server.url}${path}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const field = async (res: Response) => {
        expect(res.status).toBe(400);
        // The agent's routes answer in OpenAI's shape (`param`), the rest in ours (`field`).
        const { error } = (await res.json()) as { error: { field?: string; param?: string } };
        return error.field ?? error.param;
      };
      // 2.6 MB and 340 KB, each parsed off the event loop.
      for (const big of [smallObjects(200_000), smallObjects(25_000)]) {
        expect(await field(await post('/init_trajectory', { metadata: big }))).toBe('metadata');
      }
      const t = (await (await post('/init_trajectory', { metadata: { ok: 1 } })).json()) as {
        trajectory_uid: string;
        base_url: string;
      };
      expect(
        await field(
          await post(`/v1/trajectories/${t.trajectory_uid}/metadata`, { metadata: smallObjects(25_000) }),
        ),
      ).toBe('metadata');
      const step = {
        trajectory_uid: t.trajectory_uid,
        prompt_uid: 'p',
        step_index: 0,
        prompt_ids: [1],
        response_ids: [2],
      };
      expect(
        await field(await post('/v1/steps', { steps: [{ ...step, metadata: smallObjects(25_000) }] })),
      ).toBe('steps.0.metadata');
      const signal = {
        trajectory_uid: t.trajectory_uid,
        name: 'judge',
        value: 1,
        details: smallObjects(25_000),
      };
      expect(await field(await post('/v1/signals', { signals: [signal] }))).toBe('signals.0.details');
      const listed = (await (await fetch(`${server.url}/v1/trajectories?limit=10`)).json()) as {
        total: number;
        items: { metadata: Record<string, unknown> }[];
      };
      expect(listed.total).toBe(1);
      expect(listed.items[0]!.metadata).toEqual({ ok: 1 });
      const detail = (await (await fetch(`${server.url}/v1/trajectories/${t.trajectory_uid}`)).json()) as {
        steps: unknown[];
        metadata: unknown;
      };
      expect(detail.steps).toEqual([]);
      expect(detail.metadata).toEqual({ ok: 1 });
    });

    it('refuses an LLM call whose extra field is over the cap (400 naming it), storing no step; a big message is taken', async () => {
      const server = await start();
      const init = (await (
        await fetch(`${server.url}/init_trajectory`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        })
      ).json()) as { trajectory_uid: string; base_url: string };
      const chat = (extra: Record<string, unknown>, content = 'hi') =>
        fetch(`${init.base_url}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({
            model: 'sim',
            messages: [{ role: 'user', content }],
            max_tokens: 4,
            ...extra,
          }),
        });
      const refused = await chat({ junk: smallObjects(200_000) });
      expect(refused.status).toBe(400);
      expect(((await refused.json()) as { error: { param: string } }).error.param).toBe('junk');
      expect(await server.pool.getTrajectorySteps(init.trajectory_uid)).toEqual([]);
      // 600 KB of conversation is the call's own business.
      expect((await chat({}, 'word '.repeat(120_000))).status).toBe(200);
      expect((await server.pool.getTrajectorySteps(init.trajectory_uid)).length).toBe(1);
    });

    it('lists compact metadata: a big one (stored before the cap) is a marker in lists and detail views', async () => {
      const server = await start();
      // Stored past the HTTP cap, as a store written before it may hold.
      const legacy = smallObjects(60_000);
      const bytes = Buffer.byteLength(JSON.stringify(legacy));
      const big = await server.gateway.initTrajectory({ channel: 'train', metadata: legacy });
      const small = await server.gateway.initTrajectory({ channel: 'train', metadata: { task_id: 't1' } });
      const listed = (await (await fetch(`${server.url}/v1/trajectories?limit=50`)).json()) as {
        items: { trajectory_uid: string; metadata: Record<string, unknown>; metadata_truncated?: unknown }[];
      };
      const byId = new Map(listed.items.map((i) => [i.trajectory_uid, i]));
      expect(byId.get(small.id)!.metadata).toEqual({ task_id: 't1' });
      expect(byId.get(small.id)!.metadata_truncated).toBeUndefined();
      expect(byId.get(big.id)!.metadata).toEqual({});
      expect(byId.get(big.id)!.metadata_truncated).toEqual({ bytes });
      const detail = (await (await fetch(`${server.url}/v1/trajectories/${big.id}`)).json()) as {
        metadata: unknown;
        metadata_truncated?: unknown;
      };
      expect(detail.metadata).toEqual({});
      expect(detail.metadata_truncated).toEqual({ bytes });
      for (const page of ['/dashboard/trajectories', `/dashboard/trajectories/${big.id}`]) {
        const res = await fetch(`${server.url}${page}`);
        expect(res.status, page).toBe(200);
        const html = await res.text();
        if (page.endsWith(big.id))
          expect(html.toLowerCase()).toContain(`metadata of ${bytes.toLocaleString('en-US')} bytes`);
        expect(html).not.toContain('k59999');
      }
      // The pool itself (rewards, the gym, exports) still reads it whole.
      expect((await server.pool.getTrajectory(big.id))!.metadata).toEqual(legacy);
    });
  });
}
