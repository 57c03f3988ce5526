import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer, renderChat } from '../packages/core/src/text/index.js';
import { callJson, type Json } from './support/http.js';

/*
 * `--engine sglang=URL` end to end: real HTTP on loopback, a real SQLite file, the official openai
 * client as the agent, and in place of SGLang a loopback server that answers as SGLang does. Its
 * shapes come from SGLang's source: GET /v1/models' ModelCard (max_model_len) and the chat answer
 * with `prompt_token_ids`/`token_ids` in the choice and errors as ErrorResponse {object: 'error',
 * message, type, param, code} (python/sglang/srt/entrypoints/openai/protocol.py); the native
 * /generate answer {text, output_ids, meta_info: {finish_reason, prompt_tokens, completion_tokens,
 * output_token_logprobs: [logprob, id, text|null][]}} (python/sglang/srt/managers/tokenizer_manager.py,
 * _handle_batch_output) and its error {error: {message}} (python/sglang/srt/entrypoints/http_server.py).
 */

const MODEL = 'Qwen/Qwen3-8B';
const CONTEXT = 4096;
const IM_END = 151645;

interface Reply {
  status?: number;
  body?: unknown;
  /** Sent as server-sent events, one `data:` line each, then [DONE]. */
  events?: unknown[];
}

/** A stand-in SGLang server: what it received per route, and what it answers (set per test). */
async function fakeSglang() {
  const received: { path: string; body: Json }[] = [];
  const answers: Record<string, (body: Json) => Reply> = {};
  const server = http.createServer((req, res) => {
    let text = '';
    req.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    req.on('end', () => {
      const path = req.url ?? '';
      if (req.method === 'GET' && path === '/v1/models') {
        res.writeHead(200, { 'content-type': 'application/json' });
        const card = { id: MODEL, object: 'model', created: 1, owned_by: 'sglang', root: MODEL };
        res.end(
          JSON.stringify({ object: 'list', data: [{ ...card, parent: null, max_model_len: CONTEXT }] }),
        );
        return;
      }
      const body = text ? JSON.parse(text) : null;
      received.push({ path, body });
      // SGLang's serving_chat refuses its id switches in a stream (_convert_to_internal_request).
      if (
        path === '/v1/chat/completions' &&
        body?.stream &&
        (body.return_token_ids || body.return_prompt_token_ids)
      ) {
        res.writeHead(400, { 'content-type': 'application/json' });
        const message = 'return_prompt_token_ids is not supported with streaming.';
        res.end(JSON.stringify({ object: 'error', message, type: 'BadRequest', param: null, code: 400 }));
        return;
      }
      const answer = answers[path];
      if (!answer) return void res.writeHead(404).end();
      const reply = answer(body);
      if (reply.events) {
        res.writeHead(200, { 'content-type': 'text/event-stream' });
        for (const e of reply.events) res.write(`data: ${JSON.stringify(e)}\n\n`);
        res.end('data: [DONE]\n\n');
        return;
      }
      res.writeHead(reply.status ?? 200, { 'content-type': 'application/json' });
      res.end(typeof reply.body === 'string' ? reply.body : JSON.stringify(reply.body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    url,
    received,
    answers,
    close: () => {
      server.close();
    },
  };
}

/** SGLang's whole /generate answer for `ids` with `logprobs`, finished as `finish`. */
function generated(text: string, ids: number[], logprobs: number[], finish: object, promptTokens: number) {
  return {
    text,
    output_ids: ids,
    meta_info: {
      id: 'a1b2',
      finish_reason: finish,
      prompt_tokens: promptTokens,
      weight_version: 'default',
      input_token_logprobs: [],
      output_token_logprobs: ids.map((id, i) => [logprobs[i], id, null]),
      output_token_logprobs_length: ids.length,
      reasoning_tokens: 0,
      completion_tokens: ids.length,
      cached_tokens: 0,
      e2e_latency: 0.05,
    },
  };
}

let dir: string;
let engine: Awaited<ReturnType<typeof fakeSglang>>;
let server: RunningServer;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-sglang-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let dbCount = 0;
async function serve(): Promise<void> {
  engine = await fakeSglang();
  server = await startServer({
    dbPath: join(dir, `s${dbCount++}.db`),
    port: 0,
    engines: [`sglang=${engine.url}`],
  });
}
afterEach(async () => {
  await server.close();
  engine.close();
});

const generate = (body: unknown) => callJson('POST', `${server.url}/generate`, body);

describe('sglang engine: the gateway /generate goes to SGLang native /generate', () => {
  it('sends the prompt ids with SGLang sampling names and answers the ids and logprobs SGLang sent', async () => {
    await serve();
    const ids = [9707, 0, IM_END];
    const logprobs = [-0.25, -1.5, -0.0625];
    engine.answers['/generate'] = () => ({
      body: generated('Hello!', ids, logprobs, { type: 'stop', matched: IM_END }, 3),
    });
    const { status, json } = await generate({
      prompt_ids: [1, 2, 3],
      sampling_params: {
        max_new_tokens: 64,
        temperature: 0.7,
        top_k: 20,
        seed: 5,
        stop: ['\n\n'],
        logprobs: true,
      },
    });
    expect(status).toBe(200);
    expect(engine.received).toEqual([
      {
        path: '/generate',
        body: {
          input_ids: [1, 2, 3],
          sampling_params: {
            max_new_tokens: 64,
            temperature: 0.7,
            top_k: 20,
            sampling_seed: 5,
            stop: ['\n\n'],
          },
          return_logprob: true,
          logprob_start_len: -1,
          stream: false,
        },
      },
    ]);
    expect(json).toMatchObject({
      prompt_ids: [1, 2, 3],
      response_ids: ids,
      token_ids: ids,
      logprobs,
      log_probs: logprobs,
      text: 'Hello!',
      finish_reason: 'stop',
      stop_reason: 'stop',
      engine_id: expect.stringMatching(/^sglang@127\.0\.0\.1:\d+$/),
    });
  });

  it("fills a missing length from SGLang's max_model_len, and maps a length stop to 'length'", async () => {
    await serve();
    engine.answers['/generate'] = () => ({
      body: generated('ab', [64, 65], [-1, -2], { type: 'length', length: 2 }, 4),
    });
    const { status, json } = await generate({
      input_ids: [5, 6, 7, 8],
      sampling_params: { logprobs: false },
    });
    expect(status).toBe(200);
    expect(engine.received[0]!.body.sampling_params).toEqual({ max_new_tokens: CONTEXT - 4 });
    expect(json).toMatchObject({ finish_reason: 'length', response_ids: [64, 65], log_probs: null });
  });

  it('refuses a sampling name SGLang does not take, and n > 1, before anything is sent', async () => {
    await serve();
    const unknown = await generate({ prompt_ids: [1], sampling_params: { best_of: 2 } });
    expect(unknown.status).toBe(400);
    expect(unknown.json.error).toMatchObject({ param: 'sampling_params.best_of' });
    expect(unknown.json.error.message).toMatch(/not a sampling parameter of SGLang/);
    const many = await generate({ prompt_ids: [1], sampling_params: { n: 2 } });
    expect(many.status).toBe(400);
    expect(many.json.error.param).toBe('sampling_params.n');
    expect(engine.received).toEqual([]);
  });

  it("passes SGLang's errors on with their message: {error: {message}}, ErrorResponse and an aborted generation", async () => {
    await serve();
    const cases: { reply: Reply; status: number; message: RegExp }[] = [
      {
        reply: {
          status: 400,
          body: { error: { message: 'The input (5000 tokens) is longer than the model context' } },
        },
        status: 400,
        message: /^The input \(5000 tokens\) is longer/,
      },
      {
        reply: {
          status: 400,
          body: { object: 'error', message: 'bad top_p', type: 'BadRequest', param: null, code: 400 },
        },
        status: 400,
        message: /^bad top_p$/,
      },
      {
        reply: {
          body: {
            text: '',
            output_ids: [],
            meta_info: {
              finish_reason: { type: 'abort', message: 'prompt too long', status_code: 400 },
              prompt_tokens: 1,
              completion_tokens: 0,
            },
          },
        },
        status: 400,
        message: /aborted the generation: prompt too long/,
      },
    ];
    for (const c of cases) {
      engine.answers['/generate'] = () => c.reply;
      const { status, json } = await generate({ prompt_ids: [1], sampling_params: { max_tokens: 4 } });
      expect(status).toBe(c.status);
      expect(json.error.message).toMatch(c.message);
    }
  });

  it('answers 502 for an answer that is not a generation of the request', async () => {
    await serve();
    const ok = generated('hi', [7, 8], [-1, -2], { type: 'stop', matched: 8 }, 2);
    const cases: { body: unknown; message: RegExp }[] = [
      { body: 'not json', message: /not JSON/ },
      { body: { ...ok, output_ids: [7, 'x'] }, message: /malformed \/generate answer: output_ids\.1/ },
      {
        body: {
          ...ok,
          meta_info: {
            ...ok.meta_info,
            output_token_logprobs: [
              [-1, 7, null],
              [-2, 9, null],
            ],
          },
        },
        message: /output_token_logprobs for other tokens/,
      },
      {
        body: { ...ok, meta_info: { ...ok.meta_info, prompt_tokens: 1 } },
        message: /counted 1 prompt tokens for the 2 ids/,
      },
      { body: { ...ok, meta_info: { ...ok.meta_info, finish_reason: null } }, message: /unfinished/ },
    ];
    for (const c of cases) {
      engine.answers['/generate'] = () => ({ body: c.body });
      const { status, json } = await generate({ prompt_ids: [1, 2], sampling_params: { max_tokens: 4 } });
      expect(status).toBe(502);
      expect(json.error.message).toMatch(c.message);
    }
  });
});

async function init(): Promise<{ trajectory_uid: string; base_url: string }> {
  const { status, json } = await callJson('POST', `${server.url}/init_trajectory`, {});
  expect(status).toBe(200);
  return json;
}
const client = (baseURL: string) => new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });
const messages = [{ role: 'user' as const, content: 'Say hi.' }];

/** SGLang's whole chat answer (ChatCompletionResponse) with the ids it returns when asked. */
function chatAnswer(choice: Record<string, unknown>) {
  return {
    id: '5d1b6c',
    object: 'chat.completion',
    created: 1,
    model: MODEL,
    choices: [
      {
        index: 0,
        message: { role: 'assistant', content: 'Hi!', reasoning_content: null, tool_calls: null },
        logprobs: {
          content: [
            { token: 'Hi', bytes: [72, 105], logprob: -0.5, top_logprobs: [] },
            { token: '!', bytes: [33], logprob: -0.25, top_logprobs: [] },
            { token: '<|im_end|>', bytes: [], logprob: -0.125, top_logprobs: [] },
          ],
        },
        finish_reason: 'stop',
        matched_stop: IM_END,
        prompt_token_ids: [151644, 872, 198],
        token_ids: [13048, 0, IM_END],
        ...choice,
      },
    ],
    usage: {
      prompt_tokens: 3,
      total_tokens: 6,
      completion_tokens: 3,
      prompt_tokens_details: null,
      reasoning_tokens: 0,
    },
  };
}

describe("sglang engine: chat calls go to SGLang's OpenAI-compatible API", () => {
  it("stores the ids and logprobs of SGLang's whole answer, asked with return_token_ids and return_prompt_token_ids", async () => {
    await serve();
    engine.answers['/v1/chat/completions'] = () => ({ body: chatAnswer({}) });
    const t = await init();
    const answer = await client(t.base_url).chat.completions.create({ model: 'm', messages });
    expect(answer.choices[0]!.message.content).toBe('Hi!');
    const sent = engine.received[0]!;
    expect(sent.path).toBe('/v1/chat/completions');
    expect(sent.body).toMatchObject({
      model: MODEL,
      return_token_ids: true,
      return_prompt_token_ids: true,
      logprobs: true,
    });
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step).toMatchObject({
      promptIds: [151644, 872, 198],
      responseIds: [13048, 0, IM_END],
      responseLogprobs: [-0.5, -0.25, -0.125],
      tokenSource: 'engine',
      finishReason: 'stop',
      responseText: 'Hi!',
    });
    expect(step!.engineId).toMatch(/^sglang@/);
  });

  it('passes an SGLang ErrorResponse to the agent in OpenAI shape and stores no step', async () => {
    await serve();
    engine.answers['/v1/chat/completions'] = () => ({
      status: 400,
      body: {
        object: 'error',
        message: 'Requested token count exceeds the context length',
        type: 'BadRequest',
        param: null,
        code: 400,
      },
    });
    const t = await init();
    const err = await client(t.base_url)
      .chat.completions.create({ model: 'm', messages })
      .catch((e: unknown) => e as { status: number; message: string });
    expect(err).toMatchObject({ status: 400 });
    expect((err as { message: string }).message).toMatch(/exceeds the context length/);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    expect((await server.pool.stats()).failedCalls.upstreamError).toBe(1);
  });

  it('answers 502 and stores nothing when the ids SGLang sent are not token ids', async () => {
    await serve();
    engine.answers['/v1/chat/completions'] = () => ({ body: chatAnswer({ token_ids: [13048, -1, IM_END] }) });
    const t = await init();
    const err = await client(t.base_url)
      .chat.completions.create({ model: 'm', messages })
      .catch((e: unknown) => e as { status: number; message: string });
    expect(err).toMatchObject({ status: 502 });
    expect((err as { message: string }).message).toMatch(/malformed answer: choices\.0\.token_ids\.1/);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it('rebuilds the ids of a stream (SGLang streams no ids) and keeps no logprobs', async () => {
    await serve();
    const chunk = (delta: object, finish: string | null) => ({
      id: '5d1b6c',
      object: 'chat.completion.chunk',
      created: 1,
      model: MODEL,
      choices: [
        { index: 0, delta, logprobs: null, finish_reason: finish, matched_stop: finish ? IM_END : null },
      ],
      usage: null,
    });
    engine.answers['/v1/chat/completions'] = () => ({
      events: [
        chunk({ role: 'assistant', content: '' }, null),
        chunk({ content: 'Hi' }, null),
        chunk({ content: '!' }, 'stop'),
        {
          id: '5d1b6c',
          object: 'chat.completion.chunk',
          created: 1,
          model: MODEL,
          choices: [],
          usage: { prompt_tokens: 11, total_tokens: 14, completion_tokens: 3 },
        },
      ],
    });
    const t = await init();
    const stream = await client(t.base_url).chat.completions.create({
      model: 'm',
      messages,
      stream: true,
      chat_template_kwargs: { enable_thinking: false },
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    let text = '';
    for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
    expect(text).toBe('Hi!');
    // Neither id switch nor logprobs, which SGLang's streamed chat cannot honour; the usage chunk, yes.
    const sent = engine.received[0]!.body;
    expect(sent).not.toHaveProperty('return_token_ids');
    expect(sent).not.toHaveProperty('return_prompt_token_ids');
    expect(sent).not.toHaveProperty('logprobs');
    expect(sent.stream_options).toEqual({ include_usage: true });
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step).toMatchObject({ tokenSource: 'retokenized', responseLogprobs: null, responseText: 'Hi!' });
    expect(step!.responseIds.at(-1)).toBe(IM_END);
  });
});

describe("sglang engine over the sim's native /generate", () => {
  it('generates through /generate: the ids the sim generates for the same prompt and seed, decoding to its text', async () => {
    const sim = await startSimServer({ port: 0, policy: 'echo' });
    engine = {
      url: sim.url,
      received: [],
      answers: {},
      close: () => {
        void sim.close();
      },
    };
    server = await startServer({
      dbPath: join(dir, `s${dbCount++}.db`),
      port: 0,
      engines: [`sglang=${sim.url}`],
    });
    const tokenizer = loadQwen3Tokenizer();
    const prompt = renderChat({
      messages: [{ role: 'user', content: 'Echo me, please.' }],
      enableThinking: false,
    });
    const promptIds = tokenizer.encode(prompt);
    const { status, json } = await generate({ prompt_ids: promptIds, sampling_params: { seed: 11 } });
    expect(status).toBe(200);
    expect(json.text).toBe('Echo me, please.');
    // The sim's vLLM-style completions for the same prompt and seed: the same generation.
    const vllm = await callJson('POST', `${sim.url}/v1/completions`, {
      prompt: promptIds,
      max_tokens: null,
      seed: 11,
      logprobs: 0,
      return_token_ids: true,
    });
    const choice = vllm.json.choices[0];
    expect(json.response_ids).toEqual(choice.token_ids);
    expect(json.logprobs).toEqual(choice.logprobs.token_logprobs);
    expect(tokenizer.decode(json.response_ids)).toBe('Echo me, please.<|im_end|>');
    expect(json).toMatchObject({
      finish_reason: 'stop',
      prompt_ids: promptIds,
      engine_id: expect.stringMatching(/^sglang@/),
    });
  });
});
