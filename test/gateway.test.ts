import http from 'node:http';
import OpenAI from 'openai';
import { describe, expect, it, onTestFinished, vi } from 'vitest';
import { HINT_HEADING } from '../packages/core/src/curation/actguide/index.js';
import type { Step } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer, renderChat } from '../packages/core/src/text/index.js';
import { testServers } from './support/test-servers.js';

/*
 * The gateway end to end: the official openai client as the agent, real HTTP on loopback, a real
 * SQLite file, and the built-in sim (or small stand-in upstreams for failure cases) as the engine.
 * What the client received is compared with what the store holds.
 */

const tokenizer = loadQwen3Tokenizer();
const IM_END = tokenizer.tokenId('<|im_end|>')!;

interface Init {
  trajectory_uid: string;
  group_id: string;
  channel: string;
  base_url: string;
}

const { serve } = testServers('gateway', { engines: ['sim'] });

/** A gateway over an engine that answers every request 200 with `body` (for answers the sim never gives). */
async function serveOver(contentType: string, body: string): Promise<RunningServer> {
  const engine = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': contentType });
    res.end(body);
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  onTestFinished(() => void engine.close());
  return serve({ engines: [`vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`] });
}

/**
 * An engine that asks for `read_file` on its first call, answers a call carrying a tool result
 * after `toolAnswerMs` ("it says hello") and any other call at once ("side answer").
 */
async function toolEngine(toolAnswerMs: number): Promise<string> {
  let calls = 0;
  const engine = http.createServer((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(404).end();
    let text = '';
    req.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    req.on('end', () => {
      const n = calls++;
      const answersTool = text.includes('"role":"tool"');
      const message =
        n === 0
          ? {
              role: 'assistant',
              content: null,
              tool_calls: [
                {
                  id: 'call_1',
                  type: 'function',
                  function: { name: 'read_file', arguments: '{"path":"a.txt"}' },
                },
              ],
            }
          : { role: 'assistant', content: answersTool ? 'it says hello' : 'side answer' };
      const body = JSON.stringify({
        id: `c${n}`,
        object: 'chat.completion',
        model: 'm',
        prompt_token_ids: [1, 2, 3],
        choices: [{ index: 0, message, token_ids: [10 + n], finish_reason: n === 0 ? 'tool_calls' : 'stop' }],
      });
      setTimeout(
        () => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(body);
        },
        answersTool ? toolAnswerMs : 0,
      );
    });
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  onTestFinished(() => void engine.close());
  return `vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`;
}

/** One streamed answer as an engine sends it: "hi", finish_reason stop, with its token ids. */
const HI_CHUNK = JSON.stringify({
  id: 'c',
  object: 'chat.completion.chunk',
  model: 'm',
  prompt_token_ids: [1, 2],
  choices: [{ index: 0, delta: { role: 'assistant', content: 'hi' }, token_ids: [7], finish_reason: 'stop' }],
});

/**
 * A gateway over an engine that writes `head` to each streamed call and keeps its body open until
 * `end(tail)` (for an engine whose [DONE], or the end of its body, comes late).
 */
async function serveHeldStream(head: string) {
  const held = new Set<http.ServerResponse>();
  const end = (tail = '') => {
    for (const res of held) res.end(tail);
    held.clear();
  };
  const engine = http.createServer((req, res) => {
    if (req.method !== 'POST') return void res.writeHead(404).end();
    res.writeHead(200, { 'content-type': 'text/event-stream' });
    res.write(head);
    held.add(res);
  });
  await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
  onTestFinished(() => {
    end();
    engine.closeAllConnections();
    engine.close();
  });
  const server = await serve({
    engines: [`vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`],
  });
  /** One streamed chat call on a trajectory. */
  const stream = (t: Init) =>
    fetch(`${t.base_url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
  return { server, held, end, stream };
}

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function init(server: RunningServer, body: Record<string, unknown> = {}): Promise<Init> {
  const { status, json } = await post(`${server.url}/init_trajectory`, body);
  expect(status).toBe(200);
  return json as Init;
}

/** Completes as the episode's owner (the id route), as a runner does. */
async function complete(t: Init, reward: number | null = 1) {
  return post(`${new URL(t.base_url).origin}/v1/trajectories/${t.trajectory_uid}/complete`, { reward });
}

const client = (t: Init) => new OpenAI({ baseURL: t.base_url, apiKey: 'unused', maxRetries: 0 });

/** The fields vLLM (and the sim) add to a completion when asked for ids. */
type WithIds = { prompt_token_ids: number[]; choices: { token_ids: number[] }[] };

const tools = [
  {
    type: 'function' as const,
    function: {
      name: 'read_file',
      description: 'Read a file',
      parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
    },
  },
];

describe('gateway: black-box protocol with the openai client', () => {
  it('mints unguessable trajectories whose base_url names the trajectory and its group', async () => {
    const server = await serve();
    const a = await init(server, {
      group_id: 'prompt-7',
      channel: 'train',
      metadata: { task: 'x' },
      n_rollouts: 2,
    });
    const b = await init(server, { group_id: 'prompt-7' });
    expect(a.trajectory_uid).toMatch(/^[0-9a-f]{32}$/);
    expect(a.trajectory_uid).not.toBe(b.trajectory_uid);
    expect(a.base_url).toBe(`${server.url}/${a.trajectory_uid}/prompt-7/v1`);
    const stored = await server.pool.getTrajectory(a.trajectory_uid);
    expect(stored).toMatchObject({
      groupId: 'prompt-7',
      channel: 'train',
      metadata: { task: 'x' },
      status: 'open',
    });
    const models = await client(a).models.list();
    expect(models.data.map((m) => m.id)).toEqual(['sim-qwen3']);
  });

  it('non-streaming: the stored step holds exactly the ids and logprobs the engine returned', async () => {
    const server = await serve();
    const t = await init(server);
    const messages = [
      { role: 'system' as const, content: 'You are terse.' },
      { role: 'user' as const, content: 'Say hello to the Stepwise gateway, please.' },
    ];
    const answer = await client(t).chat.completions.create({
      model: 'my-policy',
      messages,
      seed: 3,
      max_tokens: 64,
    });
    expect((await complete(t)).status).toBe(200);
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    const raw = answer as unknown as WithIds;
    expect(step!.promptIds).toEqual(raw.prompt_token_ids);
    expect(step!.responseIds).toEqual(raw.choices[0]!.token_ids);
    // Logprobs are stored as float32 (the pool's documented precision).
    expect(step!.responseLogprobs).toEqual(
      answer.choices[0]!.logprobs!.content!.map((l) => Math.fround(l.logprob)),
    );
    expect(step!.responseText).toBe(answer.choices[0]!.message.content);
    // The ids are the engine's: the prompt is the rendered conversation, the response its text + EOS.
    expect(tokenizer.decode(step!.promptIds)).toBe(renderChat({ messages, addGenerationPrompt: true }));
    expect(step!.responseIds.at(-1)).toBe(IM_END);
    expect(tokenizer.decode(step!.responseIds.slice(0, -1))).toBe(answer.choices[0]!.message.content);
    expect(step).toMatchObject({
      tokenSource: 'engine',
      engineId: 'sim',
      finishReason: 'stop',
      policyVersion: 0,
      messages,
      metadata: { model: 'my-policy', seed: 3, max_tokens: 64, served_model: 'sim-qwen3' },
    });
    expect(step!.latencyMs).toBeGreaterThan(0);
  });

  it('streaming: chunks arrive as SSE, and the step equals the concatenated stream', async () => {
    // 20 ms a token: the sim schedules tokens by the clock, so a loaded machine that stalls its event
    // loop for a few ms still paces the stream over well more than the 5 ms asserted below.
    const server = await serve({ sim: { ttftMs: 20, tokensPerSecond: 50 } });
    const t = await init(server);
    const stream = await client(t).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'stream a few words about the weather in Lisbon' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let prompt: number[] = [];
    const ids: number[] = [];
    const arrivals: number[] = [];
    let usage: { completion_tokens: number } | null = null;
    for await (const chunk of stream) {
      arrivals.push(performance.now());
      const c = chunk as unknown as { prompt_token_ids?: number[]; choices: { token_ids?: number[] }[] };
      if (c.prompt_token_ids) prompt = c.prompt_token_ids;
      ids.push(...(c.choices[0]?.token_ids ?? []));
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    await complete(t);
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(text.length).toBeGreaterThan(0);
    expect(step!.responseText).toBe(text);
    expect(step!.promptIds).toEqual(prompt);
    expect(step!.responseIds).toEqual(ids);
    expect(step!.responseLogprobs).toHaveLength(ids.length);
    expect(usage!.completion_tokens).toBe(ids.length);
    // The first token came after the sim's 20 ms ttft, and well before the end of the stream.
    expect(step!.ttftMs).toBeGreaterThanOrEqual(19);
    expect(step!.latencyMs! - step!.ttftMs!).toBeGreaterThan(5);
    // Forwarded as they came: paced at 50 tokens/s, the chunks did not arrive all at once.
    expect(arrivals.at(-1)! - arrivals[1]!).toBeGreaterThan(5);
  });

  it('a multi-turn tool loop: tool calls captured, tool results attached to the step they answer', async () => {
    const script = [
      { toolCall: { name: 'read_file', arguments: { path: 'missing.txt' } } },
      { toolCall: { name: 'read_file', arguments: { path: 'notes.txt' } } },
      { answer: 'The notes say: ship it.' },
    ];
    const server = await serve({ sim: { policy: 'scripted', script } });
    const t = await init(server);
    const openai = client(t);
    const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
      { role: 'user', content: 'What do my notes say?' },
    ];
    const files: Record<string, string> = { 'notes.txt': 'ship it' };
    const streamed: boolean[] = [false, true, false];
    for (let turn = 0; turn < 3; turn++) {
      let message: OpenAI.Chat.ChatCompletionMessage;
      if (streamed[turn]) {
        const stream = await openai.chat.completions.create({ model: 'm', messages, tools, stream: true });
        const calls: OpenAI.Chat.ChatCompletionMessageToolCall[] = [];
        let content = '';
        for await (const chunk of stream) {
          const delta = chunk.choices[0]?.delta;
          content += delta?.content ?? '';
          for (const c of delta?.tool_calls ?? []) {
            calls[c.index] ??= { id: '', type: 'function', function: { name: '', arguments: '' } };
            const call = calls[c.index] as OpenAI.Chat.ChatCompletionMessageFunctionToolCall;
            if (c.id) call.id = c.id;
            call.function.name += c.function?.name ?? '';
            call.function.arguments += c.function?.arguments ?? '';
          }
        }
        message = { role: 'assistant', content: content || null, tool_calls: calls, refusal: null };
      } else {
        message = (await openai.chat.completions.create({ model: 'm', messages, tools })).choices[0]!.message;
      }
      messages.push(message);
      for (const call of message.tool_calls ?? []) {
        const path = JSON.parse(
          (call as OpenAI.Chat.ChatCompletionMessageFunctionToolCall).function.arguments,
        ).path;
        const content = files[path] ?? `Error: ENOENT: no such file or directory, open '${path}'`;
        messages.push({ role: 'tool', tool_call_id: call.id, content });
      }
    }
    await complete(t, 1);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps).toHaveLength(3);
    const callOf = (s: Step) =>
      s.toolCalls?.[0] as { id: string; function: { name: string; arguments: string } };
    expect(callOf(steps[0]!).function.name).toBe('read_file');
    expect(JSON.parse(callOf(steps[1]!).function.arguments)).toEqual({ path: 'notes.txt' });
    expect(steps[0]!.toolResults).toEqual([
      expect.objectContaining({
        tool_call_id: callOf(steps[0]!).id,
        name: 'read_file',
        error: true,
        error_type: 'not_found',
      }),
    ]);
    expect(steps[1]!.toolResults).toEqual([
      { tool_call_id: callOf(steps[1]!).id, name: 'read_file', content: 'ship it', error: false },
    ]);
    expect(steps[2]!.toolResults).toBeNull();
    expect(steps[2]!.responseText).toBe('The notes say: ship it.');
    expect(steps.map((s) => s.finishReason)).toEqual(['tool_calls', 'tool_calls', 'stop']);
    // Each prompt extends the previous step's prompt + response: history costs nothing.
    const trajectory = await server.pool.getTrajectory(t.trajectory_uid);
    expect(trajectory).toMatchObject({ status: 'complete', reward: 1, nSteps: 3, prefixBreaks: 0 });
    for (let i = 1; i < 3; i++) {
      const before = steps[i - 1]!.promptIds.concat(steps[i - 1]!.responseIds);
      expect(steps[i]!.promptIds.slice(0, before.length)).toEqual(before);
    }
  });

  it('tool results reach the step they answer when another call of the trajectory ends first', async () => {
    // The side call's step is captured before the answer's (the engine holds the answer 300 ms).
    const engine = await toolEngine(300);
    const server = await serve({ engines: [engine] });
    const t = await init(server);
    const openai = client(t);
    const user = { role: 'user' as const, content: 'What does a.txt say?' };
    const first = (await openai.chat.completions.create({ model: 'm', messages: [user], tools })).choices[0]!;
    expect(first.message.tool_calls?.[0]?.id).toBe('call_1');
    const answer = openai.chat.completions.create({
      model: 'm',
      messages: [user, first.message, { role: 'tool', tool_call_id: 'call_1', content: 'hello' }],
      tools,
    });
    const side = openai.chat.completions.create({
      model: 'm',
      messages: [user, { role: 'user', content: 'And meanwhile?' }],
    });
    expect((await side).choices[0]!.message.content).toBe('side answer');
    expect((await answer).choices[0]!.message.content).toBe('it says hello');
    await complete(t);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.responseText)).toEqual(['', 'side answer', 'it says hello']);
    expect(steps[0]!.toolResults).toEqual([
      { tool_call_id: 'call_1', name: 'read_file', content: 'hello', error: false },
    ]);
    expect(steps[1]!.toolResults).toBeNull();
  });

  it.each([['once']])(
    'a call that fails before it reaches the engine leaves its tool results to its retry (%s)',
    async () => {
      const server = await serve({ engines: [await toolEngine(0)] });
      const t = await init(server);
      const openai = client(t);
      const user = { role: 'user' as const, content: 'What does a.txt say?' };
      const first = (await openai.chat.completions.create({ model: 'm', messages: [user], tools }))
        .choices[0]!;
      const withResult = {
        model: 'm',
        messages: [user, first.message, { role: 'tool' as const, tool_call_id: 'call_1', content: 'hello' }],
        tools,
      };
      // The store cannot say the policy version once: the call fails before any engine sees it.
      vi.spyOn(server.pool, 'policyVersion').mockRejectedValueOnce(new Error('the store is gone'));
      await expect(openai.chat.completions.create(withResult)).rejects.toMatchObject({ status: 500 });
      const retry = (await openai.chat.completions.create(withResult)).choices[0]!;
      expect(retry.message.content).toBe('it says hello');
      await complete(t);
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps.map((s) => s.responseText)).toEqual(['', 'it says hello']);
      expect(steps[0]!.toolResults).toEqual([
        { tool_call_id: 'call_1', name: 'read_file', content: 'hello', error: false },
      ]);
    },
  );

  it('takes the trajectory from a header or the model name when the base_url is fixed', async () => {
    const server = await serve();
    const a = await init(server);
    const b = await init(server);
    const fixed = new OpenAI({
      baseURL: `${server.url}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      defaultHeaders: { 'X-Stepwise-Trajectory': a.trajectory_uid },
    });
    await fixed.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'via header' }] });
    const plain = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    await plain.chat.completions.create({
      model: `${b.trajectory_uid}__qwen3`,
      messages: [{ role: 'user', content: 'via model' }],
    });
    await expect(
      plain.chat.completions.create({ model: 'qwen3', messages: [{ role: 'user', content: 'nobody' }] }),
    ).rejects.toMatchObject({ status: 400, code: 'missing_trajectory' });
    await complete(a);
    await complete(b);
    const [sa] = await server.pool.getTrajectorySteps(a.trajectory_uid);
    const [sb] = await server.pool.getTrajectorySteps(b.trajectory_uid);
    expect(sa!.responseText).toBe('via header');
    expect(sb!.responseText).toBe('via model');
    expect(sb!.metadata.model).toBe('qwen3');
  });

  it('stores each step before its answer reaches the agent, whole or streamed', async () => {
    const server = await serve();
    const t = await init(server);
    const stored = async () => (await server.pool.getTrajectorySteps(t.trajectory_uid)).map((s) => s.index);
    const messages = [{ role: 'user' as const, content: 'first' }];
    await client(t).chat.completions.create({ model: 'm', messages });
    expect(await stored()).toEqual([0]);
    const stream = await client(t).chat.completions.create({ model: 'm', messages, stream: true });
    let finished = false;
    for await (const chunk of stream) {
      // The chunk that finishes the answer comes only once its step is stored.
      if (chunk.choices[0]?.finish_reason) {
        finished = true;
        expect(await stored()).toEqual([0, 1]);
      }
    }
    expect(finished).toBe(true);
    const text = await post(`${t.base_url}/completions`, { model: 'm', prompt: 'third', max_tokens: 4 });
    expect(text.status).toBe(200);
    expect(await stored()).toEqual([0, 1, 2]);
  });

  it('answers an error, never the answer, when its step cannot be stored; the retry is stored with its tool results', async () => {
    const server = await serve({ engines: [await toolEngine(0)] });
    const t = await init(server);
    const openai = client(t);
    const user = { role: 'user' as const, content: 'What does a.txt say?' };
    const first = (await openai.chat.completions.create({ model: 'm', messages: [user], tools })).choices[0]!;
    const withResult = {
      model: 'm',
      messages: [user, first.message, { role: 'tool' as const, tool_call_id: 'call_1', content: 'hello' }],
      tools,
    };
    const submit = server.pool.submitSteps.bind(server.pool);
    const failing = vi
      .spyOn(server.pool, 'submitSteps')
      .mockImplementation(async (steps, options) =>
        steps.length > 0 ? Promise.reject(new Error('disk I/O error')) : submit(steps, options),
      );
    await expect(openai.chat.completions.create(withResult)).rejects.toMatchObject({
      status: 503,
      code: 'capture_failed',
    });
    failing.mockRestore();
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toHaveLength(1);
    const retry = (await openai.chat.completions.create(withResult)).choices[0]!;
    expect(retry.message.content).toBe('it says hello');
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => s.responseText)).toEqual(['', 'it says hello']);
    expect(steps[0]!.toolResults).toEqual([
      { tool_call_id: 'call_1', name: 'read_file', content: 'hello', error: false },
    ]);
    const events = await server.pool.events({ after: 0, limit: 100, types: ['call_failed'] });
    expect(events.map((e) => e.data.kind)).toEqual(['capture_failed']);
    expect((await server.pool.stats('train')).failedCalls.captureFailed).toBe(1);
  });

  it('ends a stream with an error event, not its finish and [DONE], when its step cannot be stored', async () => {
    const server = await serve();
    const t = await init(server);
    const submit = server.pool.submitSteps.bind(server.pool);
    const failing = vi
      .spyOn(server.pool, 'submitSteps')
      .mockImplementation(async (steps, options) =>
        steps.length > 0 ? Promise.reject(new Error('disk I/O error')) : submit(steps, options),
      );
    const messages = [{ role: 'user' as const, content: 'hello there' }];
    const stream = await client(t).chat.completions.create({ model: 'm', messages, stream: true });
    const finishes: string[] = [];
    await expect(async () => {
      for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) finishes.push('seen');
    }).rejects.toThrow(/could not be stored \(disk I\/O error\)/);
    expect(finishes).toEqual([]);
    failing.mockRestore();
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    await client(t).chat.completions.create({ model: 'm', messages });
    expect((await server.pool.getTrajectorySteps(t.trajectory_uid)).map((s) => s.index)).toEqual([0]);
  });

  it('register_trajectory merges metadata; complete_trajectory sets the reward and closes the session (where the channel trusts agents)', async () => {
    const server = await serve();
    await server.pool.configureChannel('train', { trust_agent_reward: true });
    const t = await init(server, { metadata: { a: 1 } });
    const reg = await post(`${t.base_url}/register_trajectory`, { metadata: { task_id: 'T-1' } });
    expect(reg.json.metadata).toEqual({ a: 1, task_id: 'T-1' });
    const bad = await post(`${t.base_url}/register_trajectory`, { channel: 'other' });
    expect(bad.status).toBe(400);
    expect(bad.json.error.param).toBe('channel');
    await client(t).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'one' }] });
    const done = await post(`${t.base_url}/complete_trajectory`, { reward: 0.5 });
    expect(done.json).toMatchObject({ status: 'complete', reward: 0.5, n_steps: 1 });
    await expect(
      client(t).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'two' }] }),
    ).rejects.toMatchObject({ status: 409 });
  });
});

describe('gateway: guided trajectories (ActGuide-RL)', () => {
  it('a guided trajectory stores each step with a second prompt: the same chat without the hint', async () => {
    const server = await serve();
    const hint = '1. read_file: {"path": "a.txt"}';
    const t = await init(server, {
      group_id: 'g-guided',
      guided: true,
      guidance_k: 1,
      guidance_hint: hint,
      metadata: { guidance: { strategy: 'fixed_k' } },
    });
    const section = `\n${HINT_HEADING}\n${hint}`;
    const task = 'Read a.txt and say what it holds.';
    const answer = await client(t).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: `${task}${section}` }],
      seed: 5,
      max_tokens: 32,
    });
    expect((await complete(t)).status).toBe(200);
    const stored = await server.pool.getTrajectory(t.trajectory_uid);
    expect(stored).toMatchObject({
      guided: true,
      probe: false,
      guidanceK: 1,
      metadata: { guidance: { strategy: 'fixed_k', hint } },
    });
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.promptIds).toEqual((answer as unknown as WithIds).prompt_token_ids);
    expect(tokenizer.decode(step!.trainingPromptIds!)).toBe(
      renderChat({ messages: [{ role: 'user', content: task }], addGenerationPrompt: true }),
    );

    // An unguided trajectory, and a probe, store no second prompt.
    for (const body of [{}, { probe: true, guidance_k: 0, guidance_hint: 'None' }]) {
      const u = await init(server, body);
      await client(u).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: `${task}${section}` }],
        max_tokens: 8,
      });
      await complete(u);
      const [s] = await server.pool.getTrajectorySteps(u.trajectory_uid);
      expect(s!.trainingPromptIds).toBeNull();
    }
  });

  it("assistant_prefix: the engine continues the paper's prefix in the same turn; later calls carry it in the first reply; the training prompt is without it", async () => {
    const server = await serve();
    const hint = '1. read_file: {"path": "a.txt"}';
    const t = await init(server, {
      group_id: 'g-prefix',
      guided: true,
      guidance_k: 1,
      guidance_hint: hint,
      guidance_mode: 'assistant_prefix',
    });
    const task = 'Read a.txt and say what it holds.';
    // The agent sends its task alone: it never sees the hint.
    const first = await client(t).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: task }],
      seed: 5,
      max_tokens: 16,
    });
    const reply = first.choices[0]!.message;
    // Written out from the paper's ASSISTANT_PREFIX_TEMPLATE.
    const prefix = `I have a partial action plan trajectory hint:\n${hint}\n\nI will solve the task by following this hint when useful.\n`;
    expect(reply.content ?? '').not.toContain('partial action plan');
    const history = [
      { role: 'user' as const, content: task },
      reply,
      { role: 'user' as const, content: 'Go on.' },
    ];
    await client(t).chat.completions.create({
      model: 'm',
      messages: history as never,
      seed: 6,
      max_tokens: 8,
    });
    expect((await complete(t)).status).toBe(200);
    const [step, next] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.messages).toEqual([
      { role: 'user', content: task },
      { role: 'assistant', content: prefix },
    ]);
    expect(step!.metadata).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
    // What the paper's code renders (apply_chat_template with continue_final_message=True, Qwen3's
    // template): the prefix is the open assistant turn, no <|im_end|> and no second assistant header.
    expect(tokenizer.decode(step!.promptIds)).toBe(
      `<|im_start|>user\n${task}<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n${prefix}`,
    );
    expect(tokenizer.decode(step!.trainingPromptIds!)).toBe(
      `<|im_start|>user\n${task}<|im_end|>\n<|im_start|>assistant\n`,
    );
    // Later: the prefix and the first reply are one assistant turn, as the paper's token stream has them.
    const replyText = reply.content ?? '';
    expect(next!.messages![1]).toMatchObject({ role: 'assistant', content: `${prefix}${replyText}` });
    expect(next!.messages).toHaveLength(3);
    expect(next!.metadata.continue_final_message).toBeUndefined();
    expect(tokenizer.decode(next!.promptIds)).toBe(
      `<|im_start|>user\n${task}<|im_end|>\n<|im_start|>assistant\n${prefix}${replyText}<|im_end|>\n` +
        '<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(tokenizer.decode(next!.trainingPromptIds!)).toBe(
      `<|im_start|>user\n${task}<|im_end|>\n<|im_start|>assistant\n${replyText}<|im_end|>\n` +
        '<|im_start|>user\nGo on.<|im_end|>\n<|im_start|>assistant\n',
    );
    expect((await server.pool.getTrajectory(t.trajectory_uid))!.metadata).toMatchObject({
      guidance: { hint, mode: 'assistant_prefix' },
    });
  });

  it('refuses guidance fields that contradict each other, naming the field, and creates nothing', async () => {
    const server = await serve();
    const bad = [
      [{ guided: true, probe: true }, 'probe'],
      [{ guidance_k: 2 }, 'guidance_k'],
      [{ guidance_hint: 'x' }, 'guidance_hint'],
      [{ guided: true, guidance_k: -1 }, 'guidance_k'],
    ] as const;
    for (const [body, field] of bad) {
      const { status, json } = await post(`${server.url}/init_trajectory`, body);
      expect(status).toBe(400);
      expect(JSON.stringify(json)).toContain(field);
    }
    expect((await server.pool.listTrajectories({ limit: 10, offset: 0 })).items).toEqual([]);
  });
});

describe('gateway: bad input and failing engines', () => {
  it('answers malformed, unknown and refused requests with OpenAI-style errors and stores nothing', async () => {
    const server = await serve({ maxBodyBytes: 64 * 1024 });
    const t = await init(server);
    const url = `${t.base_url}/chat/completions`;
    const malformed = await post(url, '{"messages": [');
    expect(malformed.status).toBe(400);
    expect(malformed.json.error).toMatchObject({ type: 'invalid_request_error', param: 'body' });
    const noMessages = await post(url, { model: 'm', messages: [] });
    expect(noMessages.json.error.param).toBe('messages');
    const nTwo = await post(url, { model: 'm', n: 2, messages: [{ role: 'user', content: 'x' }] });
    expect(nTwo.status).toBe(400);
    expect(nTwo.json.error.param).toBe('n');
    const huge = await post(url, { model: 'm', messages: [{ role: 'user', content: 'x'.repeat(100_000) }] });
    expect(huge.status).toBe(413);
    const unknown = await post(`${server.url}/${'0'.repeat(32)}/g/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(unknown.status).toBe(404);
    expect(unknown.json.error.type).toBe('not_found_error');
    const wrongGroup = await post(`${server.url}/${t.trajectory_uid}/other-group/v1/chat/completions`, {
      messages: [{ role: 'user', content: 'x' }],
    });
    expect(wrongGroup.status).toBe(404);
    const reward = await post(`${server.url}/compute_reward`, { trajectory_uid: t.trajectory_uid });
    expect(reward.status).toBe(501);
    expect(reward.json.error.message).toMatch(/no reward function/);
    // Nothing was stored, and the server still serves.
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    await client(t).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'still here' }],
    });
    await complete(t);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toHaveLength(1);
  });

  it('reports an engine that is down, hangs, stalls mid-answer or answers garbage, records it, and keeps serving', async () => {
    const hanging = http.createServer(() => {}); // accepts and never answers
    const garbage = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end('<html>definitely not a completion</html>');
    });
    const stalling = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.write('{"id": "chatcmpl-1", '); // and then nothing
    });
    const stallingError = http.createServer((_req, res) => {
      res.writeHead(500, { 'content-type': 'application/json' });
      res.write('{"error": '); // an error answer that never ends
    });
    await new Promise<void>((r) => hanging.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => garbage.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => stalling.listen(0, '127.0.0.1', r));
    await new Promise<void>((r) => stallingError.listen(0, '127.0.0.1', r));
    try {
      const port = (s: http.Server) => (s.address() as { port: number }).port;
      const cases = [
        { engine: 'vllm=http://127.0.0.1:9', status: 503, pattern: /unreachable/ },
        {
          engine: `vllm=http://127.0.0.1:${port(hanging)}`,
          status: 504,
          pattern: /no response headers within 300 ms/,
        },
        { engine: `vllm=http://127.0.0.1:${port(garbage)}`, status: 502, pattern: /not a completion/ },
        {
          engine: `vllm=http://127.0.0.1:${port(stalling)}`,
          status: 504,
          pattern: /sent nothing for 300 ms in the middle of an answer/,
        },
        {
          engine: `vllm=http://127.0.0.1:${port(stallingError)}`,
          status: 504,
          pattern: /sent nothing for 300 ms in the middle of an answer/,
        },
      ];
      for (const c of cases) {
        const server = await serve({ engines: [c.engine], upstreamTimeoutMs: 300 });
        const t = await init(server);
        const err = await client(t)
          .chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] })
          .catch((e: unknown) => e as { status: number; message: string });
        expect(err).toMatchObject({ status: c.status });
        expect((err as { message: string }).message).toMatch(c.pattern);
        // Recorded as a failed call, no step stored, the server answers the next request.
        await expect.poll(async () => (await server.pool.stats()).failedCalls.upstreamError).toBe(1);
        expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
        expect((await post(`${server.url}/init_trajectory`, {})).status).toBe(200);
      }
    } finally {
      hanging.closeAllConnections();
      hanging.close();
      garbage.close();
      stalling.closeAllConnections();
      stalling.close();
      stallingError.closeAllConnections();
      stallingError.close();
    }
  });

  it('forwards a stream whose engine sent an event that is not JSON, and records the call as failed, not as a step', async () => {
    const chunk = (delta: object, extra: object = {}) =>
      JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        model: 'm',
        choices: [{ index: 0, delta, token_ids: [11], logprobs: null, finish_reason: null }],
        ...extra,
      });
    const events = [
      chunk({ role: 'assistant', content: 'Hel' }, { prompt_token_ids: [1, 2] }),
      '{oops',
      chunk({ content: 'lo' }),
    ];
    const server = await serveOver(
      'text/event-stream',
      `${events.map((e) => `data: ${e}\n\n`).join('')}data: [DONE]\n\n`,
    );
    const t = await init(server);
    const res = await fetch(`${t.base_url}/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true }),
    });
    const text = await res.text();
    // The agent got what the engine sent, in order, then an error where its [DONE] would be.
    const sent = events.map((e) => `data: ${e}\n\n`).join('');
    expect(text.startsWith(sent)).toBe(true);
    expect(JSON.parse(text.slice(sent.length).replace(/^data: /, '')).error).toMatchObject({
      message: expect.stringMatching(/not JSON/),
    });
    await expect.poll(async () => (await server.pool.stats()).failedCalls.upstreamError).toBe(1);
    const [failure] = await server.pool.events({ after: 0, limit: 10, types: ['call_failed'] });
    expect(failure!.data).toMatchObject({
      kind: 'upstream_error',
      message: expect.stringMatching(/not JSON/),
    });
    await complete(t);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it("ends the agent's answer at [DONE] while the engine still holds its body open; that answer is a step even when the agent completes or leaves at once", async () => {
    // The engine sends everything, then keeps its body open until the test ends.
    const { server, held, stream } = await serveHeldStream(`data: ${HI_CHUNK}\n\ndata: [DONE]\n\n`);
    // The whole answer arrives, its body ended, while the engine's body is still open.
    const a = await init(server);
    const text = await (await stream(a)).text();
    expect(text.endsWith('data: [DONE]\n\n')).toBe(true);
    expect(held.size).toBe(1);
    // Completes at once: the completion waits for the step.
    const done = await complete(a);
    expect(done.json).toMatchObject({ status: 'complete', n_steps: 1 });
    // Leaves at once: still a step, not an aborted call.
    const b = await init(server);
    const res = await stream(b);
    await res.body!.cancel();
    await complete(b);
    expect((await server.pool.getTrajectorySteps(b.trajectory_uid)).map((s) => s.responseText)).toEqual([
      'hi',
    ]);
    expect((await server.pool.stats()).failedCalls.aborted).toBe(0);
    // Shutting down does not wait for engine bodies still open after their [DONE].
    expect(held.size).toBe(2);
    await server.close();
  });

  it("holds the chunk that finishes a streamed answer until the engine's [DONE] and the step's commit; completing meanwhile waits for the call", async () => {
    // The engine sends the answer with its finish_reason, then [DONE] only when the test says so.
    const { server, end, stream } = await serveHeldStream(`data: ${HI_CHUNK}\n\n`);
    const t = await init(server);
    const res = await stream(t);
    const reader = res.body!.getReader();
    // Nothing that finishes the answer reaches the agent before its step can be stored.
    const firstRead = reader.read();
    const early = await Promise.race([firstRead, new Promise((r) => setTimeout(() => r('nothing'), 200))]);
    expect(early).toBe('nothing');
    const completing = complete(t);
    await new Promise((r) => setTimeout(r, 100));
    end('data: [DONE]\n\n');
    let text = new TextDecoder().decode((await firstRead).value);
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    expect(text).toBe(`data: ${HI_CHUNK}\n\ndata: [DONE]\n\n`);
    expect((await completing).json).toMatchObject({ status: 'complete', n_steps: 1 });
    expect((await server.pool.getTrajectorySteps(t.trajectory_uid)).map((s) => s.responseText)).toEqual([
      'hi',
    ]);
  });

  it('answers 502 to an answer that names choices but holds none, and records the call as failed, not as a step', async () => {
    const broken = '{"id":"x","object":"chat.completion","choices":[]}';
    const server = await serveOver('application/json', broken);
    const t = await init(server);
    const res = await post(`${t.base_url}/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    });
    // No generation, so no step: the agent gets an error, never a 200 without its step.
    expect(res.status).toBe(502);
    expect(res.json.error.code).toBe('bad_upstream_answer');
    await expect.poll(async () => (await server.pool.stats()).failedCalls.upstreamError).toBe(1);
    await complete(t);
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it('answers 502 naming the field to an answer whose ids are not token ids, whole or streamed, and stores no step', async () => {
    const whole = JSON.stringify({
      id: 'x',
      object: 'chat.completion',
      model: 'm',
      prompt_token_ids: [1, 2],
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'hi' },
          token_ids: [7, 'x'],
          finish_reason: 'stop',
        },
      ],
    });
    const server = await serveOver('application/json', whole);
    const t = await init(server);
    const res = await post(`${t.base_url}/chat/completions`, {
      model: 'm',
      messages: [{ role: 'user', content: 'hi' }],
    });
    expect(res.status).toBe(502);
    expect(res.json.error.message).toMatch(/malformed answer: choices\.0\.token_ids\.1: /);
    const streamed = HI_CHUNK.replace('"token_ids":[7]', '"token_ids":[-7]');
    const { server: held, end, stream } = await serveHeldStream(`data: ${streamed}\n\ndata: [DONE]\n\n`);
    const u = await init(held);
    const text = await (await stream(u)).text();
    end();
    expect(text).toMatch(/"message":"[^"]*malformed answer: choices\.0\.token_ids\.0: /);
    expect(text).not.toMatch(/\[DONE\]/);
    for (const [s, traj] of [
      [server, t],
      [held, u],
    ] as const) {
      await expect.poll(async () => (await s.pool.stats()).failedCalls.upstreamError).toBe(1);
      await complete(traj);
      expect(await s.pool.getTrajectorySteps(traj.trajectory_uid)).toEqual([]);
    }
  });

  it('an agent that disconnects mid-stream cancels the generation; the call is recorded as aborted', async () => {
    const server = await serve({ sim: { ttftMs: 10, tokensPerSecond: 50 } });
    const t = await init(server);
    const abort = new AbortController();
    const stream = await client(t).chat.completions.create(
      {
        model: 'm',
        messages: [{ role: 'user', content: 'a long answer with many many words to stream slowly here' }],
        stream: true,
      },
      { signal: abort.signal },
    );
    let chunks = 0;
    // The SDK ends the iteration quietly when its signal aborts.
    for await (const _ of stream) {
      if (++chunks === 3) abort.abort();
    }
    expect(chunks).toBeLessThan(6);
    await expect.poll(async () => (await server.pool.stats()).failedCalls.aborted).toBe(1);
    const [event] = await server.pool.events({ after: 0, limit: 10, types: ['call_failed'] });
    expect(event!.data).toMatchObject({ kind: 'aborted', trajectory_uid: t.trajectory_uid });
    expect((event!.data.response_ids as number[]).length).toBeGreaterThan(0);
    // No normal step was written for the aborted call; the next call is step 0.
    await client(t).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'again' }] });
    await complete(t);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => [s.index, s.responseText])).toEqual([[0, 'again']]);
  });
});

describe('gateway: retokenized mode (an OpenAI-compatible upstream without ids)', () => {
  /** A stand-in for a hosted OpenAI-compatible API: the sim's answers with every id and logprob removed. */
  async function idlessUpstream(script: unknown[]): Promise<{ url: string; close(): void }> {
    const { buildSimApp } = await import('../packages/core/src/engines/sim/index.js');
    const { app } = buildSimApp({ policy: 'scripted', script, model: 'sim-hosted' });
    const strip = (o: Record<string, unknown>) => {
      delete o.prompt_token_ids;
      for (const c of (o.choices as Record<string, unknown>[]) ?? []) {
        delete c.token_ids;
        c.logprobs = null;
      }
      return o;
    };
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => {
        body += c.toString('utf8');
      });
      req.on('end', async () => {
        const answer = await app.fetch(
          new Request(`http://hosted${req.url}`, {
            method: req.method,
            body: req.method === 'POST' ? body : undefined,
          }),
        );
        const text = await answer.text();
        res.writeHead(answer.status, {
          'content-type': answer.headers.get('content-type') ?? 'application/json',
        });
        if (!(answer.headers.get('content-type') ?? '').includes('event-stream')) {
          res.end(req.url === '/v1/chat/completions' ? JSON.stringify(strip(JSON.parse(text))) : text);
          return;
        }
        const blocks = text.split('\n\n').filter((b) => b.startsWith('data: '));
        for (const block of blocks) {
          const data = block.slice(6);
          res.write(`data: ${data === '[DONE]' ? data : JSON.stringify(strip(JSON.parse(data)))}\n\n`);
        }
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    return {
      url: `http://127.0.0.1:${(server.address() as { port: number }).port}/v1`,
      close: () => server.close(),
    };
  }

  it('rebuilds ids with the Qwen3 template: decode(prompt + response) is the rendered conversation', async () => {
    const script = [
      { toolCall: { name: 'read_file', arguments: { path: 'a.txt' } } },
      { answer: 'It says hi.' },
    ];
    const hosted = await idlessUpstream(script);
    try {
      const server = await serve({ engines: [`openai=${hosted.url}`] });
      const t = await init(server);
      const openai = client(t);
      const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [
        { role: 'system', content: 'You read files.' },
        { role: 'user', content: 'What is in a.txt?' },
      ];
      const kwargs = { chat_template_kwargs: { enable_thinking: false } } as Record<string, unknown>;
      const first = await openai.chat.completions.create({ model: 'm', messages, tools, ...kwargs });
      const call = first.choices[0]!.message;
      expect((first as unknown as { prompt_token_ids?: unknown }).prompt_token_ids).toBeUndefined();
      messages.push(call, { role: 'tool', tool_call_id: call.tool_calls![0]!.id, content: 'hi' });
      const stream = await openai.chat.completions.create({
        model: 'm',
        messages,
        tools,
        stream: true,
        ...kwargs,
      });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      await complete(t);
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps.map((s) => s.tokenSource)).toEqual(['retokenized', 'retokenized']);
      expect(steps.map((s) => s.responseLogprobs)).toEqual([null, null]);
      const turns = [
        messages.slice(0, 2).concat([call]),
        messages.concat([{ role: 'assistant', content: text }]),
      ];
      steps.forEach((step, i) => {
        const rendered = renderChat({ messages: turns[i] as never, tools, enableThinking: false });
        // The template closes each turn with "<|im_end|>\n"; a generation ends at "<|im_end|>".
        expect(tokenizer.decode(step.promptIds.concat(step.responseIds))).toBe(rendered.replace(/\n$/, ''));
      });
      expect(steps[1]!.responseText).toBe('It says hi.');
      expect(steps[0]!.toolResults).toEqual([expect.objectContaining({ content: 'hi', error: false })]);
    } finally {
      hosted.close();
    }
  });
});

describe('gateway: policy versions', () => {
  it('stamps steps with the version in force; a drain holds new generations until running ones end', async () => {
    const server = await serve({ sim: { ttftMs: 400, tokensPerSecond: 1000 } });
    const t = await init(server);
    const openai = client(t);
    const ask = (content: string) =>
      openai.chat.completions.create({ model: 'm', messages: [{ role: 'user', content }] });
    // Each phase waits for the gateway to reach it (not for a fixed time: a loaded machine is slow).
    const reached = (check: () => boolean) =>
      vi.waitFor(() => expect(check()).toBe(true), { timeout: 10_000, interval: 2 });
    const running = ask('started under version 0');
    await reached(() => server.gateway.gate.running === 1);
    const put = fetch(`${server.url}/v1/policy-version`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ version: 1, drain: true }),
    }).then((r) => r.json() as Promise<{ version: number; drained_ms: number; drain_timed_out: boolean }>);
    await reached(() => server.gateway.gate.draining);
    const held = ask('held, then run under version 1');
    const [switched] = await Promise.all([put, running, held]);
    expect(switched.version).toBe(1);
    expect(switched.drain_timed_out).toBe(false);
    expect(switched.drained_ms).toBeGreaterThan(50);
    await complete(t);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    const byText = Object.fromEntries(steps.map((s) => [s.responseText, s.policyVersion]));
    expect(byText).toEqual({ 'started under version 0': 0, 'held, then run under version 1': 1 });
  });
});

describe('gateway: no session leaks', () => {
  it('an open trajectory idle past its channel timeout is closed as aborted and refuses further calls', async () => {
    const server = await serve({ gatewayOptions: { sessionRecheckMs: 0 } });
    await server.pool.configureChannel('train', { idle_timeout_ms: 400 });
    const idle = await init(server);
    const busy = await init(server);
    await client(idle).chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'then silence' }],
    });
    // The busy one keeps calling (each captured step is activity) while the other stays silent.
    for (let i = 0; i < 8; i++) {
      await client(busy).chat.completions.create({
        model: 'm',
        messages: [{ role: 'user', content: `turn ${i}` }],
      });
      await new Promise((r) => setTimeout(r, 60));
    }
    await server.pool.sweepNow();
    expect((await server.pool.getTrajectory(idle.trajectory_uid))!.status).toBe('aborted');
    expect((await server.pool.getTrajectory(busy.trajectory_uid))!.status).toBe('open');
    await expect(
      client(idle).chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'too late' }] }),
    ).rejects.toMatchObject({ status: 409, message: expect.stringMatching(/aborted/) });
    expect(await server.pool.getTrajectorySteps(idle.trajectory_uid)).toHaveLength(1);
    const stats = await server.pool.stats('train');
    expect(stats.completed.idleAborted).toBe(1);
  });
});

describe('gateway: cancellation reaches the engine', () => {
  it('a disconnecting agent stops the generation on the engine, over HTTP', async () => {
    const { createSimApp, latencyModel, SimEngine, echoPolicy } = await import(
      '../packages/core/src/engines/sim/index.js'
    );
    const { listen } = await import('../packages/core/src/util/http-server.js');
    const ends: { aborted: boolean; chunksSent: number }[] = [];
    const sim = createSimApp({
      engine: new SimEngine({ policy: echoPolicy }),
      latency: latencyModel({ ttftMs: 5, tokensPerSecond: 40 }),
      onStreamEnd: (end) => ends.push(end),
    });
    const engine = await listen(sim.fetch, '127.0.0.1', 0);
    try {
      const server = await serve({ engines: [`vllm=${engine.url}`] });
      const t = await init(server);
      const words = Array.from({ length: 40 }, (_, i) => `word${i}`).join(' ');
      const abort = new AbortController();
      const stream = await client(t).chat.completions.create(
        { model: 'm', messages: [{ role: 'user', content: words }], stream: true },
        { signal: abort.signal },
      );
      let chunks = 0;
      for await (const _ of stream) {
        if (++chunks === 3) abort.abort();
      }
      await expect.poll(() => ends.length).toBe(1);
      expect(ends[0]!.aborted).toBe(true);
      // 40 words are far more than the few chunks sent before the engine heard of the abort.
      expect(ends[0]!.chunksSent).toBeLessThan(20);
      await expect.poll(async () => (await server.pool.stats()).failedCalls.aborted).toBe(1);
    } finally {
      await engine.close(undefined, 100);
    }
  });
});
