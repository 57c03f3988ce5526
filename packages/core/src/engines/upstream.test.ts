import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Hono } from 'hono';
import { afterEach, describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import {
  fetchTransport,
  httpTransport,
  parseEngineSpec,
  readText,
  type Transport,
  UpstreamError,
} from './upstream.js';

function specError(text: string): ValidationError {
  try {
    parseEngineSpec(text);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return error as ValidationError;
  }
  throw new Error(`parseEngineSpec('${text}') did not throw`);
}

describe('parseEngineSpec', () => {
  it('parses the built-in sim', () => {
    expect(parseEngineSpec('sim')).toEqual({ kind: 'sim', url: null, id: 'sim' });
    expect(parseEngineSpec(' sim ')).toEqual({ kind: 'sim', url: null, id: 'sim' });
  });

  it('parses a vllm URL without /v1', () => {
    expect(parseEngineSpec('vllm=http://127.0.0.1:8000')).toEqual({
      kind: 'vllm',
      url: 'http://127.0.0.1:8000',
      id: 'vllm@127.0.0.1:8000',
    });
  });

  it('strips a trailing /v1 (and slashes) from the base URL', () => {
    expect(parseEngineSpec('vllm=http://gpu-3:8000/v1').url).toBe('http://gpu-3:8000');
    expect(parseEngineSpec('vllm=http://gpu-3:8000/v1/').url).toBe('http://gpu-3:8000');
    expect(parseEngineSpec('vllm=http://gpu-3:8000/').url).toBe('http://gpu-3:8000');
    expect(parseEngineSpec('vllm=http://gpu-3:8000/proxy/v1').url).toBe('http://gpu-3:8000/proxy');
    expect(parseEngineSpec('vllm=http://gpu-3:8000/v1').id).toBe('vllm@gpu-3:8000');
  });

  it('parses an openai https URL', () => {
    expect(parseEngineSpec('openai=https://api.example.com/v1')).toEqual({
      kind: 'openai',
      url: 'https://api.example.com',
      id: 'openai@api.example.com',
    });
    expect(parseEngineSpec(' openai = https://api.example.com ').url).toBe('https://api.example.com');
  });

  it('parses an sglang URL (its native routes sit beside /v1)', () => {
    expect(parseEngineSpec('sglang=http://10.0.0.5:30000/v1')).toEqual({
      kind: 'sglang',
      url: 'http://10.0.0.5:30000',
      id: 'sglang@10.0.0.5:30000',
    });
    expect(specError('sglang').message).toMatch(/sglang needs a URL/);
  });

  it('rejects an unknown kind', () => {
    const e = specError('tgi=http://127.0.0.1:8080');
    expect(e.field).toBe('engine');
    expect(e.message).toMatch(/sim, vllm, sglang or openai/);
    expect(specError('').field).toBe('engine');
  });

  it('rejects a vllm or openai engine without a URL', () => {
    for (const text of ['vllm', 'openai', 'vllm=', 'openai=  ']) {
      const e = specError(text);
      expect(e.field).toBe('engine');
      expect(e.message).toMatch(/needs a URL/);
    }
  });

  it('rejects a non-http URL and a string that is no URL', () => {
    const ftp = specError('vllm=ftp://host:21');
    expect(ftp.field).toBe('engine');
    expect(ftp.message).toMatch(/http or https/);
    const junk = specError('vllm=not a url');
    expect(junk.field).toBe('engine');
    expect(junk.message).toMatch(/is not a URL/);
  });

  it('rejects a URL given to the sim', () => {
    const e = specError('sim=http://127.0.0.1:9000');
    expect(e.field).toBe('engine');
    expect(e.message).toMatch(/takes no URL/);
  });
});

type Handler = (req: IncomingMessage, res: ServerResponse) => void;
const servers: Server[] = [];
const transports: Transport[] = [];

afterEach(async () => {
  await Promise.all(transports.splice(0).map((t) => t.close().catch(() => {})));
  await Promise.all(
    servers.splice(0).map(
      (s) =>
        new Promise<void>((resolve) => {
          s.closeAllConnections();
          s.close(() => resolve());
        }),
    ),
  );
});

async function listen(handler: Handler): Promise<{ server: Server; url: string }> {
  const server = createServer(handler);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve());
  });
  servers.push(server);
  return { server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/** An engine that sends one event and never ends its answer; `serverSawClose` once the connection closes. */
async function heldStream(): Promise<{ url: string; serverSawClose: Promise<void> }> {
  let closed!: () => void;
  const serverSawClose = new Promise<void>((resolve) => {
    closed = resolve;
  });
  const { url } = await listen((_req, res) => {
    res.on('close', () => closed());
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write('data: 1\n\n');
  });
  return { url, serverSawClose };
}

function track<T extends Transport>(t: T): T {
  transports.push(t);
  return t;
}

async function rejection(promise: Promise<unknown>): Promise<unknown> {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  throw new Error('the promise resolved');
}

const signal = () => AbortSignal.timeout(5_000);

describe('httpTransport', () => {
  it('passes the status, content type and body through, and sends method, path, body and headers', async () => {
    const { url } = await listen((req, res) => {
      let body = '';
      req.setEncoding('utf8');
      req.on('data', (c: string) => {
        body += c;
      });
      req.on('end', () => {
        res.writeHead(201, { 'content-type': 'application/x-test; charset=utf-8' });
        res.end(
          JSON.stringify({
            method: req.method,
            url: req.url,
            body,
            type: req.headers['content-type'],
            auth: req.headers.authorization ?? null,
          }),
        );
      });
    });
    const t = track(httpTransport(url, { apiKey: 'sk-test' }));
    const reply = await t.send('POST', '/v1/chat/completions', '{"a":1}', signal());
    expect(reply.status).toBe(201);
    expect(reply.contentType).toBe('application/x-test; charset=utf-8');
    expect(JSON.parse(await readText(reply.body))).toEqual({
      method: 'POST',
      url: '/v1/chat/completions',
      body: '{"a":1}',
      type: 'application/json',
      auth: 'Bearer sk-test',
    });

    const plain = track(httpTransport(url));
    const get = await plain.send('GET', '/v1/models', null, signal());
    const echoed = JSON.parse(await readText(get.body)) as { method: string; body: string; auth: null };
    expect(echoed.method).toBe('GET');
    expect(echoed.body).toBe('');
    expect(echoed.auth).toBeNull();
  });

  it('passes a non-200 status and an empty content type through without throwing', async () => {
    const { url } = await listen((_req, res) => {
      res.statusCode = 500;
      res.removeHeader('content-type');
      res.end('boom');
    });
    const t = track(httpTransport(url));
    const reply = await t.send('GET', '/x', null, signal());
    expect(reply.status).toBe(500);
    expect(reply.contentType).toBe('');
    expect(await readText(reply.body)).toBe('boom');
  });

  it('releases the connection when the reply is discarded', async () => {
    const { url, serverSawClose } = await heldStream();
    const t = track(httpTransport(url));
    const reply = await t.send('POST', '/v1/completions', '{}', signal());
    const it = reply.body[Symbol.asyncIterator]();
    const first = await it.next();
    expect(new TextDecoder().decode(first.value as Uint8Array)).toBe('data: 1\n\n');
    reply.discard();
    await serverSawClose; // the test times out if the stream were left open
    // Reading on after a discard ends the body one way or the other; it never hangs.
    await it.next().catch(() => {});
  }, 3_000);

  it('reports a refused connection as 503, not sent (safe to retry elsewhere)', async () => {
    const { server, url } = await listen(() => {});
    await new Promise<void>((resolve) => server.close(() => resolve()));
    servers.splice(servers.indexOf(server), 1);
    const t = track(httpTransport(url));
    const error = await rejection(t.send('POST', '/v1/chat/completions', '{}', signal()));
    expect(error).toBeInstanceOf(UpstreamError);
    const e = error as UpstreamError;
    expect(e.status).toBe(503);
    expect(e.sent).toBe(false);
    expect(e.code).toBe('upstream_unavailable');
    expect(e.isRetryable).toBe(true);
    expect(e.message).toContain('ECONNREFUSED');
    expect(e.message).toContain(url);
  });

  it('reports missing response headers as 504 naming the timeout', async () => {
    const { url } = await listen(() => {}); // accepts, never answers
    const t = track(httpTransport(url, { headersTimeoutMs: 200 }));
    const started = performance.now();
    const error = await rejection(t.send('POST', '/v1/chat/completions', '{}', signal()));
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    expect(error).toBeInstanceOf(UpstreamError);
    const e = error as UpstreamError;
    expect(e.status).toBe(504);
    expect(e.sent).toBe(true);
    expect(e.code).toBe('upstream_timeout');
    expect(e.message).toContain('200 ms');
  });

  it('reports a connection dropped after the request as 502, sent', async () => {
    const { url } = await listen((req) => req.socket.destroy());
    const t = track(httpTransport(url));
    const error = await rejection(t.send('POST', '/v1/chat/completions', '{}', signal()));
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).status).toBe(502);
    expect((error as UpstreamError).sent).toBe(true);
  });

  it("rethrows the caller's abort as is, not as an UpstreamError", async () => {
    const { url } = await listen(() => {});
    const t = track(httpTransport(url));
    const controller = new AbortController();
    const pending = rejection(t.send('POST', '/v1/chat/completions', '{}', controller.signal));
    setTimeout(() => controller.abort(new Error('client went away')), 20);
    const error = await pending;
    expect(error).not.toBeInstanceOf(UpstreamError);
  });

  it('waits for headers longer than an idle connection lives (a long prefill)', async () => {
    const { url } = await listen((_req, res) => {
      setTimeout(() => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"late":true}');
      }, 4_500);
    });
    const t = track(httpTransport(url));
    const reply = await t.send('POST', '/v1/completions', '{}', AbortSignal.timeout(10_000));
    expect(await reply.text()).toBe('{"late":true}');
  }, 10_000);

  it('keeps its connections for calls made one after another (no connection per call)', async () => {
    const sockets = new Set<unknown>();
    const { url } = await listen((req, res) => {
      sockets.add(req.socket);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('{}');
    });
    const t = track(httpTransport(url));
    for (let i = 0; i < 8; i++) {
      const reply = await t.send('POST', '/v1/completions', '{}', signal());
      expect(await reply.text()).toBe('{}');
    }
    // undici's pool may open a second connection while the first is being released; never more.
    expect(sockets.size).toBeLessThanOrEqual(2);
  });

  it('breaks off a body that goes silent longer than bodyTimeoutMs', async () => {
    const { url } = await heldStream();
    const t = track(httpTransport(url, { bodyTimeoutMs: 200 }));
    const reply = await t.send('POST', '/v1/completions', '{}', signal());
    const started = performance.now();
    const error = await rejection(reply.text());
    expect(performance.now() - started).toBeGreaterThanOrEqual(150);
    expect(error).toBeInstanceOf(UpstreamError);
    expect((error as UpstreamError).status).toBe(504);
    expect(String(error)).toMatch(/200 ms/);
  }, 3_000);

  it('names the body timeout to a reader of the chunks too (the streaming path)', async () => {
    const { url } = await heldStream();
    const t = track(httpTransport(url, { bodyTimeoutMs: 200 }));
    const reply = await t.send('POST', '/v1/completions', '{}', signal());
    const read = async () => {
      for await (const _ of reply.body);
    };
    const error = await rejection(read());
    expect(error).toBeInstanceOf(UpstreamError);
    expect(String(error)).toMatch(/sent nothing for 200 ms/);
  }, 3_000);

  it("the caller's abort mid-answer breaks off the body and closes the engine's connection", async () => {
    const { url, serverSawClose } = await heldStream();
    const t = track(httpTransport(url));
    const controller = new AbortController();
    const reply = await t.send('POST', '/v1/completions', '{}', controller.signal);
    const reading = rejection(reply.text());
    controller.abort(new Error('client went away'));
    expect(await reading).toBeInstanceOf(Error);
    await serverSawClose;
  }, 3_000);
});

describe('fetchTransport', () => {
  function app() {
    const seen: { url: string; method: string; type: string | null }[] = [];
    const hono = new Hono();
    hono.use('*', async (c, next) => {
      seen.push({ url: c.req.url, method: c.req.method, type: c.req.header('content-type') ?? null });
      await next();
    });
    hono.get('/v1/models', (c) => c.json({ data: [{ id: 'sim-model' }] }));
    hono.post('/echo', async (c) => c.text(`got ${await c.req.text()}`, 202));
    hono.delete('/nothing', (c) => c.body(null, 204));
    hono.get('/nothing', (c) => c.body(null, 204));
    return { hono, seen };
  }

  it('drives a Hono app in process with the same wire shape', async () => {
    const { hono, seen } = app();
    const t = fetchTransport(hono.fetch);
    const models = await t.send('GET', '/v1/models', null, signal());
    expect(models.status).toBe(200);
    expect(models.contentType).toMatch(/^application\/json/);
    expect(JSON.parse(await readText(models.body))).toEqual({ data: [{ id: 'sim-model' }] });

    const echo = await t.send('POST', '/echo', 'hello', signal());
    expect(echo.status).toBe(202);
    expect(echo.contentType).toMatch(/^text\/plain/);
    expect(await readText(echo.body)).toBe('got hello');

    expect(seen).toEqual([
      { url: 'http://sim.local/v1/models', method: 'GET', type: 'application/json' },
      { url: 'http://sim.local/echo', method: 'POST', type: 'application/json' },
    ]);
    await expect(t.close()).resolves.toBeUndefined();
  });

  it('uses the given origin, answers 404 for unknown paths and an empty body for none', async () => {
    const { hono, seen } = app();
    const t = fetchTransport(hono.fetch, 'http://engine.test:1234');
    const missing = await t.send('GET', '/v1/unknown', null, signal());
    expect(missing.status).toBe(404);
    missing.discard();
    const empty = await t.send('GET', '/nothing', null, signal());
    expect(empty.status).toBe(204);
    expect(await readText(empty.body)).toBe('');
    expect(seen.map((s) => s.url)).toEqual([
      'http://engine.test:1234/v1/unknown',
      'http://engine.test:1234/nothing',
    ]);
  });
});

describe('readText', () => {
  async function* chunks(...parts: Uint8Array[]) {
    for (const p of parts) yield p;
  }

  it('joins chunks, keeping a multi-byte character split across two of them', async () => {
    const bytes = new TextEncoder().encode('drop 💧 é');
    const cut = 'drop '.length + 2; // inside the emoji's four bytes
    expect(await readText(chunks(bytes.slice(0, cut), bytes.slice(cut)))).toBe('drop 💧 é');
  });

  it('reads an empty body as an empty string', async () => {
    expect(await readText(chunks())).toBe('');
  });
});
