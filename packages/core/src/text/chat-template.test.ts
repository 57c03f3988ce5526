import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import { type ChatMessageInput, renderChat, tokenizeChat } from './chat-template.js';
import { renderCompletion, renderToolCalls } from './tool-calls.js';

// Expected strings are written out by hand from Qwen3's chat template (tokenizer_config.json).
const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Weather for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const TOOLS_PREAMBLE =
  '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' +
  'You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n';
const TOOLS_POSTAMBLE =
  '\n</tools>\n\nFor each function call, return a json object with function name and arguments within ' +
  '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n' +
  '</tool_call><|im_end|>\n';
const WEATHER_TOOL_JSON =
  '{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", ' +
  '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}';

describe('renderChat', () => {
  it('renders a user turn and the generation prompt', () => {
    expect(renderChat({ messages: [{ role: 'user', content: 'hi' }], addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
    expect(renderChat({ messages: [{ role: 'user', content: 'hi' }] })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n',
    );
  });

  it('pre-fills an empty think block only when thinking is disabled', () => {
    const messages = [{ role: 'user' as const, content: 'hi' }];
    expect(renderChat({ messages, addGenerationPrompt: true, enableThinking: false })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    );
    expect(renderChat({ messages, addGenerationPrompt: true, enableThinking: true })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('renders a system message', () => {
    expect(
      renderChat({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
        ],
      }),
    ).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n');
  });

  it('renders tools into the system prompt, after the system message', () => {
    expect(
      renderChat({
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'hi' },
        ],
        tools: [weatherTool],
      }),
    ).toBe(
      `<|im_start|>system\nBe brief.\n\n${TOOLS_PREAMBLE}${WEATHER_TOOL_JSON}${TOOLS_POSTAMBLE}` +
        '<|im_start|>user\nhi<|im_end|>\n',
    );
  });

  it('opens a system prompt for tools when the chat has none', () => {
    expect(renderChat({ messages: [{ role: 'user', content: 'hi' }], tools: [weatherTool] })).toBe(
      `<|im_start|>system\n${TOOLS_PREAMBLE}${WEATHER_TOOL_JSON}${TOOLS_POSTAMBLE}<|im_start|>user\nhi<|im_end|>\n`,
    );
  });

  it('treats an empty tool list as no tools', () => {
    expect(renderChat({ messages: [{ role: 'user', content: 'hi' }], tools: [] })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n',
    );
  });

  it('keeps the key order of tool definitions as the client sent them', () => {
    const tool = { function: { parameters: {}, name: 'f' }, type: 'function' as const };
    expect(renderChat({ messages: [{ role: 'user', content: 'x' }], tools: [tool] })).toContain(
      '<tools>\n{"function": {"parameters": {}, "name": "f"}, "type": "function"}\n</tools>',
    );
  });

  it('renders assistant tool calls with JSON-string arguments as objects, and tool results as one user turn', () => {
    const messages: ChatMessageInput[] = [
      { role: 'user', content: 'Weather in Paris and Köln?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          {
            id: 'call_1',
            type: 'function',
            function: { name: 'get_weather', arguments: '{"city":"Paris","days":3}' },
          },
          { id: 'call_2', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Köln"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_1', content: 'sunny' },
      { role: 'tool', tool_call_id: 'call_2', content: 'rain' },
    ];
    expect(renderChat({ messages, addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nWeather in Paris and Köln?<|im_end|>\n' +
        '<|im_start|>assistant\n' +
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>\n' +
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Köln"}}\n</tool_call><|im_end|>\n' +
        '<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\nrain\n</tool_response><|im_end|>\n' +
        '<|im_start|>assistant\n',
    );
    // The caller's message is not rewritten.
    expect(messages[1]?.tool_calls?.[0]?.function.arguments).toBe('{"city":"Paris","days":3}');
  });

  it('separates assistant text from its first tool call with a newline', () => {
    const text = renderChat({
      messages: [
        { role: 'user', content: 'q' },
        {
          role: 'assistant',
          content: 'Let me check.',
          tool_calls: [{ type: 'function', function: { name: 'f', arguments: { a: [1, 2], b: null } } }],
        },
        { role: 'tool', content: 'ok' },
      ],
    });
    expect(text).toContain(
      '<|im_start|>assistant\nLet me check.\n<tool_call>\n{"name": "f", "arguments": {"a": [1, 2], "b": null}}\n</tool_call><|im_end|>\n',
    );
  });

  it('pastes arguments that are not a JSON object verbatim, as the template does for strings', () => {
    const text = renderChat({
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: '', tool_calls: [{ function: { name: 'f', arguments: '{"a": 1' } }] },
        { role: 'tool', content: 'err' },
      ],
    });
    expect(text).toContain('<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>');
  });

  it('flattens text parts with newlines and renders null content as empty', () => {
    expect(
      renderChat({
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'first' },
              { type: 'text', text: 'second' },
            ],
          },
          { role: 'assistant', content: null },
          { role: 'user', content: 'again' },
        ],
      }),
    ).toBe(
      '<|im_start|>user\nfirst\nsecond<|im_end|>\n<|im_start|>assistant\n<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n',
    );
  });

  it('keeps reasoning after the last user turn and drops it from earlier turns', () => {
    const text = renderChat({
      messages: [
        { role: 'user', content: 'q1' },
        { role: 'assistant', content: 'a1', reasoning_content: 'r1' },
        { role: 'user', content: 'q2' },
        { role: 'assistant', content: '<think>\nr2\n</think>\n\na2' },
      ],
    });
    expect(text).toBe(
      '<|im_start|>user\nq1<|im_end|>\n<|im_start|>assistant\na1<|im_end|>\n' +
        '<|im_start|>user\nq2<|im_end|>\n<|im_start|>assistant\n<think>\nr2\n</think>\n\na2<|im_end|>\n',
    );
  });

  it('continues the final assistant message as Hugging Face does (continue_final_message)', () => {
    // Expected text: transformers' render_jinja_template(continue_final_message=True) on Qwen3's
    // template, the call behind the ActGuide-RL authors' apply_chat_template_for_generation.
    const messages = [
      { role: 'user' as const, content: 'Which city is the capital of France?' },
      { role: 'assistant' as const, content: 'I have a plan:\n1. search\n' },
    ];
    expect(renderChat({ messages, continueFinalMessage: true })).toBe(
      '<|im_start|>user\nWhich city is the capital of France?<|im_end|>\n' +
        '<|im_start|>assistant\n<think>\n\n</think>\n\nI have a plan:\n1. search\n',
    );
    expect(() => renderChat({ messages: messages.slice(0, 1), continueFinalMessage: true })).toThrow(
      /continue_final_message/,
    );
    expect(() => renderChat({ messages, continueFinalMessage: true, addGenerationPrompt: true })).toThrow(
      /continue_final_message/,
    );
  });

  it('accepts `reasoning` as another name for reasoning_content', () => {
    const text = renderChat({
      messages: [
        { role: 'user', content: 'q' },
        { role: 'assistant', content: 'a', reasoning: 'because' },
      ],
    });
    expect(text).toBe(
      '<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\nbecause\n</think>\n\na<|im_end|>\n',
    );
  });

  it('gives a final assistant turn an empty think block even when it had no reasoning', () => {
    // Qwen3's template quirk: the last assistant turn after the last user query is always rendered thinking.
    expect(
      renderChat({
        messages: [
          { role: 'user', content: 'q' },
          { role: 'assistant', content: 'a' },
        ],
      }),
    ).toBe('<|im_start|>user\nq<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\na<|im_end|>\n');
  });

  it("renders OpenAI's developer role as the system turn, and a tool-calls-only turn without content", () => {
    expect(
      renderChat({
        messages: [
          { role: 'developer', content: 'd' },
          { role: 'user', content: 'q' },
          { role: 'assistant', tool_calls: [{ function: { name: 'f', arguments: '{}' } }] },
        ],
      }),
    ).toBe(
      '<|im_start|>system\nd<|im_end|>\n<|im_start|>user\nq<|im_end|>\n' +
        // The last turn after the user's query gets Qwen3's think block.
        '<|im_start|>assistant\n<think>\n\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>\n',
    );
  });

  it.each([
    [{ messages: [] }, /messages: must contain at least one message/, 'messages'],
    [{ messages: [{ role: 'robot', content: 'x' }] }, /messages\.0\.role: must be one of/, 'messages.0.role'],
    [
      { messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'x' } }] }] },
      /only text parts are supported, got "image_url"/,
      'messages.0.content.0',
    ],
    [
      { messages: [{ role: 'user', content: 42 }] },
      /must be a string, null or an array/,
      'messages.0.content',
    ],
    [
      {
        messages: [
          { role: 'assistant', content: null, tool_calls: [{ function: { name: '', arguments: '{}' } }] },
        ],
      },
      /must not be empty/,
      'messages.0.tool_calls.0.function.name',
    ],
    [
      {
        messages: [
          { role: 'assistant', content: null, tool_calls: [{ function: { name: 'f', arguments: 3 } }] },
        ],
      },
      /must be a JSON string or an object/,
      'messages.0.tool_calls.0.function.arguments',
    ],
    [
      { messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: {} }] },
      /tools\.0\.function\.name/,
      'tools.0.function.name',
    ],
  ])('rejects an unrenderable request, naming the field (%#)', (input, message, field) => {
    const render = () => renderChat(input as never);
    expect(render).toThrow(ValidationError);
    expect(render).toThrow(message);
    try {
      render();
    } catch (e) {
      expect((e as ValidationError).field).toBe(field);
    }
  });
});

describe('tokenizeChat', () => {
  it('tokenizes the rendered chat with control tokens as single ids', () => {
    // <|im_start|>=151644, user=872, \n=198, hi=6023, <|im_end|>=151645, assistant=77091 in Qwen's vocabulary.
    expect(tokenizeChat({ messages: [{ role: 'user', content: 'hi' }], addGenerationPrompt: true })).toEqual([
      151644, 872, 198, 6023, 151645, 198, 151644, 77091, 198,
    ]);
  });
});

describe('renderToolCalls against the template', () => {
  it('writes the same text as the template for any arguments', () => {
    // Two independent JSON writers (Jinja's tojson and toTemplateJson) must agree byte for byte.
    fc.assert(
      fc.property(
        fc.stringMatching(/^[A-Za-z0-9_-]{1,20}$/),
        fc.dictionary(fc.string({ unit: 'binary', maxLength: 6 }), fc.jsonValue({ maxDepth: 3 }), {
          maxKeys: 4,
        }),
        (name, args) => {
          const toolCalls = [
            { type: 'function' as const, function: { name, arguments: JSON.stringify(args) } },
          ];
          const text = renderChat({
            messages: [
              { role: 'user', content: 'q' },
              { role: 'assistant', content: null, tool_calls: toolCalls },
              { role: 'tool', content: 'r' },
            ],
          });
          expect(text).toContain(`<|im_start|>assistant\n${renderToolCalls(toolCalls)}<|im_end|>\n`);
        },
      ),
      { numRuns: 150 },
    );
  });
});

describe('rendered completions inside the next prompt', () => {
  const system = { role: 'system' as const, content: 'You are an agent.' };
  const user = { role: 'user' as const, content: 'Weather in Paris?' };
  const toolCalls = [
    {
      id: 'call_0',
      type: 'function' as const,
      function: { name: 'get_weather', arguments: '{"city":"Paris"}' },
    },
  ];

  it('extend the prompt they were generated from when the turn has reasoning', () => {
    const prompt = renderChat({ messages: [system, user], tools: [weatherTool], addGenerationPrompt: true });
    const completion = renderCompletion({ content: 'Checking.', reasoning: 'Need weather.', toolCalls });
    const next = renderChat({
      messages: [
        system,
        user,
        {
          role: 'assistant',
          content: 'Checking.',
          reasoning_content: 'Need weather.',
          tool_calls: toolCalls,
        },
        { role: 'tool', tool_call_id: 'call_0', content: 'sunny' },
      ],
      tools: [weatherTool],
      addGenerationPrompt: true,
    });
    expect(next.startsWith(`${prompt + completion}<|im_end|>\n`)).toBe(true);
    expect(next.slice((prompt + completion).length)).toBe(
      '<|im_end|>\n<|im_start|>user\n<tool_response>\nsunny\n</tool_response><|im_end|>\n<|im_start|>assistant\n',
    );
  });

  it('break the prefix when thinking was disabled: the history drops the empty think block', () => {
    // A Qwen3 fact the store counts as a prefix_break: the prompt had `<think>\n\n</think>\n\n`, the
    // re-rendered history of a non-final assistant turn without reasoning does not.
    const prompt = renderChat({ messages: [user], addGenerationPrompt: true, enableThinking: false });
    const completion = renderCompletion({ content: null, toolCalls });
    const next = renderChat({
      messages: [
        user,
        { role: 'assistant', content: null, tool_calls: toolCalls },
        { role: 'tool', content: 'sunny' },
      ],
      addGenerationPrompt: true,
      enableThinking: false,
    });
    expect(next.startsWith(prompt + completion)).toBe(false);
    expect(next).toContain(`<|im_start|>assistant\n${completion}<|im_end|>\n`);
  });
});
