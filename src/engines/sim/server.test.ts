import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { SimEngine } from './engine.js';
import { latencyModel } from './latency.js';
import { echoPolicy, type Policy, scriptedPolicy } from './policies.js';
import { createSimApp, type SimAppOptions, type SimStreamEnd } from './server.js';

type Server = ReturnType<typeof serve>;
const servers: Server[] = [];

afterEach(async () => {
  const all = servers.splice(0);
  await Promise.all(
    all.map(
      (s) =>
        new Promise<void>((resolve) => {
          (s as unknown as { closeAllConnections(): void }).closeAllConnections();
          s.close(() => resolve());
        }),
    ),
  );
});

async function start(policy: Policy, options: Partial<SimAppOptions> = {}) {
  const engine = new SimEngine({ policy, seed: 1 });
  const app = createSimApp({ engine, ...options });
  const server = await new Promise<Server>((resolve, reject) => {
    const s = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, () => resolve(s));
    s.once('error', reject);
  });
  servers.push(server);
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'x', maxRetries: 0 });
  return { url, client };
}

const messages = [{ role: 'user' as const, content: 'Hello there, sim! 你好' }];

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};

describe('sim HTTP server', () => {
  it('answers a non-streaming chat with the engine text and vLLM token ids', async () => {
    const { url, client } = await start(echoPolicy);
    const completion = await client.chat.completions.create({ model: 'sim-qwen3', messages, seed: 3 });
    expect(completion.choices[0]!.message.content).toBe('Hello there, sim! 你好');
    expect(completion.id).toMatch(/^chatcmpl-[0-9a-f]+$/);
    expect(completion.model).toContain('sim');
    expect(completion.usage!.completion_tokens).toBeGreaterThan(0);

    const raw = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim-qwen3', messages, seed: 3 }),
    });
    expect(raw.status).toBe(200);
    const json = (await raw.json()) as {
      prompt_token_ids: number[];
      choices: { token_ids: number[] }[];
      usage: { prompt_tokens: number; completion_tokens: number };
    };
    expect(json.prompt_token_ids.length).toBe(json.usage.prompt_tokens);
    expect(json.choices[0]!.token_ids.length).toBe(json.usage.completion_tokens);
  });

  it('streams the same text as the non-streaming answer, with usage', async () => {
    const { client } = await start(echoPolicy);
    const whole = await client.chat.completions.create({ model: 'sim-qwen3', messages, seed: 5 });
    const stream = await client.chat.completions.create({
      model: 'sim-qwen3',
      messages,
      seed: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    let finish: string | null = null;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(finish).toBe('stop');
    expect(usage).toEqual(whole.usage);
  });

  it('streams tool calls that the client assembles', async () => {
    const policy = scriptedPolicy([
      { toolCall: { name: 'get_weather', arguments: { city: 'Paris' } }, text: 'Let me check.' },
    ]);
    const { client } = await start(policy);
    const runner = client.chat.completions.stream({
      model: 'sim-qwen3',
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
      tools: [weatherTool],
      stream_options: { include_usage: true },
    });
    const final = await runner.finalChatCompletion();
    const message = final.choices[0]!.message;
    expect(final.choices[0]!.finish_reason).toBe('tool_calls');
    expect(message.tool_calls).toHaveLength(1);
    const call = message.tool_calls![0]!;
    expect(call.type).toBe('function');
    if (call.type !== 'function') throw new Error('expected a function call');
    expect(call.function.name).toBe('get_weather');
    expect(JSON.parse(call.function.arguments)).toEqual({ city: 'Paris' });
    expect(call.id).toMatch(/^call_/);
    expect(final.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it('rejects n > 1 with an OpenAI-style error naming the param', async () => {
    const { url, client } = await start(echoPolicy);
    const error = await client.chat.completions.create({ model: 'sim-qwen3', messages, n: 2 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('n');

    const raw = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ messages, n: 2 }),
    });
    expect(raw.status).toBe(400);
    const body = (await raw.json()) as { error: Record<string, unknown> };
    expect(body.error).toMatchObject({ type: 'invalid_request_error', param: 'n' });
    expect(body.error).toHaveProperty('message');
    expect(body.error).toHaveProperty('code');
  });

  it('rejects malformed JSON, a missing messages array and engine validation errors with 400', async () => {
    const { url } = await start(echoPolicy);
    const post = (body: string) =>
      fetch(`${url}/v1/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body,
      });
    const bad = await post('{"messages": [');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { type: string } }).error.type).toBe('invalid_request_error');

    const missing = await post('{"model": "sim-qwen3"}');
    expect(missing.status).toBe(400);
    expect(((await missing.json()) as { error: { param: string } }).error.param).toBe('messages');

    const engineError = await post(JSON.stringify({ messages, max_tokens: 0 }));
    expect(engineError.status).toBe(400);
    expect(((await engineError.json()) as { error: { param: string } }).error.param).toBe('max_tokens');
  });

  it('lists one sim model and answers /health', async () => {
    const { url, client } = await start(echoPolicy);
    const models = await client.models.list();
    expect(models.data).toHaveLength(1);
    expect(models.data[0]!.id).toContain('sim');
    expect((await fetch(`${url}/health`)).status).toBe(200);
  });

  it('refuses a served model name without "sim"', () => {
    expect(() => createSimApp({ engine: new SimEngine({ policy: echoPolicy }), model: 'qwen3' })).toThrow(
      /sim/,
    );
  });

  it('paces streamed chunks with the latency model', async () => {
    const { client } = await start(echoPolicy, {
      latency: latencyModel({ ttftMs: 50, tokensPerSecond: 200 }),
    });
    const t0 = performance.now();
    const stream = await client.chat.completions.create({
      model: 'sim-qwen3',
      messages: [{ role: 'user', content: 'one two three four five six' }],
      stream: true,
    });
    for await (const _ of stream) {
      // drain
    }
    // ttft 50 ms + (n - 1) * 5 ms for at least 7 tokens
    expect(performance.now() - t0).toBeGreaterThanOrEqual(75);
  });

  it('stops writing when the client aborts a slow stream, and keeps serving', async () => {
    const ends: SimStreamEnd[] = [];
    let resolveEnd: () => void = () => {};
    const ended = new Promise<void>((resolve) => {
      resolveEnd = resolve;
    });
    const { client } = await start(echoPolicy, {
      latency: latencyModel({ ttftMs: 0, tokensPerSecond: 5 }),
      onStreamEnd: (end) => {
        ends.push(end);
        resolveEnd();
      },
    });
    const controller = new AbortController();
    const stream = await client.chat.completions.create(
      {
        model: 'sim-qwen3',
        messages: [{ role: 'user', content: 'a fairly long message that takes many tokens to stream back' }],
        stream: true,
      },
      { signal: controller.signal },
    );
    let received = 0;
    // The client ends the iteration (or throws an abort error, depending on timing) once aborted.
    await (async () => {
      for await (const _ of stream) {
        received++;
        if (received === 2) controller.abort();
      }
    })().catch((error: unknown) => {
      if (!(error instanceof Error) || !/abort/i.test(`${error.name} ${error.message}`)) throw error;
    });
    expect(received).toBe(2);
    await ended;
    expect(ends).toHaveLength(1);
    expect(ends[0]!.aborted).toBe(true);
    expect(ends[0]!.chunksSent).toBeLessThan(10);

    const models = await client.models.list();
    expect(models.data[0]!.id).toContain('sim');
  });
});

describe('startSimServer (stepwise sim)', () => {
  it('serves a scripted policy with a latency model and closes', async () => {
    const { startSimServer } = await import('./serve.js');
    const server = await startSimServer({
      port: 0,
      policy: 'scripted',
      script: [{ answer: 'All done.' }],
      ttftMs: 1,
      tokensPerSecond: 1000,
    });
    try {
      expect(server.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
      const client = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'x', maxRetries: 0 });
      const completion = await client.chat.completions.create({ model: server.model, messages });
      expect(completion.choices[0]!.message.content).toBe('All done.');
    } finally {
      await server.close();
    }
  });

  it('refuses a scripted policy without a script', async () => {
    const { startSimServer } = await import('./serve.js');
    await expect(startSimServer({ port: 0, policy: 'scripted' })).rejects.toThrow(/script/);
    await expect(startSimServer({ port: 0, policy: 'scripted', script: [{ nope: 1 }] })).rejects.toThrow(
      /answer/,
    );
  });
});
