import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import OpenAI from 'openai';
import { afterEach, describe, expect, it } from 'vitest';
import { loadQwen3Tokenizer } from '../../text/index.js';
import { SimEngine } from './engine.js';
import type { TextCompletion, TextCompletionChunk } from './format.js';
import { latencyModel } from './latency.js';
import { echoPolicy, type Policy, randomPolicy, scriptedPolicy } from './policies.js';
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

  it('paces streamed text completions with the latency model too', async () => {
    const app = createSimApp({
      engine: new SimEngine({ policy: echoPolicy }),
      latency: latencyModel({ ttftMs: 40, tokensPerSecond: 200 }),
    });
    const t0 = performance.now();
    const res = await app.request('/v1/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ prompt: 'one two three four five six', stream: true }),
    });
    await res.text();
    // ttft 40 ms + (n - 1) * 5 ms for 7 tokens (six words and EOS)
    expect(performance.now() - t0).toBeGreaterThanOrEqual(65);
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

  it('refuses a script step the policy could not play, naming its index and field', async () => {
    const { checkSimOptions } = await import('./serve.js');
    // These started, then failed each request (a 500, a 400) or said "5" for an answer.
    const refused = (script: unknown) => {
      try {
        checkSimOptions({ policy: 'scripted', script });
      } catch (error) {
        return (error as { field?: string }).field;
      }
      return 'accepted';
    };
    expect(refused([{ answer: 'ok' }, { toolCall: { name: 'ls' } }])).toBe('script.1.toolCall.arguments');
    expect(refused([{ toolCall: 'ls' }])).toBe('script.0.toolCall');
    expect(refused([{ answer: 5 }])).toBe('script.0.answer');
    expect(refused([{ toolCall: { name: 'ls', arguments: {} }, text: 'Listing.', note: 'kept' }])).toBe(
      'accepted',
    );
  });
});

const tok = loadQwen3Tokenizer();
const IM_END = '<|im_end|>';

/** POSTs JSON straight into the Hono app (no socket). */
function post(app: ReturnType<typeof createSimApp>, path: string, body: unknown) {
  return app.request(path, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
}

/** The `data:` payloads of an SSE body, `[DONE]` last. */
async function sseData(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split('\n\n')
    .filter((e) => e !== '')
    .map((e) => {
      expect(e.startsWith('data: ')).toBe(true);
      return e.slice('data: '.length);
    });
}

async function errorOf(res: Response): Promise<{ status: number; param: string | null; message: string }> {
  const body = (await res.json()) as { error: { param: string | null; message: string; type: string } };
  expect(body.error.type).toBe('invalid_request_error');
  return { status: res.status, param: body.error.param, message: body.error.message };
}

describe('POST /v1/completions', () => {
  const app = () => createSimApp({ engine: new SimEngine({ policy: echoPolicy, seed: 1 }) });
  const prompt = 'Grüße 🌍 and 你好';

  it('answers a text prompt with a vLLM text_completion: ids decode to the text and EOS', async () => {
    const res = await post(app(), '/v1/completions', { model: 'sim-qwen3', prompt, max_tokens: 64, seed: 3 });
    expect(res.status).toBe(200);
    const body = (await res.json()) as TextCompletion;
    expect(body.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(body.object).toBe('text_completion');
    expect(body.model).toBe('sim-qwen3');
    const choice = body.choices[0]!;
    expect(choice.text).toBe(prompt);
    expect(choice.finish_reason).toBe('stop');
    expect(choice.logprobs).toBeNull();
    expect(choice.prompt_token_ids).toEqual(tok.encode(prompt));
    expect(tok.decode(choice.token_ids!)).toBe(prompt + IM_END);
    expect(body.usage).toEqual({
      prompt_tokens: choice.prompt_token_ids!.length,
      completion_tokens: choice.token_ids!.length,
      total_tokens: choice.prompt_token_ids!.length + choice.token_ids!.length,
    });
  });

  it('takes token ids (or a batch of one) as the prompt; is deterministic for a seed', async () => {
    const a = createSimApp({ engine: new SimEngine({ policy: randomPolicy() }) });
    const ids = tok.encode('Tell me something.');
    const bodies = await Promise.all(
      [ids, [ids], 'Tell me something.', ['Tell me something.']].map(async (p) => {
        const res = await post(a, '/v1/completions', { prompt: p, seed: 11, logprobs: 2 });
        expect(res.status).toBe(200);
        return (await res.json()) as TextCompletion;
      }),
    );
    const [first] = bodies;
    expect(first!.choices[0]!.prompt_token_ids).toEqual(ids);
    for (const b of bodies) expect(b.choices).toEqual(first!.choices);
    // vLLM's default max_tokens for this API is 16.
    expect(first!.choices[0]!.token_ids!.length).toBeLessThanOrEqual(16);
    const lp = first!.choices[0]!.logprobs!;
    expect(lp.tokens).toHaveLength(first!.usage.completion_tokens);
    expect(lp.top_logprobs.every((t) => Object.keys(t).length === 2)).toBe(true);
    const other = (await (
      await post(a, '/v1/completions', { prompt: ids, seed: 12 })
    ).json()) as TextCompletion;
    expect(other.choices[0]!.token_ids).not.toEqual(first!.choices[0]!.token_ids);
  });

  it('streams data: chunks then [DONE]: prompt ids first, every chunk its token ids, usage last', async () => {
    const res = await post(app(), '/v1/completions', {
      prompt,
      seed: 3,
      max_tokens: 64,
      logprobs: 0,
      stream: true,
      stream_options: { include_usage: true },
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const data = await sseData(res);
    expect(data.at(-1)).toBe('[DONE]');
    const chunks = data.slice(0, -1).map((d) => JSON.parse(d) as TextCompletionChunk);
    const usage = chunks.at(-1)!;
    expect(usage.choices).toEqual([]);
    // The usage chunk is written without nulls, as vLLM does.
    expect(Object.keys(usage).sort()).toEqual(['choices', 'created', 'id', 'model', 'object', 'usage']);
    const choices = chunks.slice(0, -1).map((c) => c.choices[0]!);
    expect(choices.map((c) => c.text).join('')).toBe(prompt);
    expect(choices[0]!.prompt_token_ids).toEqual(tok.encode(prompt));
    expect(choices.slice(1).every((c) => c.prompt_token_ids === null)).toBe(true);
    expect(choices.every((c) => c.token_ids!.length === 1)).toBe(true);
    const ids = choices.flatMap((c) => c.token_ids!);
    expect(tok.decode(ids)).toBe(prompt + IM_END);
    expect(choices.at(-1)!.finish_reason).toBe('stop');
    expect(choices.flatMap((c) => c.logprobs!.tokens)).toHaveLength(ids.length);
    expect(usage.usage).toEqual({
      prompt_tokens: tok.encode(prompt).length,
      completion_tokens: ids.length,
      total_tokens: tok.encode(prompt).length + ids.length,
    });
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it('rejects what the sim does not serve with OpenAI-style 400s naming the field', async () => {
    const a = app();
    const cases: [unknown, string][] = [
      [{ prompt: ['a', 'b'] }, 'prompt'],
      [{ prompt: [[1], [2]] }, 'prompt'],
      [{ prompt: 3 }, 'prompt'],
      [{}, 'prompt'],
      [{ prompt: '' }, 'prompt'],
      [{ prompt: [1, 10_000_000] }, 'prompt.1'],
      [{ prompt: 'x', echo: true }, 'echo'],
      [{ prompt: 'x', n: 2 }, 'n'],
      [{ prompt: 'x', best_of: 3 }, 'best_of'],
      [{ prompt: 'x', suffix: 'y' }, 'suffix'],
      [{ prompt: 'x', logprobs: true }, 'logprobs'],
      [{ prompt: 'x', logprobs: 30 }, 'logprobs'],
      [{ prompt: 'x', max_tokens: 0 }, 'max_tokens'],
      [{ prompt: 'x', response_format: { type: 'yaml' } }, 'response_format.type'],
    ];
    for (const [body, param] of cases) {
      const error = await errorOf(await post(a, '/v1/completions', body));
      expect({ body, status: error.status, param: error.param }).toEqual({ body, status: 400, param });
    }
    expect((await errorOf(await post(a, '/v1/completions', { prompt: ['a', 'b'] }))).message).toMatch(
      /batch of 2/,
    );
    expect((await errorOf(await post(a, '/v1/completions', { prompt: 'x', echo: true }))).message).toMatch(
      /echo/,
    );
  });
});

describe('chat tool_choice and response_format over HTTP', () => {
  const script = scriptedPolicy([
    { toolCall: { name: 'get_weather', arguments: { city: 'Paris' } } },
    { answer: 'Sunny.' },
  ]);
  const app = () => createSimApp({ engine: new SimEngine({ policy: script }) });
  const ask = { messages, tools: [weatherTool] };

  it('tool_choice none answers without calls; auto calls', async () => {
    const auto = (await (await post(app(), '/v1/chat/completions', ask)).json()) as OpenAI.ChatCompletion;
    expect(auto.choices[0]!.finish_reason).toBe('tool_calls');
    const none = await post(app(), '/v1/chat/completions', { ...ask, tool_choice: 'none' });
    expect(none.status).toBe(200);
    const body = (await none.json()) as OpenAI.ChatCompletion;
    expect(body.choices[0]!.message.content).toBe('Sunny.');
    expect(body.choices[0]!.message.tool_calls).toEqual([]);
    expect(body.choices[0]!.finish_reason).toBe('stop');
  });

  it('response_format json_schema gives JSON content; streamed content is the same JSON', async () => {
    const schema = {
      type: 'object',
      properties: { summary: { type: 'string' }, words: { type: 'integer' } },
      required: ['summary', 'words'],
    };
    const body = {
      messages,
      response_format: { type: 'json_schema', json_schema: { name: 'summary', schema, strict: true } },
    };
    const a = createSimApp({ engine: new SimEngine({ policy: echoPolicy }) });
    const res = (await (await post(a, '/v1/chat/completions', body)).json()) as OpenAI.ChatCompletion;
    const content = res.choices[0]!.message.content!;
    expect(JSON.parse(content)).toEqual({ summary: 'Hello there, sim! 你好', words: 0 });
    const data = await sseData(await post(a, '/v1/chat/completions', { ...body, stream: true }));
    const streamed = data
      .slice(0, -1)
      .map((d) => (JSON.parse(d) as OpenAI.ChatCompletionChunk).choices[0]?.delta.content ?? '')
      .join('');
    expect(streamed).toBe(content);
  });

  it('rejects bad tool_choice and response_format values naming the field', async () => {
    const cases: [unknown, string][] = [
      [{ messages, tool_choice: 'auto' }, 'tool_choice'],
      [{ ...ask, tool_choice: 'always' }, 'tool_choice'],
      [
        { ...ask, tool_choice: { type: 'function', function: { name: 'nope' } } },
        'tool_choice.function.name',
      ],
      [{ ...ask, tool_choice: { type: 'function', function: {} } }, 'tool_choice.function.name'],
      [{ messages, response_format: { type: 'xml' } }, 'response_format.type'],
      [{ messages, response_format: { type: 'json_schema' } }, 'response_format.json_schema'],
      [
        { messages, response_format: { type: 'json_schema', json_schema: { schema: {} } } },
        'response_format.json_schema.name',
      ],
    ];
    for (const [body, param] of cases) {
      const error = await errorOf(await post(app(), '/v1/chat/completions', body));
      expect({ body, status: error.status, param: error.param }).toEqual({ body, status: 400, param });
    }
  });
});

describe('/v1/completions with the official openai client', () => {
  it('creates completions, non-streaming and streaming, with the same text and usage', async () => {
    const { client } = await start(echoPolicy);
    const prompt = 'Hello there, sim! 你好';
    const whole = await client.completions.create({
      model: 'sim-qwen3',
      prompt,
      max_tokens: 32,
      seed: 5,
      logprobs: 3,
    });
    expect(whole.object).toBe('text_completion');
    expect(whole.id).toMatch(/^cmpl-/);
    const choice = whole.choices[0]!;
    expect(choice.text).toBe(prompt);
    expect(choice.finish_reason).toBe('stop');
    const ids = (choice as unknown as { token_ids: number[] }).token_ids;
    expect(tok.decode(ids)).toBe(prompt + IM_END);
    expect(choice.logprobs!.tokens).toHaveLength(ids.length);
    expect(choice.logprobs!.top_logprobs!.every((t) => Object.keys(t).length === 3)).toBe(true);
    expect(whole.usage!.completion_tokens).toBe(ids.length);

    const stream = await client.completions.create({
      model: 'sim-qwen3',
      prompt: tok.encode(prompt),
      max_tokens: 32,
      seed: 5,
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    const streamedIds: number[] = [];
    let finish: string | null = null;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      const c = chunk.choices[0] as (OpenAI.CompletionChoice & { token_ids?: number[] }) | undefined;
      text += c?.text ?? '';
      streamedIds.push(...(c?.token_ids ?? []));
      finish = c?.finish_reason ?? finish;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(prompt);
    expect(streamedIds).toEqual(ids);
    expect(finish).toBe('stop');
    expect(usage).toEqual(whole.usage);

    const error = await client.completions.create({ model: 'sim-qwen3', prompt: ['a', 'b'] }).then(
      () => null,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('prompt');
  });
});

describe("sim HTTP server: SGLang's native /generate", () => {
  const tokenizer = loadQwen3Tokenizer();
  const prompt = tokenizer.encode('<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n');
  const post = async (url: string, body: unknown) => {
    const res = await fetch(`${url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
    });
    // biome-ignore lint/suspicious/noExplicitAny: the answer is checked field by field
    return { status: res.status, json: (await res.json()) as any };
  };

  it('answers {text, output_ids, meta_info} as SGLang does, the same generation as /v1/completions', async () => {
    const { url, client } = await start(echoPolicy);
    const sampling = { max_new_tokens: 50, sampling_seed: 4, temperature: 0.5 };
    const { status, json } = await post(url, {
      input_ids: prompt,
      sampling_params: sampling,
      return_logprob: true,
    });
    expect(status).toBe(200);
    const vllm = (await client.completions.create({
      model: 'sim-qwen3',
      prompt,
      max_tokens: 50,
      seed: 4,
      logprobs: 0,
      return_token_ids: true,
    } as never)) as unknown as TextCompletion;
    const choice = vllm.choices[0]!;
    expect(json.text).toBe('Hello there');
    expect(json.output_ids).toEqual(choice.token_ids);
    expect(json.output_ids.at(-1)).toBe(tokenizer.tokenId('<|im_end|>'));
    expect(json.meta_info).toMatchObject({
      finish_reason: { type: 'stop', matched: tokenizer.tokenId('<|im_end|>') },
      prompt_tokens: prompt.length,
      completion_tokens: json.output_ids.length,
    });
    expect(json.meta_info.output_token_logprobs).toEqual(
      json.output_ids.map((id: number, i: number) => [choice.logprobs!.token_logprobs[i], id, null]),
    );
  });

  it("cuts at max_new_tokens with SGLang's length reason, and sends logprobs only when asked", async () => {
    const { url } = await start(echoPolicy);
    const { json } = await post(url, { input_ids: prompt, sampling_params: { max_new_tokens: 2 } });
    expect(json.output_ids).toHaveLength(2);
    expect(json.meta_info.finish_reason).toEqual({ type: 'length', length: 2 });
    expect(json.meta_info).not.toHaveProperty('output_token_logprobs');
  });

  it('refuses what SGLang refuses: an unknown sampling name, no ids; and a stream, which it does not serve', async () => {
    const { url } = await start(echoPolicy);
    const unknown = await post(url, { input_ids: prompt, sampling_params: { max_tokens: 5 } });
    expect(unknown.status).toBe(400);
    expect(unknown.json.error.message).toMatch(/^sampling_params\.max_tokens: not a sampling parameter/);
    expect((await post(url, { input_ids: [] })).status).toBe(400);
    const streamed = await post(url, { input_ids: prompt, stream: true });
    expect(streamed.status).toBe(400);
    expect(streamed.json.error.message).toMatch(/answers whole/);
  });
});
