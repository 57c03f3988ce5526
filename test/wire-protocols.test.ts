import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { type OpenedTrajectory, openTrajectory } from './support/http.js';
import { testServers } from './support/test-servers.js';

/*
 * The chat and completions wire schemas against what the protocol's own clients send: the official
 * openai client over real HTTP on loopback, the built-in sim as the engine (it renders with Qwen3's
 * template), a real SQLite file. Each idiom is checked by what reached the engine: the stored step's
 * prompt ids, decoded, against the Qwen3 text written out by hand.
 */

const tokenizer = loadQwen3Tokenizer();
const { serve } = testServers('wire', { engines: ['sim'] });

type Init = OpenedTrajectory;

async function open(): Promise<{ server: RunningServer; t: Init; client: OpenAI }> {
  const server = await serve();
  const t = await openTrajectory(server.url);
  return { server, t, client: new OpenAI({ baseURL: t.base_url, apiKey: 'none', maxRetries: 0 }) };
}

async function onlyStep(server: RunningServer, t: Init): Promise<Step> {
  const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
  expect(steps).toHaveLength(1);
  return steps[0]!;
}

const prompt = (step: Step) => tokenizer.decode(step.promptIds);

/** A call with a body the SDK's types do not know (Python's dicts), sent as it is. */
type Loose = OpenAI.Chat.ChatCompletionCreateParamsNonStreaming;

const READ_CALL = {
  id: 'call_1',
  type: 'function' as const,
  function: { name: 'read_file', arguments: '{"path": "a.txt"}' },
};

/** What Qwen3's template makes of: user asks, assistant calls read_file with no text, tool says hello. */
const TOOL_TURN =
  '<|im_start|>user\nWhat is in a.txt?<|im_end|>\n' +
  '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>\n' +
  '<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n' +
  '<|im_start|>assistant\n';

describe('chat messages in every form the spec allows reach the template', () => {
  it("an assistant turn with tool_calls and no content key (Python's model_dump(exclude_none=True))", async () => {
    const { server, t, client } = await open();
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'user', content: 'What is in a.txt?' },
        { role: 'assistant', tool_calls: [READ_CALL] },
        { role: 'tool', tool_call_id: 'call_1', content: 'hello' },
      ],
    });
    const step = await onlyStep(server, t);
    expect(prompt(step)).toBe(TOOL_TURN);
    // Stored as the agent sent it: no content key was made up.
    expect(step.messages![1]).toEqual({ role: 'assistant', tool_calls: [READ_CALL] });
  });

  it('the same turn as model_dump() sends it: content, refusal, audio, function_call null; tool content as parts', async () => {
    const { server, t, client } = await open();
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'What is in a.txt?' }], name: 'ann' },
        {
          role: 'assistant',
          content: null,
          refusal: null,
          audio: null,
          function_call: null,
          annotations: [],
          tool_calls: [READ_CALL],
        },
        { role: 'tool', tool_call_id: 'call_1', content: [{ type: 'text', text: 'hello' }] },
      ],
    } as Loose);
    expect(prompt(await onlyStep(server, t))).toBe(TOOL_TURN);
  });

  it('a developer message is rendered as the system message (Qwen3 has no developer role)', async () => {
    const { server, t, client } = await open();
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'developer', content: 'Answer in one word.' },
        { role: 'user', content: 'Hi' },
      ],
    });
    const step = await onlyStep(server, t);
    expect(prompt(step)).toBe(
      '<|im_start|>system\nAnswer in one word.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    );
    // The step holds what the engine was sent.
    expect(step.messages![0]).toEqual({ role: 'system', content: 'Answer in one word.' });
  });

  it('a developer message as text parts, and an assistant refusal part, render as text', async () => {
    const { server, t, client } = await open();
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'developer', content: [{ type: 'text', text: 'Be kind.' }] },
        { role: 'user', content: 'Do the bad thing' },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'I will not.' }] },
        { role: 'user', content: 'Fine' },
      ],
    });
    expect(prompt(await onlyStep(server, t))).toBe(
      '<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>user\nDo the bad thing<|im_end|>\n' +
        '<|im_start|>assistant\nI will not.<|im_end|>\n<|im_start|>user\nFine<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('a legacy function_call and its function message render as a tool call and its result', async () => {
    const { server, t, client } = await open();
    await client.chat.completions.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'user', content: 'What is in a.txt?' },
        {
          role: 'assistant',
          content: null,
          function_call: { name: 'read_file', arguments: '{"path": "a.txt"}' },
        },
        { role: 'function', name: 'read_file', content: 'hello' },
      ],
    });
    expect(prompt(await onlyStep(server, t))).toBe(TOOL_TURN);
  });
});

describe('chat request fields are accepted and reach the engine', () => {
  it('max_completion_tokens bounds the generation, stop as a string, seed, user, metadata, store, reasoning_effort', async () => {
    const { server, t, client } = await open();
    const answer = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Tell me a long story about the sea.' }],
      max_completion_tokens: 3,
      stop: '\n\n',
      seed: 7,
      user: 'u-1',
      metadata: { run: 'r1' },
      store: false,
      reasoning_effort: 'low',
      parallel_tool_calls: true,
    });
    const step = await onlyStep(server, t);
    expect(step.responseIds.length).toBeLessThanOrEqual(3);
    expect(answer.choices[0]!.finish_reason).toBe('length');
    expect(step.metadata).toMatchObject({ max_completion_tokens: 3, stop: '\n\n', seed: 7 });
  });

  it('stop as a list, logprobs with top_logprobs', async () => {
    const { client } = await open();
    const answer = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 4,
      stop: ['\n\n', 'END'],
      logprobs: true,
      top_logprobs: 2,
    });
    const first = answer.choices[0]!.logprobs!.content![0]!;
    expect(first.top_logprobs).toHaveLength(2);
  });

  it('a named tool_choice reaches the engine and the step; response_format json_object gives JSON', async () => {
    const { server, t, client } = await open();
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'read_file',
          parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
        },
      },
    ];
    const choice = { type: 'function' as const, function: { name: 'read_file' } };
    await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 16,
      tools,
      tool_choice: choice,
    });
    const step = await onlyStep(server, t);
    expect(step.metadata.tool_choice).toEqual(choice);
    expect(step.tools).toEqual(tools);
    // The sim checks a named choice against the tools as vLLM does: an unknown name is its 400.
    const unknown = await client.chat.completions
      .create({
        model: 'm',
        messages: [{ role: 'user', content: 'Hi' }],
        tools,
        tool_choice: { type: 'function', function: { name: 'write_file' } },
      })
      .then(
        () => null,
        (e: unknown) => e,
      );
    expect(unknown).toBeInstanceOf(OpenAI.BadRequestError);
    const json = await client.chat.completions.create({
      model: 'm',
      messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 64,
      response_format: { type: 'json_object' },
    });
    expect(() => JSON.parse(json.choices[0]!.message.content!)).not.toThrow();
  });

  it('a stream with stream_options.include_usage ends with the usage chunk, and stores the step', async () => {
    const { server, t, client } = await open();
    const stream = await client.chat.completions.create({
      model: 'm',
      messages: [
        { role: 'developer', content: 'Be brief.' },
        { role: 'user', content: 'Hi' },
      ],
      max_tokens: 8,
      stream: true,
      stream_options: { include_usage: true },
    });
    let usage: OpenAI.CompletionUsage | null | undefined = null;
    for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
    const step = await onlyStep(server, t);
    expect(usage?.completion_tokens).toBe(step.responseIds.length);
    expect(prompt(step)).toMatch(/^<\|im_start\|>system\nBe brief\.<\|im_end\|>\n/);
  });
});

describe('what the gateway cannot serve is a 400 naming the field, and nothing is stored', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['n above 1', { n: 2 }, 'n'],
    ['a custom tool', { tools: [{ type: 'custom', custom: { name: 'x' } }] }, 'tools.0.type'],
    ['a role the spec does not have', { messages: [{ role: 'robot', content: 'hi' }] }, 'messages.0.role'],
    [
      'a tool call id that is not a string',
      { messages: [{ role: 'tool', content: 'x', tool_call_id: 5 }] },
      'messages.0.tool_call_id',
    ],
    [
      'an image part in an assistant turn',
      { messages: [{ role: 'assistant', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
      'messages.0.content',
    ],
    ['stream_options that is not an object', { stream_options: 'yes' }, 'stream_options'],
    ['a tool_choice of an unknown kind', { tool_choice: 'sometimes' }, 'tool_choice'],
  ];
  for (const [what, extra, field] of cases) {
    it(what, async () => {
      const { server, t, client } = await open();
      const error = await client.chat.completions
        .create({ model: 'm', messages: [{ role: 'user', content: 'hi' }], ...extra } as Loose)
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe(field);
      expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    });
  }
});

describe('completions', () => {
  it('a prompt given as a batch of one is served; a batch of two is a 400 naming prompt', async () => {
    const { server, t, client } = await open();
    await client.completions.create({ model: 'm', prompt: ['Once upon a time'], max_tokens: 4 });
    expect(prompt(await onlyStep(server, t))).toBe('Once upon a time');
    const error = await client.completions.create({ model: 'm', prompt: ['a', 'b'], max_tokens: 4 }).then(
      () => null,
      (e: unknown) => e,
    );
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).param).toBe('prompt');
  });
});
