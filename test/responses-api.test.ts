import http from 'node:http';
import OpenAI from 'openai';
import { describe, expect, it, onTestFinished } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer, renderChat } from '../packages/core/src/text/index.js';
import { testServers } from './support/test-servers.js';

/*
 * The Responses API (`POST …/v1/responses`, Codex CLI's protocol) end to end: the official openai
 * client as the agent, real HTTP on loopback, a real SQLite file and the sim as the engine. Each
 * call must be a step holding the engine's ids, the same as a chat call's; what the client got is
 * compared with what the store holds, and the prompts with the chat template rendered here.
 */

const tokenizer = loadQwen3Tokenizer();
const IM_END = tokenizer.tokenId('<|im_end|>')!;

interface Init {
  trajectory_uid: string;
  group_id: string;
  base_url: string;
}

const { serve } = testServers('responses', { engines: ['sim'] });

async function post(url: string, body: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

async function init(server: RunningServer): Promise<Init> {
  const { status, json } = await post(`${server.url}/init_trajectory`, {});
  expect(status).toBe(200);
  return json as Init;
}

const complete = (t: Init) =>
  post(`${new URL(t.base_url).origin}/v1/trajectories/${t.trajectory_uid}/complete`, { reward: 1 });

const client = (t: Init) => new OpenAI({ baseURL: t.base_url, apiKey: 'unused', maxRetries: 0 });

const readFile: OpenAI.Responses.FunctionTool = {
  type: 'function',
  name: 'read_file',
  description: 'Read a file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  strict: false,
};
/** The same tool as chat/completions (and the chat template) take it. */
const chatTool = {
  type: 'function' as const,
  function: {
    name: readFile.name,
    description: readFile.description,
    parameters: readFile.parameters,
    strict: false,
  },
};

const script = [
  { text: 'Let me look.', toolCall: { name: 'read_file', arguments: { path: 'notes.txt' } } },
  { answer: 'The notes say: ship it.' },
];
const INSTRUCTIONS = 'You are a careful coding agent.';
const QUESTION = 'What do my notes say?';

type FunctionCall = OpenAI.Responses.ResponseFunctionToolCall;

type Params = Omit<OpenAI.Responses.ResponseCreateParamsNonStreaming, 'stream'>;

/** What the client was answered in one turn, whichever way it was read. */
interface Turn {
  response: OpenAI.Responses.Response;
  events: OpenAI.Responses.ResponseStreamEvent[];
}

/** A function_call item's call, as the chat template renders the assistant turn that made it. */
const chatCallOf = (c: FunctionCall) => ({
  id: c.call_id,
  type: 'function' as const,
  function: { name: c.name, arguments: c.arguments },
});

/**
 * Checks a finished two-turn tool loop against the store: two steps, each the engine's ids (the
 * prompt the chat template's rendering of the conversation, the response the answer's text and
 * EOS), the tool result attached to the step that called the tool, usage the step's lengths.
 */
async function checkToolLoop(server: RunningServer, t: Init, turns: Turn[]) {
  const [first, second] = turns.map((turn) => turn.response) as [
    OpenAI.Responses.Response,
    OpenAI.Responses.Response,
  ];
  expect(first.status).toBe('completed');
  const call = first.output.find((o) => o.type === 'function_call') as FunctionCall;
  expect(call).toMatchObject({ name: 'read_file', status: 'completed' });
  expect(JSON.parse(call.arguments)).toEqual({ path: 'notes.txt' });
  expect(second.status).toBe('completed');
  expect(second.output_text).toBe('The notes say: ship it.');
  expect(first.id).toMatch(/^resp_[0-9a-f]{48}$/);
  expect(second.id).not.toBe(first.id);
  expect((await complete(t)).status).toBe(200);
  const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
  expect(steps).toHaveLength(2);
  const [s0, s1] = steps as [Step, Step];
  // The engine's ids: the chat template's rendering of the conversation the Responses input means.
  const user = { role: 'user' as const, content: QUESTION };
  const system = { role: 'system' as const, content: INSTRUCTIONS };
  expect(first.output.map((o) => o.type)).toEqual(['message', 'function_call']);
  const said = (first.output[0] as OpenAI.Responses.ResponseOutputMessage).content;
  expect(said).toMatchObject([{ type: 'output_text', text: 'Let me look.', annotations: [], logprobs: [] }]);
  const assistant = { role: 'assistant' as const, content: 'Let me look.', tool_calls: [chatCallOf(call)] };
  const tool = { role: 'tool' as const, tool_call_id: call.call_id, content: 'ship it' };
  expect(tokenizer.decode(s0.promptIds)).toBe(
    renderChat({ messages: [system, user], tools: [chatTool], addGenerationPrompt: true }),
  );
  expect(tokenizer.decode(s1.promptIds)).toBe(
    renderChat({ messages: [system, user, assistant, tool], tools: [chatTool], addGenerationPrompt: true }),
  );
  expect(s0.tokenSource).toBe('engine');
  expect(s0.responseIds.at(-1)).toBe(IM_END);
  expect(s1.responseIds.at(-1)).toBe(IM_END);
  expect(tokenizer.decode(s1.responseIds.slice(0, -1))).toBe(second.output_text);
  // The function_call item is the step's parsed call, under the same id.
  expect(s0.toolCalls).toEqual([chatCallOf(call)]);
  expect(tokenizer.decode(s0.responseIds.slice(0, -1))).toContain('"name": "read_file"');
  expect(s0.responseLogprobs).toHaveLength(s0.responseIds.length);
  expect(s0.toolResults).toEqual([
    { tool_call_id: call.call_id, name: 'read_file', content: 'ship it', error: false },
  ]);
  expect(steps.map((s) => s.finishReason)).toEqual(['tool_calls', 'stop']);
  // The second prompt extends the first prompt and its response, token for token.
  expect(s1.promptIds.slice(0, s0.promptIds.length + s0.responseIds.length)).toEqual([
    ...s0.promptIds,
    ...s0.responseIds,
  ]);
  expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 2, prefixBreaks: 0 });
  for (const [response, step] of [
    [first, s0],
    [second, s1],
  ] as const) {
    expect(response.usage).toMatchObject({
      input_tokens: step.promptIds.length,
      output_tokens: step.responseIds.length,
      total_tokens: step.promptIds.length + step.responseIds.length,
    });
    expect(step.messages?.[0]).toEqual(system);
    expect(step.tools).toEqual([chatTool]);
  }
  return { call, steps };
}

/** Reads a streamed response with `responses.stream()` (or `create({stream: true})`), keeping every event. */
async function streamed(openai: OpenAI, params: Params, via: 'stream' | 'create'): Promise<Turn> {
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  if (via === 'stream') {
    const stream = openai.responses.stream(params);
    for await (const event of stream) events.push(event);
    return { response: await stream.finalResponse(), events };
  }
  const stream = await openai.responses.create({ ...params, stream: true });
  for await (const event of stream) events.push(event);
  const last = events.at(-1);
  expect(last?.type).toBe('response.completed');
  const response = (last as OpenAI.Responses.ResponseCompletedEvent).response;
  // The SDK adds output_text to what `create` returns whole; a raw stream's final response has none.
  const text = response.output
    .flatMap((o) => (o.type === 'message' ? o.content : []))
    .map((c) => (c.type === 'output_text' ? c.text : ''))
    .join('');
  return { response: { ...response, output_text: text }, events };
}

/** The events' order as the official API sends them, with sequence numbers 0, 1, 2, … */
function checkEventOrder(events: OpenAI.Responses.ResponseStreamEvent[]) {
  expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  const types = events.map((e) => e.type);
  expect(types.slice(0, 2)).toEqual(['response.created', 'response.in_progress']);
  expect(types.at(-1)).toBe('response.completed');
  const added = events.filter((e) => e.type === 'response.output_item.added');
  const done = events.filter((e) => e.type === 'response.output_item.done');
  expect(done.map((e) => e.output_index).sort()).toEqual(added.map((e) => e.output_index).sort());
  const final = (events.at(-1) as OpenAI.Responses.ResponseCompletedEvent).response;
  expect(done.map((e) => e.item)).toEqual(final.output);
  return types;
}

describe('Responses API: the official openai client through the gateway', () => {
  it.each([
    ['whole', 'previous_response_id'],
    ['whole', 'the whole input'],
    ['stream', 'the whole input'],
    ['create', 'previous_response_id'],
  ] as const)(
    'a tool loop read %s, continued with %s: each call a step with the engine ids',
    async (read, via) => {
      const server = await serve({ sim: { policy: 'scripted', script } });
      const t = await init(server);
      const openai = client(t);
      const replay = via === 'the whole input';
      const params = { model: 'my-policy', instructions: INSTRUCTIONS, tools: [readFile], store: !replay };
      const turn = async (p: Params): Promise<Turn> =>
        read === 'whole'
          ? { response: await openai.responses.create({ ...p, stream: false }), events: [] }
          : streamed(openai, p, read);
      const input: OpenAI.Responses.ResponseInputItem[] = [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: QUESTION }] },
      ];
      const first = await turn({ ...params, input: [...input] });
      expect(first.response).toMatchObject({
        object: 'response',
        model: 'my-policy',
        instructions: INSTRUCTIONS,
        store: !replay,
      });
      const call = first.response.output.find((o) => o.type === 'function_call') as FunctionCall;
      const output = { type: 'function_call_output' as const, call_id: call.call_id, output: 'ship it' };
      let second: Turn;
      if (replay) {
        // Codex's way: the output items go back as input, then the tool's output.
        input.push(...(first.response.output as OpenAI.Responses.ResponseInputItem[]), output);
        second = await turn({ ...params, input });
      } else {
        second = await turn({ ...params, previous_response_id: first.response.id, input: [output] });
        expect(second.response.previous_response_id).toBe(first.response.id);
      }
      if (read !== 'whole') {
        const types = checkEventOrder(first.events);
        expect(types).toContain('response.function_call_arguments.delta');
        expect(types).toContain('response.function_call_arguments.done');
        // The arguments' deltas add up to the item's arguments.
        const deltas = first.events.filter((e) => e.type === 'response.function_call_arguments.delta');
        expect(deltas.map((e) => e.delta).join('')).toBe(call.arguments);
        const secondTypes = checkEventOrder(second.events);
        expect(secondTypes).toEqual([
          'response.created',
          'response.in_progress',
          'response.output_item.added',
          'response.content_part.added',
          ...secondTypes.filter((type) => type === 'response.output_text.delta'),
          'response.output_text.done',
          'response.content_part.done',
          'response.output_item.done',
          'response.completed',
        ]);
        const text = second.events
          .filter((e) => e.type === 'response.output_text.delta')
          .map((e) => e.delta)
          .join('');
        expect(text).toBe('The notes say: ship it.');
      }
      // Stored responses are kept until their trajectory completes (checkToolLoop completes it).
      expect(server.gateway.responseStore.stats().responses).toBe(replay ? 0 : 2);
      const { steps } = await checkToolLoop(server, t, [first, second]);
      expect(server.gateway.responseStore.stats().responses).toBe(0);
      expect(steps[0]!.metadata).toMatchObject({ model: 'my-policy', served_model: 'sim-qwen3' });
    },
  );

  it('reasoning the engine splits off is a reasoning item, and goes back as the turn’s reasoning', async () => {
    const server = await serve();
    const t = await init(server);
    const openai = client(t);
    // The sim echoes the user; the Qwen3 reasoning parser splits the think block off, as vLLM's does.
    const thought = '<think>\nplan it\n</think>\n\nthe answer';
    const whole = await openai.responses.create({ model: 'm', input: thought });
    const live = await streamed(openai, { model: 'm', input: thought }, 'stream');
    for (const response of [whole, live.response]) {
      expect(response.output.map((o) => o.type)).toEqual(['reasoning', 'message']);
      expect((response.output[0] as OpenAI.Responses.ResponseReasoningItem).content).toEqual([
        { type: 'reasoning_text', text: 'plan it' },
      ]);
      expect(response.output_text).toBe('the answer');
    }
    const types = checkEventOrder(live.events);
    expect(types).toContain('response.reasoning_text.delta');
    const replayed = await openai.responses.create({
      model: 'm',
      input: [
        { role: 'user', content: thought },
        ...(whole.output as OpenAI.Responses.ResponseInputItem[]),
        { role: 'user', content: 'next' },
      ],
    });
    const continued = await openai.responses.create({
      model: 'm',
      previous_response_id: live.response.id,
      input: [{ role: 'user', content: 'next' }],
    });
    expect([replayed.output_text, continued.output_text]).toEqual(['next', 'next']);
    await complete(t);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    const conversation = [
      { role: 'user', content: thought },
      { role: 'assistant', content: 'the answer', reasoning_content: 'plan it' },
      { role: 'user', content: 'next' },
    ];
    expect(steps.map((s) => s.messages)).toEqual([
      [conversation[0]],
      [conversation[0]],
      conversation,
      conversation,
    ]);
    expect(steps[2]!.promptIds).toEqual(steps[3]!.promptIds);
    expect(steps[0]!.metadata.reasoning).toBe('plan it');
  });

  it('developer messages are system messages, and text parts are joined, as the step stores them', async () => {
    const server = await serve();
    const t = await init(server);
    const answer = await client(t).responses.create({
      model: 'm',
      instructions: 'Be brief.',
      top_logprobs: 0,
      input: [
        { role: 'developer', content: 'Sandbox: read-only.' },
        {
          type: 'message',
          role: 'user',
          content: [
            { type: 'input_text', text: 'two ' },
            { type: 'input_text', text: 'parts' },
          ],
        },
      ],
    });
    expect(answer.output_text).toBe('two parts');
    await complete(t);
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    const messages = [
      { role: 'system' as const, content: 'Be brief.' },
      { role: 'system' as const, content: 'Sandbox: read-only.' },
      { role: 'user' as const, content: 'two parts' },
    ];
    expect(step!.messages).toEqual(messages);
    expect(tokenizer.decode(step!.promptIds)).toBe(renderChat({ messages, addGenerationPrompt: true }));
  });

  it('the terminal event of a streamed call leaves only after its step is stored', async () => {
    const server = await serve();
    const t = await init(server);
    const stored = async () => (await server.pool.getTrajectorySteps(t.trajectory_uid)).length;
    const stream = await client(t).responses.create({ model: 'm', input: 'hello there', stream: true });
    let seen = false;
    for await (const event of stream) {
      if (event.type === 'response.output_text.done' || event.type === 'response.completed') {
        seen = true;
        expect(await stored()).toBe(1);
      }
    }
    expect(seen).toBe(true);
  });

  it('a chat stream that breaks ends the response with response.failed, and stores no step', async () => {
    const engine = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end('data: this is not json\n\ndata: [DONE]\n\n');
    });
    await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
    onTestFinished(() => void engine.close());
    const server = await serve({
      engines: [`vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`],
    });
    const t = await init(server);
    const stream = await client(t).responses.create({ model: 'm', input: 'hi', stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.map((e) => e.type)).toEqual([
      'response.created',
      'response.in_progress',
      'response.failed',
    ]);
    expect((events[2] as OpenAI.Responses.ResponseFailedEvent).response).toMatchObject({
      status: 'failed',
      error: { message: expect.stringMatching(/not JSON/) },
    });
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
  });

  it('an online session (X-Stepwise-Session) takes Responses calls as chat calls', async () => {
    const server = await serve();
    const openai = new OpenAI({
      baseURL: `${server.url}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      defaultHeaders: { 'X-Stepwise-Session': 'auto' },
    });
    const first = await openai.responses.create({ model: 'm', input: 'hello', prompt_cache_key: 'chat-42' });
    const second = await openai.responses.create({
      model: 'm',
      input: 'more',
      previous_response_id: first.id,
      prompt_cache_key: 'chat-42',
    });
    expect(second.output_text).toBe('more');
    await expect(openai.responses.create({ model: 'm', input: 'who?' })).rejects.toMatchObject({
      status: 400,
      param: 'prompt_cache_key',
    });
    const trajectories = await server.pool.listTrajectories({ channel: 'online', limit: 10, offset: 0 });
    expect(trajectories.items).toHaveLength(1);
    const steps = await server.pool.getTrajectorySteps(trajectories.items[0]!.id);
    expect(steps.map((s) => s.messages)).toEqual([
      [{ role: 'user', content: 'hello' }],
      [
        { role: 'user', content: 'hello' },
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: 'more' },
      ],
    ]);
  });

  it('max_output_tokens cuts the answer: status incomplete, as the step', async () => {
    const server = await serve();
    const t = await init(server);
    const openai = client(t);
    const whole = await openai.responses.create({
      model: 'm',
      input: 'please repeat this rather long sentence back to me word for word',
      max_output_tokens: 3,
    });
    expect(whole.status).toBe('incomplete');
    expect(whole.incomplete_details).toEqual({ reason: 'max_output_tokens' });
    const stream = await openai.responses.create({
      model: 'm',
      input: 'please repeat this rather long sentence back to me word for word',
      max_output_tokens: 3,
      stream: true,
    });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const event of stream) events.push(event);
    expect(events.at(-1)).toMatchObject({ type: 'response.incomplete', response: { status: 'incomplete' } });
    await complete(t);
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps.map((s) => [s.finishReason, s.responseIds.length, s.metadata.max_tokens])).toEqual([
      ['length', 3, 3],
      ['length', 3, 3],
    ]);
    expect(tokenizer.decode(steps[0]!.responseIds)).toBe(whole.output_text);
    expect(whole.usage?.output_tokens).toBe(3);
  });

  it('takes the trajectory from the header or the model prefix at the fixed base_url', async () => {
    const server = await serve();
    const a = await init(server);
    const b = await init(server);
    const fixed = new OpenAI({
      baseURL: `${server.url}/v1`,
      apiKey: 'unused',
      maxRetries: 0,
      defaultHeaders: { 'X-Stepwise-Trajectory': a.trajectory_uid },
    });
    const viaHeader = await fixed.responses.create({ model: 'm', input: 'via header' });
    const plain = new OpenAI({ baseURL: `${server.url}/v1`, apiKey: 'unused', maxRetries: 0 });
    const viaModel = await plain.responses.create({
      model: `${b.trajectory_uid}__qwen3`,
      input: 'via model',
    });
    await expect(plain.responses.create({ model: 'qwen3', input: 'nobody' })).rejects.toMatchObject({
      status: 400,
      code: 'missing_trajectory',
    });
    // A response id is scoped to its trajectory, whichever base_url names it.
    await expect(
      plain.responses.create({
        model: `${b.trajectory_uid}__qwen3`,
        previous_response_id: viaHeader.id,
        input: 'x',
      }),
    ).rejects.toMatchObject({ status: 404, param: 'previous_response_id' });
    const continued = await fixed.responses.create({
      model: 'm',
      previous_response_id: viaHeader.id,
      input: 'again',
    });
    expect(continued.output_text).toBe('again');
    await complete(a);
    await complete(b);
    const [sa, sa2] = await server.pool.getTrajectorySteps(a.trajectory_uid);
    const [sb] = await server.pool.getTrajectorySteps(b.trajectory_uid);
    expect([sa!.responseText, viaHeader.output_text]).toEqual(['via header', 'via header']);
    expect([sb!.responseText, viaModel.output_text]).toEqual(['via model', 'via model']);
    expect(sb!.metadata.model).toBe('qwen3');
    expect(sa2!.messages).toEqual([
      { role: 'user', content: 'via header' },
      { role: 'assistant', content: 'via header' },
      { role: 'user', content: 'again' },
    ]);
  });

  it('answers bad fields and unknown or foreign response ids in OpenAI’s error shape, storing nothing', async () => {
    const server = await serve();
    const t = await init(server);
    const other = await init(server);
    const url = `${t.base_url}/responses`;
    const foreign = await client(other).responses.create({ model: 'm', input: 'mine' });
    const unstored = await client(t).responses.create({ model: 'm', input: 'forget me', store: false });
    const cases: [unknown, number, string, string?][] = [
      [{ model: 'm', input: 'x', tools: [{ type: 'web_search' }] }, 400, 'tools.0.type'],
      [{ model: 'm', input: 'x', tools: [{ type: 'function', name: '' }] }, 400, 'tools.0.name'],
      [{ model: 'm', input: 'x', temperature: 'hot' }, 400, 'temperature'],
      [{ model: 'm', input: 'x', max_output_tokens: -1 }, 400, 'max_output_tokens'],
      [{ model: 'm', input: [{ type: 'image_generation_call', id: 'x' }] }, 400, 'input.0.type'],
      [
        { model: 'm', input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] },
        400,
        'input.0.content.0.type',
      ],
      [{ model: 'm', input: [{ role: 'robot', content: 'x' }] }, 400, 'input.0.role'],
      [{ model: 'm', input: [{ type: 'function_call_output', output: 'x' }] }, 400, 'input.0.call_id'],
      [{ model: 'm', input: [] }, 400, 'input'],
      [{ model: 'm', input: 'x', conversation: 'conv_1' }, 400, 'conversation'],
      [{ model: 'm', input: 'x', background: true }, 400, 'background'],
      [{ model: 'm', input: 'x', top_logprobs: 2 }, 400, 'top_logprobs'],
      [{ model: 'm', input: 'x', metadata: { k: 1 } }, 400, 'metadata.k'],
      [{ model: 'm', input: 'x', n: 2 }, 400, 'n'],
      [{ model: 'm', input: 'x', tool_choice: { type: 'web_search' } }, 400, 'tool_choice'],
      [
        { model: 'm', input: 'x', previous_response_id: 'resp_unknown' },
        404,
        'previous_response_id',
        'previous_response_not_found',
      ],
      [
        { model: 'm', input: 'x', previous_response_id: foreign.id },
        404,
        'previous_response_id',
        'previous_response_not_found',
      ],
      [
        { model: 'm', input: 'x', previous_response_id: unstored.id },
        404,
        'previous_response_id',
        'previous_response_not_found',
      ],
      ['{"input": [', 400, 'body'],
    ];
    for (const [body, status, param, code] of cases) {
      const answer = await post(url, body);
      expect([param, answer.status]).toEqual([param, status]);
      expect(answer.json.error).toMatchObject({
        type: status === 404 ? 'not_found_error' : 'invalid_request_error',
        param,
        ...(code ? { code } : {}),
      });
      expect(typeof answer.json.error.message).toBe('string');
    }
    // The SDK raises them as typed errors.
    await expect(
      client(t).responses.create({ model: 'm', input: 'x', previous_response_id: foreign.id }),
    ).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    // Only the one good call of each trajectory is a step; the refused ones left no trace.
    expect((await server.pool.getTrajectorySteps(t.trajectory_uid)).map((s) => s.responseText)).toEqual([
      'forget me',
    ]);
    expect(await server.pool.getTrajectorySteps(other.trajectory_uid)).toHaveLength(1);
    expect((await server.pool.getTrajectory(t.trajectory_uid))?.nSteps).toBe(1);
  });
});
