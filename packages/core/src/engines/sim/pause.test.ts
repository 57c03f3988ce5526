import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import { afterEach, describe, expect, it } from 'vitest';
import { SimEngine } from './engine.js';
import { latencyModel } from './latency.js';
import { SimPauseControl } from './pause.js';
import { echoPolicy } from './policies.js';
import { createSimApp } from './server.js';

// biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
type Json = any;

/*
 * The sim's weight switch with vLLM's semantics, over real HTTP: abort answers with the tokens ready
 * so far, keep freezes and goes on with the tokens after the switch stamped with the new version,
 * wait drains, and new requests wait while paused.
 */

type Server = ReturnType<typeof serve>;
const servers: Server[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    (s as unknown as { closeAllConnections(): void }).closeAllConnections();
    await new Promise<void>((resolve) => s.close(() => resolve()));
  }
});

// 80 tokens/s: an 80-token echo takes 1 s, long enough to pause in the middle.
async function start() {
  const control = new SimPauseControl();
  const engine = new SimEngine({ policy: echoPolicy, seed: 1 });
  const app = createSimApp({ engine, control, latency: latencyModel({ ttftMs: 0, tokensPerSecond: 80 }) });
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => resolve(s));
  });
  servers.push(server);
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const post = (path: string, body: unknown = {}) =>
    fetch(`${url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
  return { url, control, post };
}

const LONG = Array.from({ length: 40 }, (_, i) => `w${i}`).join(' ');
const chat = (stream: boolean) => ({
  model: 'sim-qwen3',
  messages: [{ role: 'user', content: LONG }],
  return_token_ids: true,
  logprobs: true,
  stream,
});

async function until(check: () => boolean): Promise<void> {
  for (let i = 0; i < 500 && !check(); i++) await new Promise((r) => setTimeout(r, 10));
  if (!check()) throw new Error('timed out waiting');
}

async function sseEvents(reply: Response): Promise<Record<string, unknown>[]> {
  const text = await reply.text();
  return text
    .split('\n\n')
    .filter((e) => e.startsWith('data: ') && !e.startsWith('data: [DONE]'))
    .map((e) => JSON.parse(e.slice(6)) as Record<string, unknown>);
}

describe('sim pause and weight switch (vLLM semantics)', () => {
  it('abort answers a whole chat with the tokens ready so far, finish_reason "abort"', async () => {
    const { control, post } = await start();
    const full = (await (await post('/v1/chat/completions', chat(false))).json()) as Json;
    expect(full.choices[0].finish_reason).toBe('stop');
    const n = full.choices[0].token_ids.length;

    const pending = post('/v1/chat/completions', chat(false));
    await until(() => control.runningCount === 1);
    await new Promise((r) => setTimeout(r, 300));
    expect((await (await post('/pause?mode=abort')).json()) as object).toEqual({ status: 'paused' });
    const cut = (await (await pending).json()) as Json;
    const choice = cut.choices[0];
    expect(choice.finish_reason).toBe('abort');
    expect(choice.token_ids.length).toBeGreaterThan(0);
    expect(choice.token_ids.length).toBeLessThan(n);
    expect(choice.token_ids).toEqual(full.choices[0].token_ids.slice(0, choice.token_ids.length));
    expect(choice.logprobs.content).toHaveLength(choice.token_ids.length);
    expect(cut.usage.completion_tokens).toBe(choice.token_ids.length);
    expect(((await (await fetch(`${(await start()).url}/is_paused`)).json()) as Json).is_paused).toBe(false);
  });

  it('abort ends a stream with the rest of the ready tokens and an abort chunk', async () => {
    const { control, post } = await start();
    const pending = post('/v1/chat/completions', chat(true));
    await until(() => control.runningCount === 1);
    await new Promise((r) => setTimeout(r, 300));
    await post('/pause?mode=abort');
    const events = await sseEvents(await pending);
    const choices = events.flatMap((e) => e.choices as Json[]);
    expect(choices.at(-1).finish_reason).toBe('abort');
    const ids = choices.flatMap((c) => c.token_ids ?? []);
    expect(ids.length).toBeGreaterThan(0);
    expect(ids.length).toBeLessThan(80);
  });

  it('a request sent while paused waits and runs after resume; keep stamps the new version on later tokens', async () => {
    const { control, post } = await start();
    const pending = post('/v1/chat/completions', chat(false));
    await until(() => control.runningCount === 1);
    await new Promise((r) => setTimeout(r, 300));
    await post('/pause?mode=keep');
    const waiting = post('/v1/chat/completions', {
      ...chat(false),
      messages: [{ role: 'user', content: 'hi' }],
    });
    let waited = false;
    void waiting.then(() => {
      waited = true;
    });
    expect(await (await post('/start_weight_update')).json()).toEqual({ message: 'Weight update started' });
    expect((await post('/start_weight_update')).status).toBe(409);
    expect((await post('/update_weights', {})).status).toBe(400);
    expect((await post('/update_weights', { update_info: { model_path: '/ckpt/v3' } })).status).toBe(200);
    const finished = (await (await post('/finish_weight_update', { weight_version: '3' })).json()) as Json;
    expect(finished.weight_gen).toBe(1);
    await new Promise((r) => setTimeout(r, 200));
    expect(waited).toBe(false);
    await post('/resume');
    const kept = ((await (await pending).json()) as Json).choices[0];
    expect(kept.finish_reason).toBe('stop');
    const spans = kept.weight_version_spans as [number | null, number][];
    expect(spans).toHaveLength(2);
    expect(spans[0]![0]).toBeNull();
    expect(spans[1]![0]).toBe(3);
    expect(spans[0]![1] + spans[1]![1]).toBe(kept.token_ids.length);
    expect(spans[0]![1]).toBeGreaterThan(0);
    const later = ((await (await waiting).json()) as Json).choices[0];
    expect(later.weight_version_spans).toEqual([[3, later.token_ids.length]]);
  });

  it('wait returns once the running generation ended; a bad mode is a 400 naming it', async () => {
    const { control, post } = await start();
    const pending = post('/v1/chat/completions', chat(false));
    await until(() => control.runningCount === 1);
    let answered = false;
    void pending.then(() => {
      answered = true;
    });
    await post('/pause?mode=wait');
    await new Promise((r) => setImmediate(r));
    expect(answered).toBe(true);
    expect(((await (await pending).json()) as Json).choices[0].finish_reason).toBe('stop');
    expect(control.paused).toBe(true);
    const bad = await post('/pause?mode=sleep');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as Json).error.param).toBe('mode');
  });
});

describe('the sim engine shares a token budget between running sequences', () => {
  it('slows each sequence as more share the budget, and stops the clock while paused', async () => {
    const control = new SimPauseControl({ perSequence: 100, budget: 150 });
    expect(control.speed).toBe(1);
    const a = control.start([10, 20, 30], performance.now());
    expect(control.speed).toBe(1);
    const b = control.start([10, 20, 30], performance.now());
    // Two sequences at 100 tokens/s nominal would need 200: each gets 150 / 200 of its speed.
    expect(control.speed).toBe(0.75);
    await control.pause('keep');
    expect(control.speed).toBe(0);
    const frozen = a.elapsed();
    await new Promise((r) => setTimeout(r, 30));
    expect(a.elapsed()).toBe(frozen);
    control.resume();
    b.end();
    expect(control.speed).toBe(1);
    a.end();
    const { busyMs, totalMs } = control.usage();
    expect(busyMs).toBeGreaterThan(0);
    expect(busyMs).toBeLessThan(totalMs);
  });
});
