import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../domain/errors.js';
import {
  type ChatMessageInput,
  loadQwen3Tokenizer,
  parseToolCalls,
  sequentialToolCallIds,
  tokenizeChat,
} from '../../text/index.js';
import { type SimChatRequest, SimEngine } from './engine.js';
import { echoPolicy, type Policy, type PolicyToolCall, randomPolicy, scriptedPolicy } from './policies.js';

const tok = loadQwen3Tokenizer();
const IM_END = '<|im_end|>';

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

const req = (over: Partial<SimChatRequest> = {}): SimChatRequest => ({
  messages: [
    { role: 'system', content: 'You are a helpful assistant.' },
    { role: 'user', content: 'Héllo, wörld — 你好 🌍' },
  ],
  seed: 42,
  ...over,
});

const fixed =
  (out: ReturnType<Policy>): Policy =>
  () =>
    out;

describe('SimEngine.complete', () => {
  it('echoes, with prompt ids equal to the tokenized chat template', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const r = engine.complete(req());
    expect(r.text).toBe('Héllo, wörld — 你好 🌍');
    expect(r.content).toBe(r.text);
    expect(r.promptTokenIds).toEqual(tokenizeChat({ messages: req().messages, addGenerationPrompt: true }));
    expect(tok.decode(r.promptTokenIds).endsWith('<|im_start|>assistant\n')).toBe(true);
    expect(tok.decode(r.tokenIds)).toBe(r.text + IM_END);
    expect(r.tokenIds.at(-1)).toBe(tok.tokenId(IM_END));
    expect(r.finishReason).toBe('stop');
    expect(r.usage).toEqual({
      prompt_tokens: r.promptTokenIds.length,
      completion_tokens: r.tokenIds.length,
      total_tokens: r.promptTokenIds.length + r.tokenIds.length,
    });
  });

  it('is deterministic for a seed; the random policy differs across seeds', () => {
    const run = (seed: number) =>
      new SimEngine({ policy: randomPolicy() }).complete(req({ seed, top_logprobs: 3, logprobs: true }));
    const a = run(1);
    expect(run(1)).toEqual(a);
    expect(a.logprobs).toHaveLength(a.tokenIds.length);
    for (const lp of a.logprobs) expect(Number.isFinite(lp) && lp < 0).toBe(true);
    expect(a.topLogprobs?.every((t, i) => t.length === 3 && t[0]?.tokenId === a.tokenIds[i])).toBe(true);
    const texts = new Set([1, 2, 3, 4, 5].map((s) => run(s).text));
    expect(texts.size).toBeGreaterThan(3);
    expect(run(2).logprobs).not.toEqual(a.logprobs);
  });

  it('derives a seed per request when none is given, reproducibly for the engine seed', () => {
    const texts = (seed: number) => {
      const e = new SimEngine({ policy: randomPolicy(), seed });
      return [0, 1, 2].map(() => e.complete(req({ seed: null })).text);
    };
    expect(texts(5)).toEqual(texts(5));
    expect(new Set(texts(5)).size).toBeGreaterThan(1);
  });

  it('renders tool calls in hermes format and parses them back to the policy calls', () => {
    const calls: PolicyToolCall[] = [
      { name: 'read_file', arguments: { path: 'src/ü.ts' } },
      { name: 'read_file', arguments: { path: 'b "q" </tool_call>', n: [1, { x: null }] } },
    ];
    const engine = new SimEngine({ policy: fixed({ text: 'Let me look.', toolCalls: calls }) });
    const r = engine.complete(req({ tools }));
    expect(r.text).toContain(
      '<tool_call>\n{"name": "read_file", "arguments": {"path": "src/ü.ts"}}\n</tool_call>',
    );
    expect(tok.decode(r.tokenIds)).toBe(r.text + IM_END);
    expect(r.content).toBe('Let me look.');
    expect(
      r.toolCalls.map((c) => ({ name: c.function.name, arguments: JSON.parse(c.function.arguments) })),
    ).toEqual(calls);
    expect(r.toolCalls.every((c) => /^call_[0-9a-f]{16}$/.test(c.id))).toBe(true);
    expect(parseToolCalls(r.text, { newToolCallId: sequentialToolCallIds() }).toolCalls).toHaveLength(2);
    // The prompt renders the offered tools.
    expect(tok.decode(r.promptTokenIds)).toContain('"name": "read_file"');
  });

  it('truncates at max_tokens with finish_reason length', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const full = engine.complete(req());
    const r = engine.complete(req({ max_tokens: 3 }));
    expect(r.finishReason).toBe('length');
    expect(r.tokenIds).toEqual(full.tokenIds.slice(0, 3));
    expect(r.logprobs).toEqual(full.logprobs.slice(0, 3));
    expect(r.text).toBe(tok.decode(r.tokenIds));
    expect(r.usage.completion_tokens).toBe(3);
    // max_completion_tokens wins; a limit that leaves room for EOS changes nothing.
    expect(engine.complete(req({ max_tokens: 1, max_completion_tokens: 2 })).tokenIds).toHaveLength(2);
    expect(engine.complete(req({ max_tokens: full.tokenIds.length }))).toEqual(full);
  });

  it('a truncated tool call stays in content', () => {
    const engine = new SimEngine({
      policy: fixed({ toolCalls: [{ name: 'read_file', arguments: { path: 'a' } }] }),
    });
    const r = engine.complete(req({ tools, max_tokens: 4 }));
    expect(r.finishReason).toBe('length');
    expect(r.toolCalls).toEqual([]);
    expect(r.content).toBe(r.text);
  });

  it('ends the text before a stop string', () => {
    const engine = new SimEngine({ policy: fixed({ text: 'one two STOP three' }) });
    const r = engine.complete(req({ stop: ['three', 'STOP'] }));
    expect(r.text).toBe('one two ');
    expect(r.stopReason).toBe('STOP');
    expect(r.finishReason).toBe('stop');
    expect(tok.decode(r.tokenIds)).toBe('one two ');
  });

  it('scripted with errorRate 1: the injected error, then the correction', () => {
    const engine = new SimEngine({
      policy: scriptedPolicy(
        [
          { toolCall: { name: 'read_file', arguments: { path: 'README.md' } } },
          { answer: 'It is a README.' },
        ],
        { errorRate: 1, errorKinds: ['wrong_argument'] },
      ),
    });
    const messages: ChatMessageInput[] = [{ role: 'user', content: 'Summarise README.md' }];
    const turns: ReturnType<SimEngine['complete']>[] = [];
    for (let t = 0; t < 3; t++) {
      const r = engine.complete({ messages: [...messages], tools, seed: 1 });
      turns.push(r);
      messages.push({
        role: 'assistant',
        content: r.content,
        tool_calls: r.toolCalls.map((c) => ({ ...c })),
      });
      for (const c of r.toolCalls) messages.push({ role: 'tool', tool_call_id: c.id, content: 'ok' });
    }
    expect(turns[0]?.toolCalls[0]?.function).toEqual({
      name: 'read_file',
      arguments: '{"path":"README.md_wrong"}',
    });
    expect(turns[1]?.toolCalls[0]?.function).toEqual({
      name: 'read_file',
      arguments: '{"path":"README.md"}',
    });
    expect(turns[1]?.content).toMatch(/retrying/);
    expect(turns[2]?.toolCalls).toEqual([]);
    expect(turns[2]?.content).toBe('It is a README.');
  });

  it('passes enable_thinking to the template and renders reasoning', () => {
    const engine = new SimEngine({ policy: fixed({ reasoning: 'hmm', text: 'yes' }) });
    const off = engine.complete(req({ chat_template_kwargs: { enable_thinking: false } }));
    expect(tok.decode(off.promptTokenIds).endsWith('<think>\n\n</think>\n\n')).toBe(true);
    expect(off.reasoning).toBe('hmm');
    expect(off.content).toBe('yes');
    expect(tok.decode(off.tokenIds)).toBe(`<think>\nhmm\n</think>\n\nyes${IM_END}`);
  });

  it('rejects bad limits with a ValidationError naming the field', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    expect(() => engine.complete(req({ max_tokens: 0 }))).toThrow(ValidationError);
    expect(() => engine.complete(req({ top_logprobs: 21 }))).toThrow(/top_logprobs|integer/);
    expect(() => engine.complete(req({ seed: 1.5 }))).toThrow(ValidationError);
    expect(() => engine.complete(req({ messages: [] }))).toThrow(ValidationError);
  });
});
