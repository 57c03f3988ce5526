import { mkdtempSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Anthropic, { type APIError } from '@anthropic-ai/sdk';
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished, vi } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import { type RunningServer, type ServerOptions, startServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Anthropic's Messages API on the gateway (`POST /v1/messages`, packages/core/src/gateway/messages*.ts): the
 * official @anthropic-ai/sdk client as the agent, real HTTP on loopback, a real SQLite file (and,
 * with STEPWISE_TEST_PG_URL, PostgreSQL for the tool loop), the sim as the engine. What the client
 * received is compared with the steps the store holds.
 */

const tokenizer = loadQwen3Tokenizer();
const IM_END = tokenizer.tokenId('<|im_end|>')!;

const AGENT_KEY = 'agent-key-0123456789abcdef';
const TRAINER_KEY = 'trainer-key-0123456789abcdef';

interface Init {
  trajectory_uid: string;
  group_id: string;
  base_url: string;
}

let dir: string;
const servers: RunningServer[] = [];
const schemas: string[] = [];
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-messages-'));
});
afterEach(async () => {
  vi.restoreAllMocks();
  await Promise.all(servers.splice(0).map((s) => s.close()));
});
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

type StoreKind = 'SQLite' | 'PostgreSQL';
const STORES: StoreKind[] = pgUrl ? ['SQLite', 'PostgreSQL'] : ['SQLite'];

let dbCount = 0;
async function serve(
  options: Partial<ServerOptions> = {},
  store: StoreKind = 'SQLite',
): Promise<RunningServer> {
  let where: Pick<ServerOptions, 'dbPath' | 'pg'> = { dbPath: join(dir, `m${dbCount++}.db`) };
  if (store === 'PostgreSQL') {
    const schema = freshSchema('stepwise_messages');
    schemas.push(schema);
    where = { dbPath: '', pg: { url: pgUrl!, schema } };
  }
  const server = await startServer({ ...where, port: 0, engines: ['sim'], ...options });
  servers.push(server);
  return server;
}

async function init(server: RunningServer, key?: string): Promise<Init> {
  const res = await fetch(`${server.url}/init_trajectory`, {
    method: 'POST',
    headers: key ? { authorization: `Bearer ${key}` } : {},
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Init;
}

async function complete(server: RunningServer, t: Init) {
  const res = await fetch(`${server.url}/v1/trajectories/${t.trajectory_uid}/complete`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ reward: 1 }),
  });
  expect(res.status).toBe(200);
}

/** The SDK on a trajectory: its baseURL is the base_url less `/v1` (the SDK adds `/v1/messages`). */
const anthropic = (t: Init, options: Partial<ConstructorParameters<typeof Anthropic>[0]> = {}) =>
  new Anthropic({ baseURL: t.base_url.replace(/\/v1$/, ''), apiKey: 'unused', maxRetries: 0, ...options });

/** The text a step's response ids decode to, less the closing EOS. */
function responseText(step: Step): string {
  expect(step.responseIds.at(-1)).toBe(IM_END);
  return tokenizer.decode(step.responseIds.slice(0, -1));
}

const tools: Anthropic.Tool[] = [
  {
    name: 'read_file',
    description: 'Read a file',
    input_schema: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
  },
];

const textOf = (m: Anthropic.Message) =>
  m.content.flatMap((b) => (b.type === 'text' ? [b.text] : [])).join('');
const toolUses = (m: Anthropic.Message) => m.content.filter((b) => b.type === 'tool_use');

describe('gateway: Anthropic Messages API with the official SDK', () => {
  it.each(STORES)(
    'a tool loop, whole and streamed: each call a step with the engine ids, tool results on the step they answer (%s)',
    async (store) => {
      const script = [
        { toolCall: { name: 'read_file', arguments: { path: 'missing.txt' } } },
        { toolCall: { name: 'read_file', arguments: { path: 'notes.txt' } } },
        { answer: 'The notes say: ship it.' },
      ];
      const server = await serve({ sim: { policy: 'scripted', script } }, store);
      const t = await init(server);
      const client = anthropic(t);
      const messages: Anthropic.MessageParam[] = [{ role: 'user', content: 'What do my notes say?' }];
      const system = [
        { type: 'text' as const, text: 'You read files.', cache_control: { type: 'ephemeral' as const } },
      ];
      const answers: Anthropic.Message[] = [];
      const streamed = [false, true, false];
      for (let turn = 0; turn < 3; turn++) {
        const params = { model: 'claude-test', max_tokens: 256, system, messages, tools };
        let message: Anthropic.Message;
        if (streamed[turn]) {
          const stream = client.messages.stream(params);
          let storedAtDelta: number | null = null;
          for await (const event of stream) {
            // The call's end (its stop reason) reaches the agent only after its step is stored.
            if (event.type === 'message_delta')
              storedAtDelta = (await server.pool.getTrajectorySteps(t.trajectory_uid)).length;
          }
          expect(storedAtDelta).toBe(turn + 1);
          message = await stream.finalMessage();
        } else {
          message = await client.messages.create(params);
        }
        answers.push(message);
        messages.push({ role: 'assistant', content: message.content });
        const results: Anthropic.ToolResultBlockParam[] = toolUses(message).map((use) =>
          (use.input as { path: string }).path === 'notes.txt'
            ? { type: 'tool_result', tool_use_id: use.id, content: [{ type: 'text', text: 'ship it' }] }
            : {
                type: 'tool_result',
                tool_use_id: use.id,
                content: "ENOENT: no such file or directory, open 'missing.txt'",
                is_error: true,
              },
        );
        if (results.length > 0) messages.push({ role: 'user', content: results });
      }
      await complete(server, t);
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps).toHaveLength(3);

      expect(answers.map((m) => m.stop_reason)).toEqual(['tool_use', 'tool_use', 'end_turn']);
      expect(steps.map((s) => s.finishReason)).toEqual(['tool_calls', 'tool_calls', 'stop']);
      expect(new Set(answers.map((m) => m.id)).size).toBe(3);
      for (const [i, m] of answers.entries()) {
        const step = steps[i]!;
        expect(m).toMatchObject({
          type: 'message',
          role: 'assistant',
          model: 'sim-qwen3',
          stop_sequence: null,
        });
        expect(m.id).toMatch(/^msg_[0-9a-f]{32}$/);
        // Usage counts the engine's ids the step holds.
        expect(m.usage).toMatchObject({
          input_tokens: step.promptIds.length,
          output_tokens: step.responseIds.length,
        });
        expect(step.tokenSource).toBe('engine');
        expect(step.responseLogprobs).toHaveLength(step.responseIds.length);
        expect(step.metadata).toMatchObject({ model: 'claude-test', max_tokens: 256 });
        // A tool_use is the engine's call: its id with Anthropic's prefix, its arguments as input.
        const calls = (step.toolCalls ?? []) as {
          id: string;
          function: { name: string; arguments: string };
        }[];
        expect(toolUses(m).map((u) => ({ id: u.id, name: u.name, input: u.input }))).toEqual(
          calls.map((c) => ({
            id: `toolu_${c.id}`,
            name: c.function.name,
            input: JSON.parse(c.function.arguments),
          })),
        );
      }
      expect(toolUses(answers[0]!)[0]!.input).toEqual({ path: 'missing.txt' });
      expect(toolUses(answers[1]!)[0]!.input).toEqual({ path: 'notes.txt' });
      // The last answer's text is the text of the ids the engine generated.
      expect(textOf(answers[2]!)).toBe('The notes say: ship it.');
      expect(responseText(steps[2]!)).toBe(textOf(answers[2]!));
      expect(steps[2]!.responseText).toBe(textOf(answers[2]!));

      // tool_result blocks reach the step whose call they answer; is_error marks a failure.
      const callId = (s: Step) => (s.toolCalls![0] as { id: string }).id;
      expect(steps[0]!.toolResults).toEqual([
        {
          tool_call_id: callId(steps[0]!),
          name: 'read_file',
          content: "ENOENT: no such file or directory, open 'missing.txt'",
          error: true,
          error_type: 'not_found',
        },
      ]);
      expect(steps[1]!.toolResults).toEqual([
        { tool_call_id: callId(steps[1]!), name: 'read_file', content: 'ship it', error: false },
      ]);
      expect(steps[2]!.toolResults).toBeNull();
      // The turns sent back render to the tokens generated: each prompt extends the last prompt + response.
      expect(await server.pool.getTrajectory(t.trajectory_uid)).toMatchObject({ nSteps: 3, prefixBreaks: 0 });
      for (let i = 1; i < 3; i++) {
        const before = steps[i - 1]!.promptIds.concat(steps[i - 1]!.responseIds);
        expect(steps[i]!.promptIds.slice(0, before.length)).toEqual(before);
      }
      // The system prompt is the chat system message; the stored messages are the chat view.
      expect(steps[0]!.messages![0]).toEqual({ role: 'system', content: 'You read files.' });
    },
  );

  it('is_error alone marks a result an error whose text names no kind', async () => {
    const script = [{ toolCall: { name: 'read_file', arguments: { path: 'a' } } }, { answer: 'ok' }];
    const server = await serve({ sim: { policy: 'scripted', script } });
    const t = await init(server);
    const client = anthropic(t);
    const first = await client.messages.create({
      model: 'm',
      max_tokens: 64,
      tools,
      messages: [{ role: 'user', content: 'read a' }],
    });
    const use = toolUses(first)[0]!;
    await client.messages.create({
      model: 'm',
      max_tokens: 64,
      tools,
      messages: [
        { role: 'user', content: 'read a' },
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [{ type: 'tool_result', tool_use_id: use.id, content: 'nope', is_error: true }],
        },
      ],
    });
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step!.toolResults).toEqual([
      {
        tool_call_id: use.id.slice('toolu_'.length),
        name: 'read_file',
        content: 'nope',
        error: true,
        error_type: 'error',
      },
    ]);
  });

  it('streams the Messages API events with their event lines, ping included, and the stored text', async () => {
    const server = await serve();
    const t = await init(server);
    const res = await fetch(`${t.base_url}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({
        model: 'm',
        max_tokens: 64,
        stream: true,
        messages: [{ role: 'user', content: 'stream a few words about the weather in Lisbon' }],
      }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^text\/event-stream/);
    const frames = (await res.text()).split('\n\n').filter((f) => f !== '');
    const events = frames.map((frame) => {
      const [eventLine, dataLine, ...rest] = frame.split('\n');
      expect(rest).toEqual([]);
      const name = eventLine!.replace(/^event: /, '');
      const data = JSON.parse(dataLine!.replace(/^data: /, '')) as Record<string, unknown>;
      expect(data.type).toBe(name);
      return data;
    });
    const types = events.map((e) => e.type);
    expect(types.slice(0, 3)).toEqual(['message_start', 'ping', 'content_block_start']);
    expect(types.slice(-3)).toEqual(['content_block_stop', 'message_delta', 'message_stop']);
    expect(new Set(types.slice(3, -3))).toEqual(new Set(['content_block_delta']));
    const text = events
      .filter((e) => e.type === 'content_block_delta')
      .map((e) => (e.delta as { type: string; text: string }).text)
      .join('');
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(text.length).toBeGreaterThan(0);
    expect(responseText(step!)).toBe(text);
    expect(events[0]!.message).toMatchObject({
      role: 'assistant',
      content: [],
      stop_reason: null,
      usage: { input_tokens: step!.promptIds.length, output_tokens: 0 },
    });
    expect(events.at(-2)).toEqual({
      type: 'message_delta',
      delta: { stop_reason: 'end_turn', stop_sequence: null },
      usage: { output_tokens: step!.responseIds.length, input_tokens: step!.promptIds.length },
    });
  });

  it('streams a vLLM answer that builds two tool calls piece by piece: the SDK assembles both inputs', async () => {
    // vLLM's streaming tool parser: a call's id and name first, its arguments in later deltas.
    const chunk = (delta: Record<string, unknown>, ids: number[], extra: Record<string, unknown> = {}) =>
      `data: ${JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        model: 'qwen3-vllm',
        ...extra,
        choices: [{ index: 0, delta, token_ids: ids, finish_reason: null }],
      })}\n\n`;
    const call = (index: number, fn: Record<string, unknown>, id?: string) => ({
      tool_calls: [{ index, ...(id ? { id, type: 'function' } : {}), function: fn }],
    });
    const body = [
      chunk({ role: 'assistant', content: '' }, [], { prompt_token_ids: [1, 2, 3, 4] }),
      chunk({ content: 'Let me ' }, [10]),
      chunk({ content: 'check.' }, [11]),
      chunk(call(0, { name: 'read_file', arguments: '' }, 'chatcmpl-tool-a'), [12]),
      chunk(call(0, { arguments: '{"path": ' }), [13]),
      chunk(call(0, { arguments: '"a.txt"}' }), [14]),
      chunk(call(1, { name: 'read_file', arguments: '{"path": "b.txt"}' }, 'chatcmpl-tool-b'), [15, 16]),
      `data: ${JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        model: 'qwen3-vllm',
        choices: [{ index: 0, delta: {}, token_ids: [17], finish_reason: 'tool_calls', stop_reason: null }],
      })}\n\n`,
      `data: ${JSON.stringify({
        id: 'c',
        object: 'chat.completion.chunk',
        model: 'qwen3-vllm',
        choices: [],
        usage: { prompt_tokens: 4, completion_tokens: 8, total_tokens: 12 },
      })}\n\n`,
      'data: [DONE]\n\n',
    ].join('');
    const engine = http.createServer((req, res) => {
      if (req.method !== 'POST') {
        res.writeHead(200, { 'content-type': 'application/json' });
        return void res.end(
          JSON.stringify({ object: 'list', data: [{ id: 'qwen3-vllm', object: 'model' }] }),
        );
      }
      req.resume();
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.end(body);
    });
    await new Promise<void>((r) => engine.listen(0, '127.0.0.1', r));
    onTestFinished(() => void engine.close());
    const server = await serve({
      engines: [`vllm=http://127.0.0.1:${(engine.address() as { port: number }).port}`],
    });
    const t = await init(server);
    const message = await anthropic(t)
      .messages.stream({
        model: 'm',
        max_tokens: 64,
        tools,
        messages: [{ role: 'user', content: 'read both' }],
      })
      .finalMessage();
    expect(message.content).toEqual([
      { type: 'text', text: 'Let me check.' },
      { type: 'tool_use', id: 'toolu_chatcmpl-tool-a', name: 'read_file', input: { path: 'a.txt' } },
      { type: 'tool_use', id: 'toolu_chatcmpl-tool-b', name: 'read_file', input: { path: 'b.txt' } },
    ]);
    expect(message).toMatchObject({
      model: 'qwen3-vllm',
      stop_reason: 'tool_use',
      usage: { input_tokens: 4, output_tokens: 8 },
    });
    const [step] = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(step).toMatchObject({
      tokenSource: 'engine',
      promptIds: [1, 2, 3, 4],
      responseIds: [10, 11, 12, 13, 14, 15, 16, 17],
      responseText: 'Let me check.',
      toolCalls: [
        { id: 'chatcmpl-tool-a', function: { name: 'read_file', arguments: '{"path": "a.txt"}' } },
        { id: 'chatcmpl-tool-b', function: { name: 'read_file', arguments: '{"path": "b.txt"}' } },
      ],
    });
  });

  it('stop reasons: max_tokens and a stop sequence, whole and streamed', async () => {
    const server = await serve({
      sim: { policy: 'scripted', script: [{ answer: 'The notes say: ship it.' }] },
    });
    for (const stream of [false, true]) {
      const t = await init(server);
      const client = anthropic(t);
      const ask = async (extra: { max_tokens: number; stop_sequences?: string[] }) => {
        const params = { model: 'm', messages: [{ role: 'user' as const, content: 'notes?' }], ...extra };
        return stream ? client.messages.stream(params).finalMessage() : client.messages.create(params);
      };
      const cut = await ask({ max_tokens: 3 });
      expect(cut).toMatchObject({
        stop_reason: 'max_tokens',
        stop_sequence: null,
        usage: { output_tokens: 3 },
      });
      const stopped = await ask({ max_tokens: 64, stop_sequences: ['ship'] });
      expect(stopped).toMatchObject({ stop_reason: 'stop_sequence', stop_sequence: 'ship' });
      expect(textOf(stopped)).toBe('The notes say: ');
      const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
      expect(steps.map((s) => s.finishReason)).toEqual(['length', 'stop']);
      expect(tokenizer.decode(steps[0]!.responseIds)).toBe(textOf(cut));
      expect(steps[1]!.metadata).toMatchObject({ stop: ['ship'] });
    }
  });

  it('the fixed base_url: the trajectory in X-Stepwise-Trajectory, the model prefix, or a session from metadata.user_id', async () => {
    const server = await serve();
    const t = await init(server);
    const fixed = (headers: Record<string, string> = {}) =>
      new Anthropic({ baseURL: server.url, apiKey: 'unused', maxRetries: 0, defaultHeaders: headers });
    const ask = { max_tokens: 32, messages: [{ role: 'user' as const, content: 'hi' }] };
    await fixed({ 'X-Stepwise-Trajectory': t.trajectory_uid }).messages.create({ model: 'm', ...ask });
    await fixed().messages.create({ model: `${t.trajectory_uid}__claude`, ...ask });
    const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
    expect(steps).toHaveLength(2);
    expect(steps[1]!.metadata).toMatchObject({ model: 'claude' });

    const session = fixed({ 'X-Stepwise-Session': 'auto' });
    const user = 'user_abc_account_def_session_0f9e';
    await session.messages.create({ model: 'm', ...ask, metadata: { user_id: user } });
    const stream = session.messages.stream({ model: 'm', ...ask, metadata: { user_id: user } });
    expect((await stream.finalMessage()).stop_reason).toBe('end_turn');
    const page = await server.pool.listTrajectories({ channel: 'online', limit: 10, offset: 0 });
    const opened = page.items.filter((x) => x.metadata.session_key === user);
    expect(opened).toHaveLength(1);
    expect(await server.pool.getTrajectorySteps(opened[0]!.id)).toHaveLength(2);

    // No trajectory named: Anthropic's 400, naming the model field's other use.
    const err = await fixed()
      .messages.create({ model: 'm', ...ask })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Anthropic.BadRequestError);
    expect((err as APIError).error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error', message: expect.stringMatching(/^no trajectory named/) },
    });
  });

  it('takes the key from x-api-key as the SDK sends it; refusals are the SDK’s typed errors', async () => {
    const server = await serve({ apiKeys: [`${AGENT_KEY}:agent`, `${TRAINER_KEY}:trainer`] });
    const t = await init(server, AGENT_KEY);
    const ask = { model: 'm', max_tokens: 16, messages: [{ role: 'user' as const, content: 'hi' }] };
    // As Claude Code calls: `?beta=true` and an anthropic-beta header.
    const answer = await anthropic(t, { apiKey: AGENT_KEY }).messages.create(ask, {
      query: { beta: 'true' },
      headers: { 'anthropic-beta': 'interleaved-thinking-2025-05-14' },
    });
    expect(answer.stop_reason).toBe('end_turn');
    const refused = async (apiKey: string) =>
      anthropic(t, { apiKey })
        .messages.create(ask)
        .catch((e: unknown) => e);
    const wrong = await refused('nope-0123456789abcdef');
    expect(wrong).toBeInstanceOf(Anthropic.AuthenticationError);
    expect((wrong as APIError).type).toBe('authentication_error');
    const trainer = await refused(TRAINER_KEY);
    expect(trainer).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect((trainer as APIError).type).toBe('permission_error');
    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toHaveLength(1);
  });

  it('refused calls: Anthropic errors naming the field, typed by the SDK, and nothing stored', async () => {
    const server = await serve();
    const t = await init(server);
    const client = anthropic(t);
    const user = { role: 'user' as const, content: 'hi' };
    const cases: [string, Record<string, unknown>, string][] = [
      ['no max_tokens', { model: 'm', messages: [user] }, 'max_tokens'],
      ['no messages', { model: 'm', max_tokens: 8, messages: [] }, 'messages'],
      [
        'an image',
        {
          model: 'm',
          max_tokens: 8,
          messages: [
            {
              role: 'user',
              content: [{ type: 'image', source: { type: 'url', url: 'https://example.com/a.png' } }],
            },
          ],
        },
        'messages.0.content.0.type',
      ],
      [
        'a server tool',
        {
          model: 'm',
          max_tokens: 8,
          messages: [user],
          tools: [{ type: 'web_search_20250305', name: 'web_search' }],
        },
        'tools.0.type',
      ],
      [
        'a tool_use without input',
        {
          model: 'm',
          max_tokens: 8,
          messages: [user, { role: 'assistant', content: [{ type: 'tool_use', id: 'toolu_1', name: 'f' }] }],
        },
        'messages.1.content.0.input',
      ],
      [
        'a bad tool_choice',
        { model: 'm', max_tokens: 8, messages: [user], tool_choice: { type: 'some' } },
        'tool_choice.type',
      ],
      [
        'a temperature that is text',
        { model: 'm', max_tokens: 8, messages: [user], temperature: 'hot' },
        'temperature',
      ],
    ];
    for (const [name, body, field] of cases) {
      const err = await client.messages.create(body as never).catch((e: unknown) => e);
      expect(err, name).toBeInstanceOf(Anthropic.BadRequestError);
      expect((err as APIError).error, name).toMatchObject({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: expect.stringMatching(new RegExp(`^${field.replaceAll('.', '\\.')}: `)),
        },
      });
    }
    const malformed = await fetch(`${t.base_url}/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: '{"model":',
    });
    expect(malformed.status).toBe(400);
    expect(await malformed.json()).toEqual({
      type: 'error',
      error: { type: 'invalid_request_error', message: expect.stringMatching(/^body: malformed JSON/) },
      request_id: null,
    });

    const unknown = await anthropic({ ...t, base_url: `${server.url}/${'0'.repeat(32)}/g/v1` })
      .messages.create({ model: 'm', max_tokens: 8, messages: [user] })
      .catch((e: unknown) => e);
    expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
    expect((unknown as APIError).type).toBe('not_found_error');

    expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    expect(await server.pool.events({ after: 0, limit: 10, types: ['call_failed'] })).toEqual([]);

    await complete(server, t);
    const closed = await client.messages
      .create({ model: 'm', max_tokens: 8, messages: [user] })
      .catch((e: unknown) => e);
    expect(closed).toBeInstanceOf(Anthropic.ConflictError);
    expect((closed as APIError).error).toMatchObject({
      type: 'error',
      error: { type: 'invalid_request_error' },
    });
  });

  it('a step that cannot be stored withholds the answer: a 503, or an error event in the stream', async () => {
    const server = await serve();
    const t = await init(server);
    const client = anthropic(t);
    const ask = { model: 'm', max_tokens: 16, messages: [{ role: 'user' as const, content: 'hi' }] };
    vi.spyOn(server.pool, 'submitSteps').mockRejectedValue(new Error('disk full'));
    const whole = await client.messages.create(ask).catch((e: unknown) => e);
    expect(whole).toBeInstanceOf(Anthropic.APIError);
    expect((whole as APIError).status).toBe(503);
    expect((whole as APIError).type).toBe('api_error');
    const seen: string[] = [];
    const streamed = await (async () => {
      for await (const event of await client.messages.create({ ...ask, stream: true })) seen.push(event.type);
    })().catch((e: unknown) => e);
    expect(streamed).toBeInstanceOf(Anthropic.APIError);
    expect((streamed as APIError).message).toMatch(/could not be stored/);
    expect(seen).not.toContain('message_delta');
    expect(seen).not.toContain('message_stop');
  });
});
