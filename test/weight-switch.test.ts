import http from 'node:http';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { type RunningSimServer, startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { callJson, type Json, openTrajectory } from './support/http.js';
import { testServers } from './support/test-servers.js';

/*
 * A weight switch the gateway runs for the fleet (`PUT /v1/policy-version` with a mode), over real
 * HTTP: sims standing in for vLLM engines (they speak vLLM's dev-mode RL routes), and stand-ins that
 * answer as vLLM and SGLang do, recording what they were sent and failing where a test says.
 */

const servers = testServers('weight-switch');
const sims: RunningSimServer[] = [];
const standIns: http.Server[] = [];
afterEach(async () => {
  await Promise.all(sims.splice(0).map((s) => s.close()));
  for (const s of standIns.splice(0)) {
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }
});

async function sim(tokensPerSecond = 0): Promise<RunningSimServer> {
  const s = await startSimServer({ port: 0, ...(tokensPerSecond ? { tokensPerSecond, ttftMs: 0 } : {}) });
  sims.push(s);
  return s;
}

interface StandIn {
  url: string;
  received: { method: string; path: string; body: Json }[];
}

/** An engine that answers its control routes with 200 `{}` unless `fail` names the path (then 500). */
async function standIn(fail: (path: string) => boolean = () => false, delayMs = 0): Promise<StandIn> {
  const received: StandIn['received'] = [];
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (c: Buffer) => {
      text += c.toString();
    });
    req.on('end', () => {
      const path = req.url ?? '';
      if (req.method === 'GET' && path === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({ object: 'list', data: [{ id: 'm', object: 'model', max_model_len: 4096 }] }),
        );
        return;
      }
      received.push({ method: req.method ?? '', path, body: text ? JSON.parse(text) : null });
      setTimeout(() => {
        res.writeHead(fail(path) ? 500 : 200, { 'content-type': 'application/json' });
        res.end(fail(path) ? JSON.stringify({ error: 'load failed: out of memory' }) : '{}');
      }, delayMs);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  standIns.push(server);
  return { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, received };
}

const put = (url: string, body: unknown) => callJson('PUT', `${url}/v1/policy-version`, body);

async function chatStep(serverUrl: string, server: Awaited<ReturnType<typeof servers.serve>>) {
  const t = await openTrajectory(serverUrl);
  const client = new OpenAI({ baseURL: t.base_url, apiKey: 'x', maxRetries: 0 });
  await client.chat.completions.create({
    model: 'sim-qwen3',
    messages: [{ role: 'user', content: 'hello' }],
  });
  const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
  return step!;
}

describe('a weight switch through the gateway', () => {
  it('pauses, loads and resumes every engine, then serves under the new version', async () => {
    const [a, b] = [await sim(), await sim()];
    const server = await servers.serve({ engines: [`vllm=${a.url}`, `vllm=${b.url}`] });
    const { status, json } = await put(server.url, {
      version: 5,
      mode: 'abort',
      weights: { path: '/ckpt/v5' },
    });
    expect(status).toBe(200);
    expect(json.switched.sort()).toHaveLength(2);
    expect(json.failed).toEqual([]);
    expect(json.version).toBe(5);
    for (const s of [a, b]) {
      const info = await callJson('GET', `${s.url}/weight_info`);
      expect(info.json).toMatchObject({ weight_version: '5', weight_gen: 1 });
      expect((await callJson('GET', `${s.url}/is_paused`)).json).toEqual({ is_paused: false });
    }
    expect((await callJson('GET', `${server.url}/v1/policy-version`)).json).toEqual({ version: 5 });
    expect((await chatStep(server.url, server)).policyVersion).toBe(5);
  });

  it('takes an engine that fails to load out of routing and reports it; the rest switch', async () => {
    const good = await sim();
    const bad = await standIn((path) => path === '/update_weights');
    const server = await servers.serve({ engines: [`vllm=${good.url}`, `vllm=${bad.url}`] });
    const { status, json } = await put(server.url, {
      version: 2,
      mode: 'keep',
      weights: { path: '/ckpt/v2' },
    });
    expect(status).toBe(200);
    expect(json.switched).toHaveLength(1);
    expect(json.failed).toHaveLength(1);
    expect(json.failed[0]).toMatchObject({ phase: 'load' });
    expect(json.failed[0].error).toContain('out of memory');
    // The stand-in was paused with keep and asked to load, in vLLM's order.
    expect(bad.received.map((r) => r.path)).toEqual([
      '/pause?mode=keep',
      '/start_weight_update',
      '/update_weights',
    ]);
    expect(bad.received[2]!.body).toEqual({ update_info: { model_path: '/ckpt/v2' } });
    const stats = await callJson('GET', `${server.url}/v1/stats`);
    const engines = stats.json.gateway.engines as Json[];
    const disabled = engines.filter((e) => e.disabled !== null);
    expect(disabled).toHaveLength(1);
    expect(disabled[0].disabled).toContain('version 2');
    // Every call now goes to the engine that switched, under the new version.
    for (let i = 0; i < 4; i++) {
      const step = await chatStep(server.url, server);
      expect(step.policyVersion).toBe(2);
      expect(step.engineId).toBe(engines.find((e) => e.disabled === null).id);
    }
  });

  it('changes nothing when no engine switches, and refuses a fleet it cannot switch', async () => {
    const bad = await standIn((path) => path === '/start_weight_update');
    const server = await servers.serve({ engines: [`vllm=${bad.url}`] });
    const failed = await put(server.url, { version: 9, mode: 'abort', weights: { path: '/ckpt/v9' } });
    expect(failed.status).toBe(502);
    expect(failed.json.error.message).toContain('the version is unchanged');
    expect((await callJson('GET', `${server.url}/v1/policy-version`)).json).toEqual({ version: 0 });
    // It was resumed, and stays in routing.
    expect(bad.received.at(-1)!.path).toBe('/resume');
    const stats = await callJson('GET', `${server.url}/v1/stats`);
    expect(stats.json.gateway.engines[0].disabled).toBeNull();

    const hosted = await servers.serve({ engines: [`openai=${bad.url}/v1`] });
    const refused = await put(hosted.url, { version: 1, mode: 'abort', weights: { path: '/x' } });
    expect(refused.status).toBe(400);
    expect(refused.json.error.message).toContain('cannot be switched');
    const bad2 = await put(server.url, { version: 1, weights: { path: '/x' } });
    expect(bad2.status).toBe(400);
    expect(bad2.json.error.field).toBe('mode');
    const bad3 = await put(server.url, { version: 1, mode: 'sleep' });
    expect(bad3.status).toBe(400);
    expect(bad3.json.error.field).toBe('mode');
  });

  it("speaks SGLang's routes to an SGLang engine (keep is retract: the KV is recomputed)", async () => {
    const sglang = await standIn();
    const server = await servers.serve({ engines: [`sglang=${sglang.url}`] });
    const { status } = await put(server.url, { version: 7, mode: 'keep', weights: { path: '/ckpt/v7' } });
    expect(status).toBe(200);
    expect(sglang.received).toEqual([
      { method: 'POST', path: '/pause_generation', body: { mode: 'retract' } },
      {
        method: 'POST',
        path: '/update_weights_from_disk',
        body: { model_path: '/ckpt/v7', weight_version: '7' },
      },
      { method: 'POST', path: '/continue_generation', body: {} },
    ]);
    const info = await put(server.url, {
      version: 8,
      mode: 'abort',
      weights: { update_info: { names: [] } },
    });
    expect(info.status).toBe(400);
    expect(info.json.error.field).toBe('weights');
  });

  it('holds calls that start during the switch and stamps them with the new version', async () => {
    const good = await sim();
    const slow = await standIn(() => false, 400);
    const server = await servers.serve({ engines: [`vllm=${good.url}`, `vllm=${slow.url}`] });
    const switching = put(server.url, { version: 3, mode: 'abort', weights: { path: '/ckpt/v3' } });
    await new Promise((r) => setTimeout(r, 100));
    const during = chatStep(server.url, server);
    const [{ json }, step] = await Promise.all([switching, during]);
    expect(json.switched).toHaveLength(2);
    expect(json.held_ms).toBeGreaterThanOrEqual(0);
    expect(step.policyVersion).toBe(3);
  });
});
