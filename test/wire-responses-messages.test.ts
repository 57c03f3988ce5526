import Anthropic, { type APIError } from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { describe, expect, it } from 'vitest';
import type { Step } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { type OpenedTrajectory, openTrajectory } from './support/http.js';
import { testServers } from './support/test-servers.js';

/*
 * The Responses and Messages wire schemas (packages/core/src/gateway/wire/openai-responses.ts,
 * anthropic-messages.ts) field by field against what the protocols' own clients send: the official
 * openai and @anthropic-ai/sdk clients over real HTTP on loopback, the sim as the engine (Qwen3's
 * template), a real SQLite file. Each accepted form is checked by the prompt the engine rendered
 * (the stored step's ids, decoded); each refusal by the field its 400 names, with nothing stored.
 */

const tokenizer = loadQwen3Tokenizer();
const { serve } = testServers('wire-rm', { engines: ['sim'] });

type Init = OpenedTrajectory;

async function open(): Promise<{ server: RunningServer; t: Init; openai: OpenAI; anthropic: Anthropic }> {
  const server = await serve();
  const t = await openTrajectory(server.url);
  return {
    server,
    t,
    openai: new OpenAI({ baseURL: t.base_url, apiKey: 'none', maxRetries: 0 }),
    anthropic: new Anthropic({ baseURL: t.base_url.replace(/\/v1$/, ''), apiKey: 'none', maxRetries: 0 }),
  };
}

async function onlyStep(server: RunningServer, t: Init): Promise<Step> {
  const steps = await server.pool.getTrajectorySteps(t.trajectory_uid);
  expect(steps).toHaveLength(1);
  return steps[0]!;
}

const prompt = (step: Step) => tokenizer.decode(step.promptIds);

/** Qwen3's text of: user asks, assistant calls read_file with no text, the tool answers hello. */
const TOOL_TURN =
  '<|im_start|>user\nWhat is in a.txt?<|im_end|>\n' +
  '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "a.txt"}}\n</tool_call><|im_end|>\n' +
  '<|im_start|>user\n<tool_response>\nhello\n</tool_response><|im_end|>\n' +
  '<|im_start|>assistant\n';

/** Bodies the SDKs' types do not know (other versions of the spec, Python's dicts), sent as they are. */
type LooseResponses = OpenAI.Responses.ResponseCreateParamsNonStreaming;
type LooseMessages = Anthropic.MessageCreateParamsNonStreaming;

const READ_TOOL = {
  name: 'read_file',
  parameters: { type: 'object', properties: { path: { type: 'string' } }, required: ['path'] },
};

describe('Responses API: input items in every form the spec allows reach the template', () => {
  it('a function_call with no assistant message before it (a content-less turn), and its output', async () => {
    const { server, t, openai } = await open();
    await openai.responses.create({
      model: 'm',
      max_output_tokens: 8,
      input: [
        { role: 'user', content: 'What is in a.txt?' },
        { type: 'function_call', call_id: 'call_1', name: 'read_file', arguments: '{"path": "a.txt"}' },
        { type: 'function_call_output', call_id: 'call_1', output: 'hello' },
      ],
    });
    const step = await onlyStep(server, t);
    expect(prompt(step)).toBe(TOOL_TURN);
    expect(step.messages![1]).toMatchObject({
      role: 'assistant',
      content: '',
      tool_calls: [{ id: 'call_1' }],
    });
  });

  it('an output message sent back as the API answered it (id, status, annotations), and output as input_text parts', async () => {
    const { server, t, openai } = await open();
    await openai.responses.create({
      model: 'm',
      max_output_tokens: 8,
      input: [
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'What is in a.txt?' }] },
        {
          type: 'message',
          id: 'msg_1',
          status: 'completed',
          role: 'assistant',
          content: [{ type: 'output_text', text: '', annotations: [], logprobs: [] }],
        },
        {
          type: 'function_call',
          id: 'fc_1',
          status: 'completed',
          call_id: 'call_1',
          name: 'read_file',
          arguments: '{"path": "a.txt"}',
        },
        {
          type: 'function_call_output',
          call_id: 'call_1',
          output: [
            { type: 'input_text', text: 'hel' },
            { type: 'input_text', text: 'lo' },
          ],
        },
      ],
    } as LooseResponses);
    expect(prompt(await onlyStep(server, t))).toBe(TOOL_TURN);
  });

  it('instructions, a developer message as parts, a refusal part; a reasoning item’s text is the next turn’s reasoning', async () => {
    const { server, t, openai } = await open();
    await openai.responses.create({
      model: 'm',
      max_output_tokens: 8,
      instructions: 'Be kind.',
      input: [
        { role: 'developer', content: [{ type: 'input_text', text: 'Answer briefly.' }] },
        { role: 'user', content: 'Do the bad thing' },
        {
          type: 'reasoning',
          id: 'rs_1',
          summary: [{ type: 'summary_text', text: 'a summary' }],
          content: [{ type: 'reasoning_text', text: 'No.' }],
          encrypted_content: null,
        },
        { role: 'assistant', content: [{ type: 'refusal', refusal: 'I will not.' }] },
        { role: 'user', content: 'Fine' },
      ],
    } as LooseResponses);
    const step = await onlyStep(server, t);
    expect(prompt(step)).toBe(
      '<|im_start|>system\nBe kind.<|im_end|>\n<|im_start|>system\nAnswer briefly.<|im_end|>\n' +
        '<|im_start|>user\nDo the bad thing<|im_end|>\n<|im_start|>assistant\nI will not.<|im_end|>\n' +
        '<|im_start|>user\nFine<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(step.messages![3]).toMatchObject({ role: 'assistant', reasoning_content: 'No.' });
  });
});

describe('Responses API: every other request field of the spec is accepted', () => {
  it('the fields that change nothing here, beside those that are served', async () => {
    const { server, t, openai } = await open();
    const answer = await openai.responses.create({
      model: 'm',
      input: 'Give me JSON.',
      max_output_tokens: 64,
      temperature: 0.5,
      top_p: 0.9,
      parallel_tool_calls: false,
      tools: [{ type: 'function', strict: false, ...READ_TOOL }],
      tool_choice: 'none',
      text: {
        format: { type: 'json_schema', name: 'answer', schema: { type: 'object' }, strict: true },
        verbosity: 'low',
      },
      metadata: { run: 'r1' },
      store: false,
      include: ['reasoning.encrypted_content'],
      reasoning: { effort: 'low', summary: 'auto' },
      truncation: 'auto',
      prompt_cache_key: 'k',
      prompt_cache_retention: '24h',
      safety_identifier: 'user-hash',
      service_tier: 'auto',
      user: 'u-1',
      background: false,
      top_logprobs: 0,
      max_tool_calls: 4,
      conversation: null,
      prompt: null,
    } as LooseResponses);
    const step = await onlyStep(server, t);
    expect(() => JSON.parse(answer.output_text)).not.toThrow();
    expect(step.metadata).toMatchObject({ temperature: 0.5, top_p: 0.9, tool_choice: 'none' });
    // The spec's fields with no chat counterpart are not passed on to the engine.
    expect(step.metadata).not.toHaveProperty('prompt_cache_key');
    expect(step.metadata).not.toHaveProperty('truncation');
    expect(step.tools).toEqual([{ type: 'function', function: { ...READ_TOOL, strict: false } }]);
  });

  it('stream with stream_options; a named function tool_choice', async () => {
    const { server, t, openai } = await open();
    const stream = await openai.responses.create({
      model: 'm',
      input: 'Read a.txt',
      max_output_tokens: 32,
      tools: [{ type: 'function', strict: null, ...READ_TOOL }],
      tool_choice: { type: 'function', name: 'read_file' },
      stream: true,
      stream_options: { include_obfuscation: false },
    });
    let done: OpenAI.Responses.Response | undefined;
    for await (const event of stream) if (event.type === 'response.completed') done = event.response;
    expect(done?.status).toBe('completed');
    expect((await onlyStep(server, t)).metadata.tool_choice).toEqual({
      type: 'function',
      function: { name: 'read_file' },
    });
  });
});

describe('Responses API: what the gateway cannot serve is a 400 naming the field, and nothing is stored', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['n above 1 (a chat extra)', { n: 2 }, 'n'],
    ['background mode', { background: true }, 'background'],
    ['a conversation object', { conversation: { id: 'conv_1' } }, 'conversation'],
    ['a stored prompt', { prompt: { id: 'pmpt_1' } }, 'prompt'],
    ['top log-probs', { top_logprobs: 3 }, 'top_logprobs'],
    ['a chat body', { messages: [{ role: 'user', content: 'hi' }] }, 'messages'],
    ['a hosted tool', { tools: [{ type: 'file_search', vector_store_ids: ['vs'] }] }, 'tools.0.type'],
    ['a custom tool', { tools: [{ type: 'custom', name: 'x' }] }, 'tools.0.type'],
    [
      'an allowed_tools choice',
      { tool_choice: { type: 'allowed_tools', mode: 'auto', tools: [] } },
      'tool_choice',
    ],
    ['an item reference', { input: [{ type: 'item_reference', id: 'msg_1' }] }, 'input.0.type'],
    ['a compaction item', { input: [{ type: 'compaction', encrypted_content: 'x' }] }, 'input.0.type'],
    [
      'a web search call item',
      { input: [{ type: 'web_search_call', id: 'ws', status: 'completed' }] },
      'input.0.type',
    ],
    [
      'an image in a user message',
      { input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'https://x/a.png' }] }] },
      'input.0.content.0.type',
    ],
    [
      'a file in a function output',
      {
        input: [
          { type: 'function_call_output', call_id: 'c', output: [{ type: 'input_file', file_id: 'f' }] },
        ],
      },
      'input.0.output.0.type',
    ],
    [
      'a function call without arguments',
      { input: [{ type: 'function_call', call_id: 'c', name: 'f' }] },
      'input.0.arguments',
    ],
    ['a truncation the spec does not have', { truncation: 'sometimes' }, 'truncation'],
    ['a text format the spec does not have', { text: { format: { type: 'xml' } } }, 'text.format.type'],
    ['include that is not a list', { include: 'all' }, 'include'],
  ];
  for (const [what, extra, field] of cases) {
    it(what, async () => {
      const { server, t, openai } = await open();
      const error = await openai.responses
        .create({ model: 'm', input: 'hi', ...extra } as LooseResponses)
        .then(
          () => null,
          (e: unknown) => e,
        );
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      const e = error as InstanceType<typeof OpenAI.BadRequestError>;
      expect(e.param).toBe(field);
      expect(e.message).toMatch(new RegExp(`${field.replaceAll('.', '\\.')}: `));
      expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    });
  }
});

const READ_INPUT_SCHEMA = { type: 'object' as const, properties: { path: { type: 'string' } } };

describe('Messages API: turns in every form the spec allows reach the template', () => {
  it('an assistant turn of tool_use blocks only (no text), and the user turn of its tool_result', async () => {
    const { server, t, anthropic } = await open();
    await anthropic.messages.create({
      model: 'm',
      max_tokens: 8,
      messages: [
        { role: 'user', content: 'What is in a.txt?' },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'toolu_1', name: 'read_file', input: { path: 'a.txt' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'hello' }] },
      ],
    });
    const step = await onlyStep(server, t);
    expect(prompt(step)).toBe(TOOL_TURN);
    expect(step.messages![1]).toMatchObject({ role: 'assistant', content: null, tool_calls: [{ id: '1' }] });
  });

  it('thinking blocks dropped, tool_result content as text blocks with cache_control, is_error, and none', async () => {
    const { server, t, anthropic } = await open();
    await anthropic.messages.create({
      model: 'm',
      max_tokens: 8,
      system: [{ type: 'text', text: 'Be kind.', cache_control: { type: 'ephemeral' } }],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'What is in a.txt?', cache_control: null }] },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'Read it.', signature: 'sig' },
            { type: 'redacted_thinking', data: 'xyz' },
            { type: 'tool_use', id: 'toolu_1', name: 'read_file', input: { path: 'a.txt' } },
            { type: 'tool_use', id: 'toolu_2', name: 'read_file', input: { path: 'b.txt' } },
          ],
        },
        {
          role: 'user',
          content: [
            {
              type: 'tool_result',
              tool_use_id: 'toolu_1',
              content: [
                { type: 'text', text: 'hel' },
                { type: 'text', text: 'lo' },
              ],
            },
            { type: 'tool_result', tool_use_id: 'toolu_2', is_error: true, content: 'not found' },
          ],
        },
        {
          role: 'assistant',
          content: [{ type: 'tool_use', id: 'toolu_3', name: 'read_file', input: { path: 'c.txt' } }],
        },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_3' }] },
      ],
    } as LooseMessages);
    const step = await onlyStep(server, t);
    const text = prompt(step);
    expect(text.startsWith('<|im_start|>system\nBe kind.<|im_end|>\n')).toBe(true);
    expect(text).not.toContain('Read it.');
    expect(text).toContain('<tool_response>\nhel\nlo\n</tool_response>');
    expect(text).toContain('<tool_response>\nnot found\n</tool_response>');
    expect(text).toContain('<tool_response>\n\n</tool_response>');
    expect(step.messages!.filter((m) => m.role === 'tool')).toHaveLength(3);
  });

  it('a system turn among the messages, and a last assistant turn continued (a prefill)', async () => {
    const { server, t, anthropic } = await open();
    await anthropic.messages.create({
      model: 'm',
      max_tokens: 4,
      messages: [
        { role: 'system', content: [{ type: 'text', text: 'Be brief.' }] },
        { role: 'user', content: 'Hi' },
        { role: 'assistant', content: 'Hello' },
      ],
    } as LooseMessages);
    expect(prompt(await onlyStep(server, t))).toBe(
      // Qwen3's template closes an empty think block before the continued text.
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello',
    );
  });
});

describe('Messages API: every other request field of the spec is accepted', () => {
  it('the fields that change nothing here, beside those that are served', async () => {
    const { server, t, anthropic } = await open();
    const answer = await anthropic.messages.create({
      model: 'm',
      max_tokens: 64,
      messages: [{ role: 'user', content: 'Give me JSON.' }],
      tools: [
        {
          type: 'custom',
          name: 'read_file',
          description: 'reads',
          input_schema: READ_INPUT_SCHEMA,
          strict: true,
          cache_control: { type: 'ephemeral' },
          input_examples: [{ path: 'a.txt' }],
          eager_input_streaming: null,
          allowed_callers: ['direct'],
        },
      ],
      tool_choice: { type: 'none' },
      temperature: 0.5,
      top_p: 0.9,
      top_k: 20,
      stop_sequences: ['END'],
      metadata: { user_id: 'u-1' },
      output_config: { effort: 'low', format: { type: 'json_schema', schema: { type: 'object' } } },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      cache_control: { type: 'ephemeral' },
      service_tier: 'auto',
      speed: 'standard',
      inference_geo: 'us',
      container: null,
    } as LooseMessages);
    const block = answer.content[0];
    expect(block?.type).toBe('text');
    expect(() => JSON.parse((block as Anthropic.TextBlock).text)).not.toThrow();
    const step = await onlyStep(server, t);
    expect(step.metadata).toMatchObject({
      temperature: 0.5,
      top_p: 0.9,
      top_k: 20,
      stop: ['END'],
    });
    expect(step.metadata).not.toHaveProperty('thinking');
    expect(step.tools).toEqual([
      {
        type: 'function',
        function: { name: 'read_file', description: 'reads', parameters: READ_INPUT_SCHEMA, strict: true },
      },
    ]);
  });

  it('tool_choice any with disable_parallel_tool_use, streamed', async () => {
    const { server, t, anthropic } = await open();
    const stream = anthropic.messages.stream({
      model: 'm',
      max_tokens: 32,
      messages: [{ role: 'user', content: 'Read a.txt' }],
      tools: [{ name: 'read_file', input_schema: READ_INPUT_SCHEMA }],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
    });
    const message = await stream.finalMessage();
    expect(message.type).toBe('message');
    expect((await onlyStep(server, t)).metadata).toMatchObject({
      tool_choice: 'required',
      parallel_tool_calls: false,
    });
  });
});

describe('Messages API: what the gateway cannot serve is a 400 naming the field, and nothing is stored', () => {
  const toolUse = { type: 'tool_use', id: 'toolu_1', name: 'f', input: {} };
  const cases: [string, Record<string, unknown>, string][] = [
    ['a code-execution container', { container: 'cntr_1' }, 'container'],
    ['MCP servers', { mcp_servers: [{ type: 'url', url: 'https://x', name: 'x' }] }, 'mcp_servers'],
    [
      'a document block',
      { messages: [{ role: 'user', content: [{ type: 'document', source: {} }] }] },
      'messages.0.content.0.type',
    ],
    [
      'a server tool use block',
      {
        messages: [
          { role: 'user', content: 'hi' },
          {
            role: 'assistant',
            content: [{ type: 'server_tool_use', id: 's', name: 'web_search', input: {} }],
          },
        ],
      },
      'messages.1.content.0.type',
    ],
    [
      'an image in a tool result',
      {
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: [toolUse] },
          {
            role: 'user',
            content: [
              { type: 'tool_result', tool_use_id: 'toolu_1', content: [{ type: 'image', source: {} }] },
            ],
          },
        ],
      },
      'messages.2.content.0.content.0.type',
    ],
    [
      'a tool_use block in a user turn',
      { messages: [{ role: 'user', content: [toolUse] }] },
      'messages.0.content.0.type',
    ],
    [
      'a tool_result block in an assistant turn',
      {
        messages: [
          { role: 'user', content: 'hi' },
          { role: 'assistant', content: [{ type: 'tool_result', tool_use_id: 'toolu_1' }] },
        ],
      },
      'messages.1.content.0.type',
    ],
    ['a server tool', { tools: [{ type: 'bash_20250124', name: 'bash' }] }, 'tools.0.type'],
    ['top_k that is not an integer', { top_k: 1.5 }, 'top_k'],
    [
      'an output format the spec does not have',
      { output_config: { format: { type: 'xml' } } },
      'output_config.format.type',
    ],
    ['thinking that is not an object', { thinking: 'on' }, 'thinking'],
  ];
  for (const [what, extra, field] of cases) {
    it(what, async () => {
      const { server, t, anthropic } = await open();
      const error = await anthropic.messages
        .create({ model: 'm', max_tokens: 8, messages: [{ role: 'user', content: 'hi' }], ...extra } as never)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Anthropic.BadRequestError);
      expect((error as APIError).error).toMatchObject({
        type: 'error',
        error: {
          type: 'invalid_request_error',
          message: expect.stringMatching(new RegExp(`^${field.replaceAll('.', '\\.')}: `)),
        },
      });
      expect(await server.pool.getTrajectorySteps(t.trajectory_uid)).toEqual([]);
    });
  }
});
