import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';

/*
 * The gateway against recorded vLLM wire fixtures (test/fixtures/vllm, see its README), replayed by
 * a small upstream over real HTTP. The replayer can cut its bytes anywhere (fast-check picks where,
 * inside multi-byte characters included): what the gateway stores must not depend on the cuts.
 */

const FIXTURES = join(import.meta.dirname, 'fixtures', 'vllm');
const fixture = (name: string) => readFileSync(join(FIXTURES, name));
const json = (name: string) => JSON.parse(fixture(name).toString('utf8'));
const tokenizer = loadQwen3Tokenizer();

/** The `data:` payloads of an SSE fixture, parsed (the [DONE] terminator left out). */
function sseChunks(name: string): Record<string, unknown>[] {
  return fixture(name)
    .toString('utf8')
    .split('\n\n')
    .filter((block) => block.startsWith('data: ') && block !== 'data: [DONE]')
    .map((block) => JSON.parse(block.slice('data: '.length)));
}

interface Replay {
  /** Which file answers a streamed chat request with tools. */
  toolStream: string;
  /** Byte offsets where the replayer cuts its answer into separate writes. */
  cuts: number[];
  /** Bodies the gateway sent upstream. */
  received: Record<string, unknown>[];
}

const MAX_MODEL_LEN = 40_960;
const replay: Replay = { toolStream: 'chat-stream-tools.sse', cuts: [], received: [] };

async function writeInPieces(res: http.ServerResponse, bytes: Buffer): Promise<void> {
  const cuts = [...new Set(replay.cuts.filter((c) => c > 0 && c < bytes.length))].sort((a, b) => a - b);
  let at = 0;
  for (const cut of [...cuts, bytes.length]) {
    res.write(bytes.subarray(at, cut));
    at = cut;
    await new Promise((resolve) => setImmediate(resolve));
  }
  res.end();
}

const upstream = http.createServer((req, res) => {
  let body = '';
  req.on('data', (c: Buffer) => {
    body += c.toString('utf8');
  });
  req.on('end', () => {
    if (req.method === 'GET' && req.url === '/v1/models') {
      res.writeHead(200, { 'content-type': 'application/json' });
      // vLLM's model card names the context length (its --max-model-len).
      const card = { id: 'Qwen/Qwen3-8B', object: 'model', max_model_len: MAX_MODEL_LEN };
      res.end(JSON.stringify({ object: 'list', data: [card] }));
      return;
    }
    const request = JSON.parse(body) as Record<string, unknown>;
    replay.received.push(request);
    const stream = request.stream === true;
    let file: string;
    if (req.url === '/v1/chat/completions') file = stream ? replay.toolStream : 'chat-completion.json';
    else if (req.url === '/v1/completions') file = stream ? 'completions-stream.sse' : 'completions.json';
    else {
      res.writeHead(404).end();
      return;
    }
    let bytes = fixture(file);
    // The .json fixtures are pretty-printed for reading; vLLM sends compact JSON.
    if (file.endsWith('.json')) bytes = Buffer.from(JSON.stringify(JSON.parse(bytes.toString('utf8'))));
    res.writeHead(200, { 'content-type': stream ? 'text/event-stream' : 'application/json' });
    void writeInPieces(res, bytes);
  });
});

let dir: string;
let server: RunningServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-replay-'));
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
  const port = (upstream.address() as { port: number }).port;
  server = await startServer({
    dbPath: join(dir, 'replay.db'),
    port: 0,
    engines: [`vllm=http://127.0.0.1:${port}/v1`],
  });
});
afterAll(async () => {
  await server.close();
  upstream.close();
  rmSync(dir, { recursive: true, force: true });
});

async function init(): Promise<{ id: string; baseUrl: string }> {
  const res = await fetch(`${server.url}/init_trajectory`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  const body = (await res.json()) as { trajectory_uid: string; base_url: string };
  return { id: body.trajectory_uid, baseUrl: body.base_url };
}

async function stepsOf(t: { id: string; baseUrl: string }) {
  await fetch(`${new URL(t.baseUrl).origin}/v1/trajectories/${t.id}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: '{}',
  });
  return server.pool.getTrajectorySteps(t.id);
}

/** Posts a request body as an agent would and returns the raw bytes the gateway answered with. */
async function raw(t: { baseUrl: string }, path: string, body: unknown): Promise<Buffer> {
  const res = await fetch(`${t.baseUrl}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  expect(res.status).toBe(200);
  return Buffer.from(await res.arrayBuffer());
}

describe('gateway replaying recorded vLLM answers', () => {
  it('chat: asks vLLM for ids and logprobs and stores exactly the ones it returned', async () => {
    replay.cuts = [];
    const t = await init();
    const request = json('chat-completion.request.json');
    const agentRequest = {
      model: 'whatever-the-agent-calls-it',
      messages: request.messages,
      max_tokens: 128,
    };
    const answer = await new OpenAI({
      baseURL: t.baseUrl,
      apiKey: 'x',
      maxRetries: 0,
    }).chat.completions.create(agentRequest);
    const sent = replay.received.at(-1)!;
    expect(sent).toMatchObject({
      return_token_ids: true,
      logprobs: true,
      model: 'Qwen/Qwen3-8B',
      max_tokens: 128,
    });
    const recorded = json('chat-completion.json');
    expect(answer.choices[0]!.message.content).toBe(recorded.choices[0].message.content);
    const [step] = await stepsOf(t);
    expect(step!.promptIds).toEqual(recorded.prompt_token_ids);
    expect(step!.responseIds).toEqual(recorded.choices[0].token_ids);
    expect(step!.responseLogprobs).toEqual(
      recorded.choices[0].logprobs.content.map((l: { logprob: number }) => Math.fround(l.logprob)),
    );
    expect(step).toMatchObject({
      tokenSource: 'engine',
      engineId: expect.stringMatching(/^vllm@127\.0\.0\.1:/),
    });
    expect(step!.metadata).toMatchObject({
      model: 'whatever-the-agent-calls-it',
      served_model: 'Qwen/Qwen3-8B',
    });
  });

  it('streamed tool call with every id: the stream reaches the agent unchanged, ids are exact', async () => {
    replay.cuts = [];
    replay.toolStream = 'chat-stream-tools.all-token-ids.sse';
    const t = await init();
    const request = json('chat-stream-tools.request.json');
    const bytes = await raw(t, '/chat/completions', request);
    expect(bytes.toString('utf8')).toBe(fixture('chat-stream-tools.all-token-ids.sse').toString('utf8'));
    const [step] = await stepsOf(t);
    const chunks = sseChunks('chat-stream-tools.all-token-ids.sse');
    const ids = chunks.flatMap(
      (c) => ((c.choices as { token_ids?: number[] }[])[0]?.token_ids ?? []) as number[],
    );
    expect(step!.responseIds).toEqual(ids);
    expect(step!.promptIds).toEqual(chunks[0]!.prompt_token_ids);
    expect(step!.tokenSource).toBe('engine');
    expect(step!.toolCalls).toEqual([
      {
        id: expect.stringMatching(/^chatcmpl-tool-/),
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius"}' },
      },
    ]);
    expect(step!.finishReason).toBe('tool_calls');
  });

  it('streamed tool call with ids held back by vLLM: detected from usage, rebuilt and marked', async () => {
    replay.cuts = [];
    replay.toolStream = 'chat-stream-tools.sse';
    const t = await init();
    const request = json('chat-stream-tools.request.json');
    await raw(t, '/chat/completions', request);
    const [step] = await stepsOf(t);
    expect(step!.tokenSource).toBe('retokenized');
    expect(step!.metadata.ids_incomplete).toBe(true);
    expect(step!.responseLogprobs).toBeNull();
    // The rebuilt ids are the template's rendering of the same answer: the exact ones of the
    // complete recording (the same generation, every id delivered).
    const complete = sseChunks('chat-stream-tools.all-token-ids.sse');
    const exact = complete.flatMap(
      (c) => ((c.choices as { token_ids?: number[] }[])[0]?.token_ids ?? []) as number[],
    );
    expect(step!.responseIds).toEqual(exact);
    expect(step!.promptIds).toEqual(complete[0]!.prompt_token_ids);
  });

  it('an agent that did not ask for usage does not get the usage chunk the gateway asked for', async () => {
    replay.cuts = [];
    replay.toolStream = 'chat-stream-tools.all-token-ids.sse';
    const t = await init();
    const { stream_options: _, ...request } = json('chat-stream-tools.request.json');
    const text = (await raw(t, '/chat/completions', request)).toString('utf8');
    expect(replay.received.at(-1)!.stream_options).toEqual({ include_usage: true });
    expect(text).not.toContain('"usage"');
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    const [step] = await stepsOf(t);
    expect(step!.tokenSource).toBe('engine');
  });

  it('completions with prompt ids, whole and streamed, and /generate', async () => {
    replay.cuts = [];
    const recorded = json('completions.json');
    for (const stream of [false, true]) {
      const t = await init();
      const request = json(stream ? 'completions-stream.request.json' : 'completions.request.json');
      await raw(t, '/completions', request);
      const [step] = await stepsOf(t);
      expect(step!.promptIds).toEqual(request.prompt);
      expect(step!.responseText).toBe(recorded.choices[0].text);
      expect(tokenizer.decode(step!.responseIds, { skipSpecialTokens: true })).toBe(recorded.choices[0].text);
      expect(step!.responseLogprobs).toHaveLength(step!.responseIds.length);
      expect(step!.messages).toBeNull();
    }
    const res = await fetch(`${server.url}/generate`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        prompt_ids: recorded.choices[0].prompt_token_ids,
        sampling_params: { max_new_tokens: 32 },
      }),
    });
    const out = (await res.json()) as Record<string, unknown>;
    expect(res.status).toBe(200);
    expect(out).toMatchObject({
      prompt_ids: recorded.choices[0].prompt_token_ids,
      response_ids: recorded.choices[0].token_ids,
      text: recorded.choices[0].text,
    });
    expect(replay.received.at(-1)).toMatchObject({
      prompt: recorded.choices[0].prompt_token_ids,
      max_tokens: 32,
    });
  });

  it("/generate without a length (Claw-R1's flows send none) asks for the rest of the context, not vLLM's 16", async () => {
    const prompt = json('completions.json').choices[0].prompt_token_ids as number[];
    for (const sampling of [{ temperature: 1, top_p: 1, logprobs: true }, { max_tokens: null }]) {
      const res = await fetch(`${server.url}/generate`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ prompt_ids: prompt, sampling_params: sampling }),
      });
      expect(res.status).toBe(200);
      expect(replay.received.at(-1)!.max_tokens).toBe(MAX_MODEL_LEN - prompt.length);
    }
  });

  it('stores the same step however the engine’s bytes are cut (fast-check)', async () => {
    replay.toolStream = 'chat-stream-tools.all-token-ids.sse';
    const length = fixture(replay.toolStream).length;
    const request = json('chat-stream-tools.request.json');
    let reference: unknown = null;
    await fc.assert(
      fc.asyncProperty(fc.array(fc.integer({ min: 1, max: length - 1 }), { maxLength: 40 }), async (cuts) => {
        replay.cuts = cuts;
        const t = await init();
        const bytes = await raw(t, '/chat/completions', request);
        const [step] = await stepsOf(t);
        const view = {
          bytes: bytes.toString('utf8'),
          prompt: step!.promptIds,
          response: step!.responseIds,
          logprobs: step!.responseLogprobs,
          calls: step!.toolCalls,
          text: step!.responseText,
        };
        expect(view.bytes).toBe(fixture(replay.toolStream).toString('utf8'));
        reference ??= view;
        expect(view).toEqual(reference);
      }),
      { numRuns: 25 },
    );
  });
});
