import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import { seededRandom } from '../util/random.js';
import {
  newToolCallId,
  type ParsedCompletion,
  parseToolCalls,
  randomToolCallId,
  renderCompletion,
  renderToolCalls,
  sequentialToolCallIds,
  toTemplateJson,
} from './tool-calls.js';

const parse = (text: string): ParsedCompletion =>
  parseToolCalls(text, { newToolCallId: sequentialToolCallIds() });
const call = (id: string, name: string, args: string) => ({
  id,
  type: 'function',
  function: { name, arguments: args },
});

describe('parseToolCalls', () => {
  it('parses one tool call with no text around it', () => {
    expect(
      parse('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ).toEqual({
      content: null,
      toolCalls: [call('call_0', 'get_weather', '{"city": "Paris"}')],
    });
  });

  it('splits reasoning, text and parallel tool calls of a Qwen3 thinking completion', () => {
    const text =
      '<think>\nThe user wants two cities.\n</think>\n\nChecking both.\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' +
      '<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京", "units": ["c", "f"]}}\n</tool_call>';
    expect(parse(text)).toEqual({
      content: 'Checking both.',
      reasoning: 'The user wants two cities.',
      toolCalls: [
        call('call_0', 'get_weather', '{"city": "Paris"}'),
        call('call_1', 'get_weather', '{"city": "東京", "units": ["c", "f"]}'),
      ],
    });
  });

  it('takes ids from the injected generator, in order', () => {
    const ids = ['a', 'b'];
    const parsed = parseToolCalls(
      '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>',
      { newToolCallId: () => ids.shift() ?? 'exhausted' },
    );
    expect(parsed.toolCalls.map((c) => [c.id, c.function.name])).toEqual([
      ['a', 'f'],
      ['b', 'g'],
    ]);
  });

  it('returns plain text as content, and no text as null', () => {
    expect(parse('Hello there.\n')).toEqual({ content: 'Hello there.\n', toolCalls: [] });
    expect(parse('')).toEqual({ content: null, toolCalls: [] });
  });

  it('reads reasoning closed by </think> when the prompt opened the block', () => {
    expect(parse('I should greet.\n</think>\n\nHi!')).toEqual({
      content: 'Hi!',
      reasoning: 'I should greet.',
      toolCalls: [],
    });
  });

  it('treats a completion cut off inside <think> as reasoning only', () => {
    expect(parse('<think>\nStill thinking about <tool_call> use')).toEqual({
      content: null,
      reasoning: 'Still thinking about <tool_call> use',
      toolCalls: [],
    });
  });

  it('keeps an empty think block as empty reasoning', () => {
    expect(parse('<think>\n\n</think>\n\nDone.')).toEqual({ content: 'Done.', reasoning: '', toolCalls: [] });
  });

  it('leaves a block with malformed JSON in content and still parses the valid ones', () => {
    const bad = '<tool_call>\n{"name": "f", "arguments": {"a": 1}\n</tool_call>';
    const good = '<tool_call>\n{"name": "g", "arguments": {"b": 2}}\n</tool_call>';
    expect(parse(bad)).toEqual({ content: bad, toolCalls: [] });
    expect(parse(`${bad}\n${good}`)).toEqual({ content: bad, toolCalls: [call('call_0', 'g', '{"b": 2}')] });
    expect(parse(`${good}\n${bad}`)).toEqual({ content: bad, toolCalls: [call('call_0', 'g', '{"b": 2}')] });
  });

  it.each([
    ['no name', '{"arguments": {}}'],
    ['an empty name', '{"name": "", "arguments": {}}'],
    ['a numeric name', '{"name": 7, "arguments": {}}'],
    ['array arguments', '{"name": "f", "arguments": [1]}'],
    ['string arguments', '{"name": "f", "arguments": "{}"}'],
    ['a non-object body', '["f", {}]'],
  ])('leaves a block with %s in content', (_why, body) => {
    const text = `Trying.\n<tool_call>\n${body}\n</tool_call>`;
    expect(parse(text)).toEqual({ content: text, toolCalls: [] });
  });

  it('leaves an unclosed block (a truncated completion) in content', () => {
    const text = 'Let me look.\n<tool_call>\n{"name": "f", "argu';
    expect(parse(text)).toEqual({ content: text, toolCalls: [] });
  });

  it('gives a call without arguments an empty argument object', () => {
    expect(parse('<tool_call>\n{"name": "now"}\n</tool_call>').toolCalls).toEqual([
      call('call_0', 'now', '{}'),
    ]);
  });

  it('finds the right closing tag when an argument contains one', () => {
    const text =
      '<tool_call>\n{"name": "write", "arguments": {"text": "a</tool_call>b</think>"}}\n</tool_call>';
    expect(parse(text)).toEqual({
      content: null,
      toolCalls: [call('call_0', 'write', '{"text": "a</tool_call>b</think>"}')],
    });
  });

  it('keeps text written between or after calls in content', () => {
    const text =
      'First.\n<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>\nthen\n' +
      '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>\nlast';
    expect(parse(text).content).toBe('First.\nthen\nlast');
  });
});

describe('renderToolCalls and renderCompletion', () => {
  it('render calls as the Qwen3 template does', () => {
    expect(
      renderToolCalls([
        { function: { name: 'f', arguments: '{"b":1,"a":{"x":[true,null,"é\\n"]}}' } },
        { function: { name: 'g', arguments: '{}' } },
      ]),
    ).toBe(
      '<tool_call>\n{"name": "f", "arguments": {"b": 1, "a": {"x": [true, null, "é\\n"]}}}\n</tool_call>\n' +
        '<tool_call>\n{"name": "g", "arguments": {}}\n</tool_call>',
    );
  });

  it('render a completion with reasoning, content and calls', () => {
    expect(
      renderCompletion({
        reasoning: 'why',
        content: 'ok',
        toolCalls: [{ function: { name: 'f', arguments: '{"a":1}' } }],
      }),
    ).toBe('<think>\nwhy\n</think>\n\nok\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>');
    expect(renderCompletion({ content: null, toolCalls: [] })).toBe('');
  });

  it('refuse a name the template would paste into invalid JSON', () => {
    expect(() => renderToolCalls([{ function: { name: 'a"b', arguments: '{}' } }])).toThrow(ValidationError);
    expect(() => renderToolCalls([{ function: { name: '', arguments: '{}' } }])).toThrow(
      /tool_calls\.0|non-empty/,
    );
  });

  it('writes JSON with Python separators and unescaped non-ASCII', () => {
    expect(toTemplateJson({ k: 'ü "q" \u0001', n: [1.5, -2, 1e21], e: {}, l: [] })).toBe(
      '{"k": "ü \\"q\\" \\u0001", "n": [1.5, -2, 1e+21], "e": {}, "l": []}',
    );
  });
});

// Function names as OpenAI allows them, plus any other text that needs no JSON escaping.
const toolName = fc.oneof(
  fc.stringMatching(/^[A-Za-z0-9_-]{1,64}$/),
  fc.string({ unit: 'binary', minLength: 1, maxLength: 20 }).filter((s) => JSON.stringify(s) === `"${s}"`),
);
const argumentObject = fc.dictionary(fc.string({ maxLength: 8 }), fc.jsonValue({ maxDepth: 3 }), {
  maxKeys: 5,
});
const noTags = (s: string) => !s.includes('<tool_call>') && !s.includes('<think>') && !s.includes('</think>');
const noEdgeNewlines = (s: string) => !s.startsWith('\n') && !s.endsWith('\n');

describe('render then parse', () => {
  it('gives back every name and argument object', () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(toolName, argumentObject), { minLength: 1, maxLength: 4 }), (calls) => {
        const text = renderToolCalls(
          calls.map(([name, args]) => ({ function: { name, arguments: JSON.stringify(args) } })),
        );
        const parsed = parse(text);
        expect(parsed.content).toBeNull();
        expect(parsed.toolCalls.map((c) => c.function.name)).toEqual(calls.map(([name]) => name));
        // JSON's own round trip is the reference: it turns -0 into 0, as any JSON wire does.
        expect(parsed.toolCalls.map((c) => JSON.parse(c.function.arguments))).toEqual(
          calls.map(([, args]) => JSON.parse(JSON.stringify(args))),
        );
      }),
      { numRuns: 300 },
    );
  });

  it('gives back content and reasoning alongside the calls', () => {
    const content = fc.option(
      fc
        .string({ unit: 'binary', minLength: 1, maxLength: 30 })
        .filter((s) => s.trim() !== '' && noTags(s) && noEdgeNewlines(s)),
    );
    const reasoning = fc.option(
      fc.string({ unit: 'binary', maxLength: 30 }).filter((s) => noTags(s) && noEdgeNewlines(s)),
      {
        nil: undefined,
      },
    );
    const calls = fc.array(fc.tuple(toolName, argumentObject), { maxLength: 3 });
    fc.assert(
      fc.property(content, reasoning, calls, (content, reasoning, calls) => {
        const toolCalls = calls.map(([name, args], i) => ({
          id: `call_${i}`,
          type: 'function' as const,
          function: { name, arguments: JSON.stringify(args) },
        }));
        const parsed = parse(renderCompletion({ content, reasoning, toolCalls }));
        expect(parsed.content).toBe(content);
        expect(parsed.reasoning).toBe(reasoning);
        expect(
          parsed.toolCalls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]),
        ).toEqual(toolCalls.map((c) => [c.id, c.function.name, JSON.parse(c.function.arguments)]));
      }),
      { numRuns: 300 },
    );
  });
});

describe('tool call ids', () => {
  it('count per generator', () => {
    const a = sequentialToolCallIds();
    const b = sequentialToolCallIds('t');
    expect([a(), a(), b()]).toEqual(['call_0', 'call_1', 't0']);
  });

  it('are random and OpenAI-shaped by default', () => {
    const id = randomToolCallId();
    expect(id).toMatch(/^call_[0-9a-f]{24}$/);
    expect(randomToolCallId()).not.toBe(id);
  });

  it("take the family's shape: Mistral's are 9 letters and digits, reproducible from a seed", () => {
    const drawn = Array.from({ length: 50 }, () => newToolCallId('mistral'));
    for (const id of drawn) expect(id).toMatch(/^[A-Za-z0-9]{9}$/);
    expect(new Set(drawn).size).toBe(50);
    const seeded = (seed: number) => newToolCallId('mistral', seededRandom('ids', seed));
    expect(seeded(7)).toBe(seeded(7));
    expect(seeded(7)).not.toBe(seeded(8));
    expect(newToolCallId('openai')).toMatch(/^call_[0-9a-f]{24}$/);
    expect(newToolCallId('openai', seededRandom('ids', 1))).toMatch(/^call_[0-9a-f]{16}$/);
  });
});
