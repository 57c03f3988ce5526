import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MAX_PROMPT_TOKENS } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';

/*
 * The biggest answers an engine gives: a completion echoing a MAX_PROMPT_TOKENS-id prompt
 * (`prompt_token_ids`), ~1.5 MB of JSON. The gateway parses such an answer, and writes the engine's
 * request and its own answer, off the event loop (docs/security.md); the ids still arrive exactly,
 * are stored exactly, and a bad one is still refused naming its field. A fake vLLM answers here.
 */

interface EngineTurn {
  /** The prompt ids the engine claims it saw (default: the prompt it was sent, else these). */
  promptIds?: unknown[];
  responseIds?: number[];
}

const received: Record<string, unknown>[] = [];
let next: EngineTurn = {};
const engine = http.createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    if (req.method === 'GET') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'Qwen/Qwen3-8B', object: 'model' }] }));
      return;
    }
    const request = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
    received.push(request);
    const responseIds = next.responseIds ?? [11, 12, 13];
    const promptIds = next.promptIds ?? (Array.isArray(request.prompt) ? request.prompt : [1, 2, 3]);
    const logprobs = { token_logprobs: responseIds.map((_, i) => -0.5 - i), tokens: [], top_logprobs: [] };
    const chat = req.url === '/v1/chat/completions';
    const choice = chat
      ? {
          index: 0,
          message: { role: 'assistant', content: 'ok' },
          token_ids: responseIds,
          logprobs: { content: responseIds.map((_, i) => ({ token: 'x', logprob: -0.5 - i })) },
          finish_reason: 'stop',
        }
      : { index: 0, text: 'ok', token_ids: responseIds, logprobs, finish_reason: 'stop' };
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id: 'cmpl-big',
        object: chat ? 'chat.completion' : 'text_completion',
        model: 'Qwen/Qwen3-8B',
        prompt_token_ids: promptIds,
        choices: [choice],
        usage: { prompt_tokens: promptIds.length, completion_tokens: responseIds.length },
      }),
    );
  });
});

let dir: string;
let server: RunningServer;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-generate-big-'));
  await new Promise<void>((resolve) => engine.listen(0, '127.0.0.1', resolve));
  const port = (engine.address() as { port: number }).port;
  server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: [`vllm=http://127.0.0.1:${port}`],
  });
});
afterAll(async () => {
  await server?.close();
  engine.close();
  rmSync(dir, { recursive: true, force: true });
});
beforeEach(() => {
  received.length = 0;
  next = {};
});

const ids = (n: number, offset = 0) => Array.from({ length: n }, (_, i) => (i * 7919 + offset) % 151_000);

async function post(path: string, body: unknown): Promise<{ status: number; json: Record<string, unknown> }> {
  const res = await fetch(`${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

async function init(): Promise<{ trajectory_uid: string; base_url: string }> {
  return (await post('/init_trajectory', {})).json as { trajectory_uid: string; base_url: string };
}

describe('/generate with a MAX_PROMPT_TOKENS-id prompt', () => {
  it('sends the engine exactly those ids and answers exactly the ids it echoed and generated', async () => {
    const t = await init();
    const prompt = ids(MAX_PROMPT_TOKENS);
    const { status, json } = await post('/generate', {
      trajectory_uid: t.trajectory_uid,
      prompt_ids: prompt,
      sampling_params: { max_tokens: 3, temperature: 0.5 },
    });
    expect(status).toBe(200);
    expect(received).toHaveLength(1);
    expect(received[0]).toMatchObject({
      max_tokens: 3,
      temperature: 0.5,
      return_token_ids: true,
      stream: false,
    });
    expect(received[0]!.prompt).toEqual(prompt);
    expect(json.prompt_ids).toEqual(prompt);
    expect(json).toMatchObject({
      response_ids: [11, 12, 13],
      token_ids: [11, 12, 13],
      logprobs: [-0.5, -1.5, -2.5],
      finish_reason: 'stop',
      text: 'ok',
    });
  });

  it('answers the prompt ids the engine echoed, where they differ from those sent', async () => {
    const echoed = ids(MAX_PROMPT_TOKENS, 5);
    next = { promptIds: echoed };
    const { status, json } = await post('/generate', { input_ids: ids(MAX_PROMPT_TOKENS) });
    expect(status).toBe(200);
    expect(json.prompt_ids).toEqual(echoed);
  });

  it('refuses an echo holding one id that is not a token id, naming the field and index', async () => {
    const echoed: unknown[] = ids(MAX_PROMPT_TOKENS);
    echoed[200_000] = -4;
    next = { promptIds: echoed };
    const { status, json } = await post('/generate', { prompt_ids: ids(MAX_PROMPT_TOKENS) });
    expect(status).toBe(502);
    expect(JSON.stringify(json)).toContain('prompt_token_ids.200000');
  });

  it('refuses a big body with one bad prompt id as a small one is refused, naming it', async () => {
    const prompt: unknown[] = ids(MAX_PROMPT_TOKENS);
    prompt[123_456] = 1.5;
    const { status, json } = await post('/generate', { prompt_ids: prompt });
    expect(status).toBe(400);
    expect(JSON.stringify(json)).toContain('prompt_ids.123456');
    expect(received).toHaveLength(0);
  });
});

describe('a chat call whose engine echoes a MAX_PROMPT_TOKENS-id prompt', () => {
  it('stores exactly those ids in its step, and GET /v1/trajectories/{id} returns them', async () => {
    const echoed = ids(MAX_PROMPT_TOKENS, 3);
    next = { promptIds: echoed, responseIds: [7, 8] };
    const t = await init();
    const res = await fetch(`${t.base_url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(200);
    const answer = (await res.json()) as {
      prompt_token_ids: number[];
      choices: { message: { content: string } }[];
    };
    // The agent gets the engine's answer as it came.
    expect(answer.prompt_token_ids).toEqual(echoed);
    expect(answer.choices[0]!.message.content).toBe('ok');
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step).toMatchObject({ tokenSource: 'engine', responseIds: [7, 8] });
    expect(step!.promptIds).toEqual(echoed);

    const raw = await fetch(`${server.url}/v1/trajectories/${t.trajectory_uid}`);
    expect(raw.status).toBe(200);
    expect(raw.headers.get('content-type')).toContain('application/json');
    const wire = (await raw.json()) as {
      trajectory_uid: string;
      steps: { prompt_ids: number[]; response_ids: number[] }[];
    };
    expect(wire.trajectory_uid).toBe(t.trajectory_uid);
    expect(wire.steps).toHaveLength(1);
    expect(wire.steps[0]!.prompt_ids).toEqual(echoed);
    expect(wire.steps[0]!.response_ids).toEqual([7, 8]);
  });

  it('refuses (502) an echo holding an id that is not a token id, naming it, and stores no step', async () => {
    const echoed: unknown[] = ids(MAX_PROMPT_TOKENS);
    echoed[99_999] = 'x';
    next = { promptIds: echoed };
    const t = await init();
    const res = await fetch(`${t.base_url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    });
    expect(res.status).toBe(502);
    expect(await res.text()).toContain('prompt_token_ids.99999');
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });
});
