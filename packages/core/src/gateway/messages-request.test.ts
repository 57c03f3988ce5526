import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/index.js';
import { chatRequestOf } from './messages-request.js';
import { REPORTED_ERROR, toolResultsFor } from './tool-results.js';

/** The field a refused request names. */
function fieldOf(body: unknown): string | undefined {
  try {
    chatRequestOf(body);
  } catch (error) {
    expect(error).toBeInstanceOf(ValidationError);
    return (error as ValidationError).field;
  }
  return undefined;
}

const base = { model: 'claude-x', max_tokens: 100 };

describe('chatRequestOf: a Messages API request as the chat request the gateway forwards', () => {
  it('translates the turns: system, text blocks, tool_use and tool_result in block order', () => {
    const chat = chatRequestOf({
      ...base,
      system: [
        { type: 'text', text: 'Be brief.', cache_control: { type: 'ephemeral' } },
        { type: 'text', text: 'Use tools.' },
      ],
      messages: [
        { role: 'user', content: [{ type: 'text', text: 'Read a and b.' }] },
        {
          role: 'assistant',
          content: [
            { type: 'thinking', thinking: 'hmm', signature: 'sig' },
            { type: 'text', text: 'Reading.' },
            { type: 'tool_use', id: 'toolu_call_1', name: 'read', input: { path: 'a', n: [1] } },
            { type: 'tool_use', id: 'other_2', name: 'read', input: {} },
          ],
        },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'toolu_call_1', content: 'A' },
            { type: 'text', text: 'Between.' },
            {
              type: 'tool_result',
              tool_use_id: 'other_2',
              content: [
                { type: 'text', text: 'B1' },
                { type: 'text', text: 'B2' },
              ],
              is_error: true,
            },
            { type: 'text', text: 'And?' },
          ],
        },
      ],
    });
    expect(chat.messages).toEqual([
      {
        role: 'system',
        content: [
          { type: 'text', text: 'Be brief.' },
          { type: 'text', text: 'Use tools.' },
        ],
      },
      { role: 'user', content: 'Read a and b.' },
      {
        role: 'assistant',
        content: 'Reading.',
        tool_calls: [
          { id: 'call_1', type: 'function', function: { name: 'read', arguments: '{"path":"a","n":[1]}' } },
          { id: 'other_2', type: 'function', function: { name: 'read', arguments: '{}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'A' },
      { role: 'user', content: 'Between.' },
      {
        role: 'tool',
        tool_call_id: 'other_2',
        content: [
          { type: 'text', text: 'B1' },
          { type: 'text', text: 'B2' },
        ],
        [REPORTED_ERROR]: true,
      },
      { role: 'user', content: 'And?' },
    ]);
    const messages = chat.messages as Record<string | symbol, unknown>[];
    // is_error travels beside the message, out of its JSON: the engine and the store never see it.
    expect(JSON.parse(JSON.stringify(messages[5]))).toEqual({
      role: 'tool',
      tool_call_id: 'other_2',
      content: [
        { type: 'text', text: 'B1' },
        { type: 'text', text: 'B2' },
      ],
    });
    expect(
      toolResultsFor(messages, [
        { id: 'call_1', name: 'read' },
        { id: 'other_2', name: 'read' },
      ]),
    ).toEqual([
      { tool_call_id: 'call_1', name: 'read', content: 'A', error: false },
      { tool_call_id: 'other_2', name: 'read', content: 'B1B2', error: true, error_type: 'error' },
    ]);
  });

  it('leaves out deferred tools, which the model does not see (Claude Code sends a placeholder one)', () => {
    const placeholder = {
      name: 'DeferredToolPlaceholder',
      description: 'Never call this tool.',
      input_schema: { type: 'object', properties: {} },
      defer_loading: true,
    };
    const bash = {
      name: 'Bash',
      input_schema: { type: 'object', properties: { command: { type: 'string' } } },
    };
    const user = [{ role: 'user', content: 'hi' }];
    expect(chatRequestOf({ ...base, messages: user, tools: [bash, placeholder] }).tools).toEqual([
      { type: 'function', function: { name: 'Bash', parameters: bash.input_schema } },
    ]);
    expect(chatRequestOf({ ...base, messages: user, tools: [placeholder] })).not.toHaveProperty('tools');
    // defer_loading: false is an ordinary tool.
    expect(
      chatRequestOf({ ...base, messages: user, tools: [{ ...bash, defer_loading: false }] }).tools,
    ).toEqual([{ type: 'function', function: { name: 'Bash', parameters: bash.input_schema } }]);
  });

  it('translates tools, tool_choice, sampling, stop sequences, stream and metadata.user_id', () => {
    const tool = {
      name: 'read',
      description: 'Read a file',
      input_schema: { type: 'object', properties: {} },
    };
    const chat = chatRequestOf({
      ...base,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [tool, { type: 'custom', name: 'write', input_schema: { type: 'object' } }],
      tool_choice: { type: 'tool', name: 'read', disable_parallel_tool_use: true },
      temperature: 0.5,
      top_p: 0.9,
      top_k: 20,
      stop_sequences: ['END'],
      stream: true,
      metadata: { user_id: 'user_1_session_2' },
      thinking: { type: 'enabled', budget_tokens: 1024 },
      service_tier: 'auto',
    });
    expect(chat).toEqual({
      model: 'claude-x',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'hi' }],
      tools: [
        {
          type: 'function',
          function: { name: 'read', description: 'Read a file', parameters: tool.input_schema },
        },
        { type: 'function', function: { name: 'write', parameters: { type: 'object' } } },
      ],
      tool_choice: { type: 'function', function: { name: 'read' } },
      parallel_tool_calls: false,
      temperature: 0.5,
      top_p: 0.9,
      top_k: 20,
      stop: ['END'],
      stream: true,
      stream_options: { include_usage: true },
      user: 'user_1_session_2',
    });
    const choice = (c: unknown) =>
      chatRequestOf({ ...base, messages: [{ role: 'user', content: 'x' }], tools: [tool], tool_choice: c })
        .tool_choice;
    expect([{ type: 'auto' }, { type: 'any' }, { type: 'none' }].map(choice)).toEqual([
      'auto',
      'required',
      'none',
    ]);
  });

  it('continues a last assistant turn (a prefill) instead of answering it', () => {
    const chat = chatRequestOf({
      ...base,
      messages: [
        { role: 'user', content: 'Count to 3.' },
        { role: 'assistant', content: '1, 2' },
      ],
    });
    expect(chat).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
    expect(chatRequestOf({ ...base, messages: [{ role: 'user', content: 'x' }] })).not.toHaveProperty(
      'continue_final_message',
    );
  });

  it('refuses what it cannot serve, naming the field', () => {
    const user = (content: unknown) => ({ ...base, messages: [{ role: 'user', content }] });
    expect(fieldOf({ model: 'm', messages: [{ role: 'user', content: 'x' }] })).toBe('max_tokens');
    expect(fieldOf({ ...base, max_tokens: 0, messages: [{ role: 'user', content: 'x' }] })).toBe(
      'max_tokens',
    );
    expect(fieldOf({ ...base, messages: [{ role: 'tool', content: 'x' }] })).toBe('messages.0.role');
    expect(fieldOf(user([{ type: 'image', source: {} }]))).toBe('messages.0.content.0.type');
    expect(fieldOf(user([{ type: 'text' }]))).toBe('messages.0.content.0.text');
    expect(fieldOf(user([{ type: 'tool_use', id: 'a', name: 'f', input: {} }]))).toBe(
      'messages.0.content.0.type',
    );
    expect(fieldOf(user([{ type: 'tool_result', content: 'x' }]))).toBe('messages.0.content.0.tool_use_id');
    expect(fieldOf(user([{ type: 'tool_result', tool_use_id: 'a', is_error: 'yes' }]))).toBe(
      'messages.0.content.0.is_error',
    );
    expect(
      fieldOf(user([{ type: 'tool_result', tool_use_id: 'a', content: [{ type: 'document', source: {} }] }])),
    ).toBe('messages.0.content.0.content.0.type');
    expect(
      fieldOf({
        ...base,
        messages: [{ role: 'assistant', content: [{ type: 'tool_use', id: 'a', name: 'f', input: [] }] }],
      }),
    ).toBe('messages.0.content.0.input');
    expect(fieldOf({ ...user('x'), tools: [{ type: 'bash_20250124', name: 'bash' }] })).toBe('tools.0.type');
    expect(fieldOf({ ...user('x'), tools: [{ name: 'f' }] })).toBe('tools.0.input_schema');
    expect(fieldOf({ ...user('x'), tool_choice: { type: 'tool' } })).toBe('tool_choice.name');
    expect(fieldOf({ ...user('x'), top_k: 1.5 })).toBe('top_k');
    expect(fieldOf({ ...user('x'), stream: 'yes' })).toBe('stream');
  });
});
