import http from 'node:http';
import { afterEach, describe, expect, it } from 'vitest';
import { type Listening, listen } from './http-server.js';

const open: Listening[] = [];
afterEach(async () => {
  for (const l of open.splice(0)) await l.close();
});

/** A handler that answers with the length and a digest of the body it was given. */
async function echoServer(maxBodyBytes: number) {
  const seen: number[] = [];
  const l = await listen(
    async (request) => {
      const body = await request.text();
      seen.push(body.length);
      return Response.json({ length: body.length, head: body.slice(0, 8) });
    },
    '127.0.0.1',
    0,
    { maxBodyBytes },
  );
  open.push(l);
  return { url: l.url, seen };
}

/** Posts with node:http so the test decides how the body is framed (declared length or chunked). */
function post(
  url: string,
  chunks: (string | Buffer)[],
  declare: boolean,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const total = chunks.reduce((n, c) => n + Buffer.byteLength(c), 0);
    const req = http.request(url, {
      method: 'POST',
      headers: declare ? { 'content-length': String(total) } : { 'transfer-encoding': 'chunked' },
      agent: false,
    });
    req.on('response', (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c) => {
        body += c;
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    // The server may answer 413 and close before the whole body is written.
    req.on('error', (error: NodeJS.ErrnoException) => {
      if (error.code !== 'EPIPE' && error.code !== 'ECONNRESET') reject(error);
    });
    for (const c of chunks) req.write(c);
    req.end();
  });
}

describe('listen: request bodies', () => {
  it('hands the whole body to the handler, declared or chunked, multi-byte characters intact', async () => {
    const { url, seen } = await echoServer(1024);
    const text = 'héllo wörld '.repeat(20);
    const declared = await post(url, [text], true);
    expect(declared.status).toBe(200);
    expect(JSON.parse(declared.body)).toEqual({ length: text.length, head: text.slice(0, 8) });
    // Two chunks split inside the two bytes of 'é': the body is joined before it is decoded.
    const bytes = Buffer.from(text);
    const chunked = await post(url, [bytes.subarray(0, 2), bytes.subarray(2)], false);
    expect(chunked.status).toBe(200);
    expect(JSON.parse(chunked.body)).toEqual({ length: text.length, head: text.slice(0, 8) });
    expect(seen).toEqual([text.length, text.length]);
  });

  it('answers 413 naming the body for a declared length over the limit, without calling the handler', async () => {
    const { url, seen } = await echoServer(100);
    const res = await post(url, ['x'.repeat(101)], true);
    expect(res.status).toBe(413);
    expect(JSON.parse(res.body)).toEqual({
      error: { code: 'payload_too_large', message: 'body: larger than 100 bytes', field: 'body' },
    });
    expect(seen).toEqual([]);
  });

  it('answers 413 for a chunked body once it crosses the limit, and keeps serving', async () => {
    const { url, seen } = await echoServer(100);
    const res = await post(url, ['x'.repeat(60), 'y'.repeat(60)], false);
    expect(res.status).toBe(413);
    expect(seen).toEqual([]);
    const ok = await post(url, ['z'.repeat(100)], false);
    expect(ok.status).toBe(200);
    expect(seen).toEqual([100]);
  });
});

describe('idle connections', () => {
  it("keeps an idle keep-alive connection open past node's default 5 s, so an agent pausing for its tools reuses it", async () => {
    const { url } = await echoServer(1024);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const get = () =>
      new Promise<boolean>((resolve, reject) => {
        const req = http.request(url, { method: 'POST', agent, headers: { 'content-length': '2' } });
        req.on('response', (res) => {
          res.resume();
          res.on('end', () => resolve(req.reusedSocket));
        });
        req.on('error', reject);
        req.end('{}');
      });
    try {
      expect(await get()).toBe(false);
      await new Promise((r) => setTimeout(r, 7_000));
      expect(await get()).toBe(true);
    } finally {
      agent.destroy();
    }
  }, 15_000);
});
