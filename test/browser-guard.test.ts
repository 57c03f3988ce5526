import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';

/*
 * A web page must not drive a Stepwise server on the operator's machine (docs/security.md, issue
 * 24): DNS rebinding (a foreign Host) and cross-origin POSTs (`text/plain` needs no preflight) are
 * refused before anything runs, on the Hono routes and on the gateway's direct LLM route alike.
 * Real HTTP on loopback with node:http, which sends the Host and Origin it is given.
 */

let dir: string;
let server: RunningServer;
let published: RunningServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-guard-'));
  server = await startServer({ dbPath: join(dir, 'a.db'), port: 0, engines: ['sim'] });
  published = await startServer({
    dbPath: join(dir, 'b.db'),
    port: 0,
    engines: ['sim'],
    publicUrl: 'https://stepwise.example.org',
  });
});
afterAll(async () => {
  await server.close();
  await published.close();
  rmSync(dir, { recursive: true, force: true });
});

function request(
  target: RunningServer,
  method: string,
  path: string,
  headers: Record<string, string>,
  body?: string,
): Promise<{ status: number; json: Record<string, unknown> }> {
  const url = new URL(target.url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      { host: url.hostname, port: url.port, method, path, headers, setHost: !('host' in headers) },
      (res) => {
        let text = '';
        res.on('data', (chunk: Buffer) => {
          text += chunk.toString();
        });
        res.on('end', () => resolve({ status: res.statusCode!, json: text ? JSON.parse(text) : {} }));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

const own = () => new URL(server.url).host;

describe('Host: DNS rebinding is refused, base_urls never reflect a foreign Host', () => {
  it('refuses a foreign Host on a loopback server, before any route (GET and POST)', async () => {
    for (const [method, path] of [
      ['GET', '/v1/stats'],
      ['POST', '/init_trajectory'],
      ['GET', '/dashboard'],
    ] as const) {
      const res = await request(
        server,
        method,
        path,
        {
          host: `rebind.evil.example:${new URL(server.url).port}`,
          'content-type': 'application/json',
        },
        method === 'POST' ? '{}' : undefined,
      );
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(String((res.json.error as { message: string }).message)).toMatch(
        /^Host: .* does not name this server/,
      );
    }
    expect((await server.pool.store.listTrajectories({ limit: 10, offset: 0 })).items).toHaveLength(0);
  });

  it('takes loopback names, and builds base_urls from them', async () => {
    for (const host of [own(), `localhost:${new URL(server.url).port}`]) {
      const res = await request(
        server,
        'POST',
        '/init_trajectory',
        { host, 'content-type': 'application/json' },
        '{}',
      );
      expect(res.status).toBe(200);
      expect(res.json.base_url).toMatch(new RegExp(`^http://${host}/`));
    }
  });

  it('with --public-url: takes its host and loopback, refuses others, and base_urls use the public URL', async () => {
    const port = new URL(published.url).port;
    const foreign = await request(published, 'GET', '/v1/stats', { host: `evil.example:${port}` });
    expect(foreign.status).toBe(403);
    const pub = await request(
      published,
      'POST',
      '/init_trajectory',
      { host: 'stepwise.example.org', 'content-type': 'application/json' },
      '{}',
    );
    expect(pub.status).toBe(200);
    expect(pub.json.base_url).toMatch(/^https:\/\/stepwise\.example\.org\//);
  });
});

describe('Origin: state-changing requests from another site are refused', () => {
  it('refuses a cross-origin text/plain POST to the API and to the LLM route, and changes nothing', async () => {
    const init = await request(
      server,
      'POST',
      '/init_trajectory',
      { 'content-type': 'application/json' },
      '{}',
    );
    const base = new URL(init.json.base_url as string).pathname;
    const attempts: [string, string, string][] = [
      ['PUT', '/v1/policy-version', '{"version": 7}'],
      ['POST', '/v1/steps', '{"steps": []}'],
      ['POST', `${base}/complete_trajectory`, '{"reward": 1}'],
      [
        'POST',
        `${base}/chat/completions`,
        '{"model": "sim", "messages": [{"role": "user", "content": "hi"}]}',
      ],
    ];
    for (const [method, path, body] of attempts) {
      const res = await request(
        server,
        method,
        path,
        { origin: 'https://evil.example', 'content-type': 'text/plain' },
        body,
      );
      expect(res.status, `${method} ${path}`).toBe(403);
      expect(String((res.json.error as { message: string }).message)).toMatch(/^Origin: .* is another site/);
    }
    // "null" (a sandboxed frame or a file: page) is foreign too.
    const nullOrigin = await request(
      server,
      'PUT',
      '/v1/policy-version',
      { origin: 'null', 'content-type': 'application/json' },
      '{"version": 7}',
    );
    expect(nullOrigin.status).toBe(403);
    expect(await server.pool.policyVersion()).toBe(0);
    expect((await server.pool.store.getTrajectory(init.json.trajectory_uid as string))?.status).toBe('open');
    expect((await server.pool.store.listSteps({ limit: 10, offset: 0 })).items).toHaveLength(0);
  });

  it("takes the same origin (the dashboard's own forms), reads from anywhere, and API clients without Origin", async () => {
    const same = await request(
      server,
      'PUT',
      '/v1/policy-version',
      { origin: server.url, 'content-type': 'application/json' },
      '{"version": 2}',
    );
    expect(same.status).toBe(200);
    const read = await request(server, 'GET', '/v1/policy-version', { origin: 'https://evil.example' });
    expect(read.status).toBe(200);
    const client = await request(
      server,
      'PUT',
      '/v1/policy-version',
      { 'content-type': 'application/json' },
      '{"version": 3}',
    );
    expect(client.status).toBe(200);
    expect(await server.pool.policyVersion()).toBe(3);
  });

  it('reads a body only as application/json: the types a page may post without a preflight are a 415 and change nothing', async () => {
    const init = await request(
      server,
      'POST',
      '/init_trajectory',
      { 'content-type': 'application/json' },
      '{}',
    );
    const base = new URL(init.json.base_url as string).pathname;
    const chat = '{"model": "sim", "messages": [{"role": "user", "content": "hi"}]}';
    for (const type of [
      'text/plain',
      'application/x-www-form-urlencoded',
      'multipart/form-data; boundary=x',
      null,
    ])
      for (const [method, path, body] of [
        ['PUT', '/v1/policy-version', '{"version": 9}'],
        ['POST', `${base}/chat/completions`, chat],
      ] as const) {
        const headers: Record<string, string> = type === null ? {} : { 'content-type': type };
        const res = await request(server, method, path, headers, body);
        expect([type, path, res.status]).toEqual([type, path, 415]);
        expect(res.json.error).toMatchObject({ code: 'unsupported_media_type', field: 'content-type' });
      }
    expect(await server.pool.policyVersion()).toBe(3);
    expect((await server.pool.store.getTrajectorySteps(init.json.trajectory_uid as string)).length).toBe(0);
    // JSON with parameters or a +json type is JSON; a request without a body needs no type.
    const json = { 'content-type': 'application/json; charset=utf-8' };
    expect((await request(server, 'POST', `${base}/chat/completions`, json, chat)).status).toBe(200);
    const vendor = { 'content-type': 'application/vnd.stepwise+json' };
    expect((await request(server, 'PUT', '/v1/policy-version', vendor, '{"version": 4}')).status).toBe(200);
    expect((await request(server, 'POST', '/v1/batches/nope/ack', {})).status).toBe(404);
  });
});

describe('One path rule: a path is normalised once, before any guard (issue 38)', () => {
  it('refuses a text/plain POST whose dashboard path resolves elsewhere (%2e%2e and friends), and writes nothing', async () => {
    const init = await request(
      server,
      'POST',
      '/init_trajectory',
      { 'content-type': 'application/json' },
      '{}',
    );
    const id = init.json.trajectory_uid as string;
    const base = new URL(init.json.base_url as string).pathname;
    const before = (await server.pool.listTrajectories({ limit: 1, offset: 0 })).total;
    const chat = '{"model": "sim", "messages": [{"role": "user", "content": "hi"}]}';
    for (const dots of ['%2e%2e', '%2E%2e', '.%2e', '%2e.', '..%2f..%2f%2e%2e'])
      for (const [path, body] of [
        [`/dashboard/${dots}/v1/labels`, `{"labels": [{"trajectory_uid": "${id}", "tags": ["forged"]}]}`],
        [`/dashboard/${dots}/init_trajectory`, '{}'],
        [`/dashboard/${dots}${base}/chat/completions`, chat],
      ] as const) {
        const res = await request(server, 'POST', path, { 'content-type': 'text/plain' }, body);
        // `..%2f..%2f%2e%2e` keeps its encoded slashes: a dashboard path, and no route there.
        expect([path, res.status], path).toEqual([path, dots.includes('%2f') ? 404 : 415]);
      }
    expect(await server.pool.labels(id)).toEqual([]);
    expect((await server.pool.listTrajectories({ limit: 1, offset: 0 })).total).toBe(before);
    expect((await server.pool.store.getTrajectorySteps(id)).length).toBe(0);
  });
});

describe('Origin is compared with its scheme; dashboard forms carry CSRF tokens (issue 38)', () => {
  it('refuses https://its-own-host: this server speaks plain HTTP', async () => {
    const host = own();
    for (const origin of [`https://${host}`, `ws://${host}`]) {
      const res = await request(
        server,
        'POST',
        '/init_trajectory',
        { origin, 'content-type': 'application/json' },
        '{}',
      );
      expect([origin, res.status]).toEqual([origin, 403]);
    }
    const ok = await request(
      server,
      'POST',
      '/init_trajectory',
      { origin: `http://${host}`, 'content-type': 'application/json' },
      '{}',
    );
    expect(ok.status).toBe(200);
  });

  it('refuses a dashboard form POST without its page token (403 naming csrf_token), takes it with the token', async () => {
    const init = await request(
      server,
      'POST',
      '/init_trajectory',
      { 'content-type': 'application/json' },
      '{}',
    );
    const id = init.json.trajectory_uid as string;
    const page = await (await fetch(`${server.url}/dashboard/trajectories/${id}`)).text();
    const token = /name="csrf_token" value="([^"]+)"/.exec(page)?.[1];
    expect(token).toBeTruthy();
    const list = await (await fetch(`${server.url}/dashboard/trajectories`)).text();
    expect(list).toContain(`name="csrf_token" value="${token}"`);
    const form = { 'content-type': 'application/x-www-form-urlencoded', origin: `http://${own()}` };
    for (const [path, body] of [
      [`/dashboard/trajectories/${id}/labels`, 'tags=forged'],
      ['/dashboard/labels', `id=${id}&action=tag&tag=forged`],
    ] as const) {
      for (const extra of ['', '&csrf_token=wrong']) {
        const res = await request(server, 'POST', path, form, body + extra);
        expect([path, extra, res.status]).toEqual([path, extra, 403]);
        expect(res.json.error).toMatchObject({ field: 'csrf_token' });
      }
    }
    expect(await server.pool.labels(id)).toEqual([]);
    const res = await request(
      server,
      'POST',
      `/dashboard/trajectories/${id}/labels`,
      form,
      `tags=mine&csrf_token=${token}`,
    );
    expect(res.status).toBe(303);
    expect((await server.pool.labels(id)).length).toBe(1);
  });
});
