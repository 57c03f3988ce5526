import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../domain/index.js';
import { parseChatRequest, templateMessages } from './openai-chat.js';
import { parseCompletionRequest } from './openai-completions.js';

/** The 400 a body gets: the field it names and its message. */
function refusal(parse: (body: unknown) => unknown, body: unknown): { field?: string; message: string } {
  try {
    parse(body);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return { field: (error as ValidationError).field, message: (error as Error).message };
  }
  throw new Error('accepted');
}

const user = { role: 'user', content: 'hi' };

describe('parseChatRequest', () => {
  it("returns the agent's own object, keys in the agent's order", () => {
    const body = { stream: false, messages: [{ content: 'hi', role: 'user' }], model: 'm' };
    const parsed = parseChatRequest(body);
    expect(parsed).toBe(body);
    expect(JSON.stringify(parsed)).toBe(
      '{"stream":false,"messages":[{"content":"hi","role":"user"}],"model":"m"}',
    );
  });

  it('accepts every message form of the spec', () => {
    const call = { id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } };
    const messages = [
      { role: 'developer', content: [{ type: 'text', text: 'rules' }], name: 'ops' },
      { role: 'system', content: 'sys' },
      {
        role: 'user',
        content: [
          { type: 'text', text: 'a' },
          { type: 'image_url', image_url: { url: 'u' } },
        ],
      },
      { role: 'assistant', tool_calls: [call] },
      {
        role: 'assistant',
        content: null,
        refusal: null,
        audio: null,
        function_call: null,
        tool_calls: [call],
      },
      { role: 'assistant', content: [{ type: 'refusal', refusal: 'no' }], refusal: 'no' },
      { role: 'assistant', function_call: { name: 'f', arguments: '{}' } },
      { role: 'function', name: 'f', content: null },
      { role: 'tool', tool_call_id: 'c', content: [{ type: 'text', text: 'out' }] },
      { role: 'assistant', content: 'x', reasoning_content: 'why', audio: { id: 'a1' } },
    ];
    expect(() =>
      parseChatRequest({
        messages,
        stop: 'END',
        max_completion_tokens: 5,
        parallel_tool_calls: false,
        stream_options: { include_usage: true },
        response_format: { type: 'json_schema', json_schema: { name: 's', schema: {} } },
        tool_choice: 'required',
        tools: [{ type: 'function', function: { name: 'f', parameters: {}, strict: true } }],
        logprobs: true,
        top_logprobs: 3,
        seed: 1,
        user: 'u',
        metadata: { k: 'v' },
        store: true,
        reasoning_effort: 'high',
        n: 1,
        service_tier: 'auto',
      }),
    ).not.toThrow();
  });

  it.each([
    [{ messages: [] }, 'messages', /must be a non-empty array/],
    [{ messages: [{ role: 'robot', content: 'x' }] }, 'messages.0.role', /developer/],
    [
      { messages: [user, { role: 'tool', content: 'x', tool_call_id: 5 }] },
      'messages.1.tool_call_id',
      /tool call/,
    ],
    [{ messages: [{ role: 'user' }] }, 'messages.0.content', /string or an array/],
    [
      { messages: [{ role: 'assistant', content: [{ type: 'image_url' }] }] },
      'messages.0.content',
      /text and refusal parts/,
    ],
    [{ messages: [user], n: 2 }, 'n', /n=1/],
    [
      { messages: [user], tools: [{ type: 'custom', custom: { name: 'x' } }] },
      'tools.0.type',
      /function tools/,
    ],
    [{ messages: [user], temperature: 'hot' }, 'temperature', /must be a number/],
    [{ messages: [user], stop: ['a', 1] }, 'stop', /array of strings/],
    [{ messages: [user], logprobs: 2 }, 'logprobs', /boolean/],
    [
      { messages: [user], tool_choice: { type: 'function', function: { name: '' } } },
      'tool_choice.function.name',
      /empty/,
    ],
    [{ messages: [user], metadata: { k: 1 } }, 'metadata.k', /./],
  ])('refuses %j naming %s', (body, field, message) => {
    const got = refusal(parseChatRequest, body);
    expect(got.field).toBe(field);
    expect(got.message).toMatch(message);
  });
});

describe('templateMessages', () => {
  it('leaves messages every template reads as they are (the same array)', () => {
    const messages = [user, { role: 'assistant' as const, content: 'x' }] as const;
    const out = templateMessages(parseChatRequest({ messages }).messages);
    expect(out.rewritten).toBe(false);
  });

  it('makes a developer message a system one', () => {
    const { messages } = parseChatRequest({
      messages: [{ role: 'developer', content: 'be brief', name: 'x' }, user],
    });
    expect(templateMessages(messages)).toEqual({
      messages: [{ role: 'system', content: 'be brief', name: 'x' }, user],
      rewritten: true,
    });
  });

  it('makes a legacy function_call a tool call, and its function answer a tool message paired by id', () => {
    const { messages } = parseChatRequest({
      messages: [
        user,
        { role: 'assistant', content: null, function_call: { name: 'f', arguments: '{"a":1}' } },
        { role: 'function', name: 'f', content: 'done' },
      ],
    });
    expect(templateMessages(messages).messages).toEqual([
      user,
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_fn_1', type: 'function', function: { name: 'f', arguments: '{"a":1}' } }],
      },
      { role: 'tool', name: 'f', content: 'done', tool_call_id: 'call_fn_1' },
    ]);
  });

  it('refuses a turn with both tool_calls and function_call', () => {
    const call = { id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } };
    const { messages } = parseChatRequest({
      messages: [
        user,
        { role: 'assistant', tool_calls: [call], function_call: { name: 'f', arguments: '{}' } },
      ],
    });
    expect(refusal(() => templateMessages(messages), null).field).toBe('messages.1.function_call');
  });
});

describe('parseCompletionRequest', () => {
  it('accepts text, ids, and a batch of one', () => {
    for (const prompt of ['x', [1, 2], ['x'], [[1, 2]]])
      expect(() => parseCompletionRequest({ prompt, logprobs: 2, echo: false, suffix: null })).not.toThrow();
  });

  it.each([
    [{ prompt: ['a', 'b'] }, 'prompt', /one prompt per request/],
    [{ prompt: 3 }, 'prompt', /string or an array of token ids/],
    [{ prompt: 'x', logprobs: true }, 'logprobs', /integer/],
    [{ prompt: 'x', best_of: 2 }, 'best_of', /best_of=1/],
    [{ prompt: 'x', n: 3 }, 'n', /n=1/],
  ])('refuses %j naming %s', (body, field, message) => {
    const got = refusal(parseCompletionRequest, body);
    expect(got.field).toBe(field);
    expect(got.message).toMatch(message);
  });
});
