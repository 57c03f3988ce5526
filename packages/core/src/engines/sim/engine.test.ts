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

  it("tells the policy whether the seed was the request's or derived (chat and text)", () => {
    const seen: (boolean | undefined)[] = [];
    const e = new SimEngine({
      policy: (ctx) => {
        seen.push(ctx.seedDerived);
        return { text: 'ok' };
      },
    });
    e.complete(req({ seed: 7 }));
    e.complete(req({ seed: null }));
    e.completeText({ prompt: 'a', seed: 7 });
    e.completeText({ prompt: 'a' });
    expect(seen).toEqual([false, true, false, true]);
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
      arguments: '{"path": "README.md_wrong"}',
    });
    expect(turns[1]?.toolCalls[0]?.function).toEqual({
      name: 'read_file',
      arguments: '{"path": "README.md"}',
    });
    expect(turns[1]?.content).toMatch(/retrying/);
    expect(turns[2]?.toolCalls).toEqual([]);
    expect(turns[2]?.content).toBe('It is a README.');
  });

  it('scripted, history rewritten by a rollback: goes on, in chat and in a raw prompt', () => {
    const engine = new SimEngine({
      policy: scriptedPolicy(
        [
          { toolCall: { name: 'read_file', arguments: { path: 'README.md' } } },
          { toolCall: { name: 'read_file', arguments: { path: 'NOTES.md' } } },
          { answer: 'Read both.' },
        ],
        { errorRate: 1, errorKinds: ['wrong_argument'] },
      ),
    });
    // The wrong call and its error were rolled back: only the corrected call and its result remain.
    const messages: ChatMessageInput[] = [
      { role: 'user', content: 'Read README.md and NOTES.md' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'call_1', function: { name: 'read_file', arguments: '{"path":"README.md"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '# Readme' },
    ];
    const chat = engine.complete({ messages, tools, seed: 1 });
    expect(chat.toolCalls[0]?.function).toEqual({
      name: 'read_file',
      arguments: '{"path": "NOTES.md_wrong"}',
    });
    const text = engine.completeText({
      prompt: tokenizeChat({ messages, tools, addGenerationPrompt: true }),
      seed: 1,
      max_tokens: null,
    });
    expect(text.text).toBe(
      '<tool_call>\n{"name": "read_file", "arguments": {"path": "NOTES.md_wrong"}}\n</tool_call>',
    );
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

describe('SimEngine.complete: tool_choice and response_format', () => {
  const twoTools = [...tools, { type: 'function' as const, function: { name: 'run' } }];
  const script = scriptedPolicy([
    { toolCall: { name: 'read_file', arguments: { path: 'a' } }, text: 'Reading.' },
    { answer: 'The file is empty.' },
  ]);

  it('tool_choice none: no tool calls, the answer instead; the prompt still lists the tools', () => {
    const engine = new SimEngine({ policy: script });
    const auto = engine.complete(req({ tools }));
    expect(auto.toolCalls).toHaveLength(1);
    const none = engine.complete(req({ tools, tool_choice: 'none' }));
    expect(none.toolCalls).toEqual([]);
    expect(none.content).toBe('The file is empty.');
    expect(tok.decode(none.tokenIds)).toBe(`The file is empty.${IM_END}`);
    expect(none.promptTokenIds).toEqual(auto.promptTokenIds);
    expect(tok.decode(none.promptTokenIds)).toContain('"name": "read_file"');
  });

  it('tool_choice none: calls a policy makes anyway are dropped, and no tool parser runs', () => {
    const block = '<tool_call>\n{"name": "read_file", "arguments": {"path": "x"}}\n</tool_call>';
    const engine = new SimEngine({
      policy: fixed({
        reasoning: 'hmm',
        text: `Quoting: ${block}`,
        toolCalls: [{ name: 'read_file', arguments: { path: 'y' } }],
      }),
    });
    const auto = engine.complete(req({ tools }));
    expect(auto.toolCalls.map((c) => c.function.arguments)).toEqual(['{"path": "x"}', '{"path": "y"}']);
    const none = engine.complete(req({ tools, tool_choice: 'none' }));
    expect(none.toolCalls).toEqual([]);
    expect(none.reasoning).toBe('hmm');
    expect(none.content).toBe(`Quoting: ${block}`);
    expect(tok.decode(none.tokenIds)).toBe(`<think>\nhmm\n</think>\n\nQuoting: ${block}${IM_END}`);
  });

  it('tool_choice required / named: the random policy always calls (the named tool)', () => {
    const engine = new SimEngine({ policy: randomPolicy() });
    for (let seed = 0; seed < 20; seed++) {
      const required = engine.complete(req({ tools: twoTools, tool_choice: 'required', seed }));
      expect(required.toolCalls).toHaveLength(1);
      const named = engine.complete(
        req({ tools: twoTools, tool_choice: { type: 'function', function: { name: 'run' } }, seed }),
      );
      expect(named.toolCalls.map((c) => c.function.name)).toEqual(['run']);
    }
  });

  it('tool_choice is checked against the tools, naming the field', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    expect(() => engine.complete(req({ tool_choice: 'required' }))).toThrow(ValidationError);
    try {
      engine.complete(req({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }));
      expect.unreachable();
    } catch (error) {
      expect((error as ValidationError).field).toBe('tool_choice.function.name');
    }
  });

  it('response_format json_object / json_schema: the content is valid JSON with the answer', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const obj = engine.complete(req({ response_format: { type: 'json_object' } }));
    expect(JSON.parse(obj.content!)).toEqual({ answer: 'Héllo, wörld — 你好 🌍' });
    expect(tok.decode(obj.tokenIds)).toBe(obj.text + IM_END);
    const schema = {
      type: 'object',
      properties: {
        reply: { type: 'string' },
        score: { type: 'integer', minimum: 1 },
        ok: { type: 'boolean' },
      },
      required: ['reply', 'score', 'ok'],
    };
    const shaped = engine.complete(
      req({ response_format: { type: 'json_schema', json_schema: { name: 'r', schema } } }),
    );
    expect(JSON.parse(shaped.content!)).toEqual({ reply: 'Héllo, wörld — 你好 🌍', score: 1, ok: true });
    expect(engine.complete(req({ response_format: { type: 'text' } })).content).toBe(
      'Héllo, wörld — 你好 🌍',
    );
    expect(() => engine.complete(req({ response_format: { type: 'xml' } as never }))).toThrow(
      /response_format\.type/,
    );
  });

  it('response_format json with a tool call: the call stands alone (content null)', () => {
    const engine = new SimEngine({ policy: script });
    const r = engine.complete(req({ tools, response_format: { type: 'json_object' } }));
    expect(r.content).toBeNull();
    expect(r.toolCalls).toHaveLength(1);
    const answer = engine.complete({
      messages: [...req().messages, { role: 'assistant', content: 'x' }],
      tools,
      seed: 1,
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(answer.content!)).toEqual({ answer: 'The file is empty.' });
  });
});

describe('SimEngine.completeText', () => {
  const prompt = 'Héllo, wörld — 你好 🌍';

  it('continues a text prompt as given: prompt ids are the plain encoding, ids decode to text + EOS', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const r = engine.completeText({ prompt, seed: 1, max_tokens: null });
    expect(r.promptTokenIds).toEqual(tok.encode(prompt));
    expect(tok.decode(r.promptTokenIds)).toBe(prompt);
    expect(r.text).toBe(prompt);
    expect(tok.decode(r.tokenIds)).toBe(r.text + IM_END);
    expect(r.tokenIds.at(-1)).toBe(tok.tokenId(IM_END));
    expect(r.finishReason).toBe('stop');
    expect(r.stopReason).toBeNull();
    expect(r.usage).toEqual({
      prompt_tokens: r.promptTokenIds.length,
      completion_tokens: r.tokenIds.length,
      total_tokens: r.promptTokenIds.length + r.tokenIds.length,
    });
    expect(r.topLogprobs).toBeUndefined();
    expect(r.options).toEqual({ logprobs: null, includeUsage: false, returnTokenIds: true });
  });

  it('takes token ids as the prompt, with the same result as their text', () => {
    const engine = new SimEngine({ policy: randomPolicy() });
    const fromText = engine.completeText({ prompt, seed: 9 });
    const fromIds = engine.completeText({ prompt: tok.encode(prompt), seed: 9 });
    expect(fromIds).toEqual(fromText);
  });

  it('stops at 16 tokens unless max_tokens says otherwise (vLLM default)', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const long =
      'one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen';
    const r = engine.completeText({ prompt: long, seed: 1 });
    expect(r.tokenIds).toHaveLength(16);
    expect(r.finishReason).toBe('length');
    expect(r.text).toBe(tok.decode(r.tokenIds));
    expect(engine.completeText({ prompt: long, seed: 1, max_tokens: 4 }).tokenIds).toEqual(
      r.tokenIds.slice(0, 4),
    );
    const whole = engine.completeText({ prompt: long, seed: 1, max_tokens: null });
    expect(whole.text).toBe(long);
    expect(whole.tokenIds.slice(0, 16)).toEqual(r.tokenIds);
  });

  it('is deterministic for a seed; logprobs N gives N distinct alternatives, the chosen first', () => {
    const run = (seed: number, logprobs: number | null = 3) =>
      new SimEngine({ policy: randomPolicy() }).completeText({ prompt: 'Say something', seed, logprobs });
    const a = run(1);
    expect(run(1)).toEqual(a);
    expect(new Set([1, 2, 3, 4, 5].map((s) => run(s).text)).size).toBeGreaterThan(3);
    expect(a.logprobs).toHaveLength(a.tokenIds.length);
    for (const lp of a.logprobs) expect(Number.isFinite(lp) && lp < 0).toBe(true);
    expect(a.topLogprobs).toHaveLength(a.tokenIds.length);
    a.topLogprobs!.forEach((top, i) => {
      expect(top).toHaveLength(3);
      expect(top[0]).toEqual({ tokenId: a.tokenIds[i], logprob: a.logprobs[i] });
      expect(new Set(top.map((t) => tok.decode([t.tokenId]))).size).toBe(3);
      expect(top[1]!.logprob).toBeLessThan(top[0]!.logprob);
    });
    // logprobs: 0 still reports the chosen token; the ids and logprobs do not depend on N.
    const zero = run(1, 0);
    expect(zero.topLogprobs?.every((t, i) => t.length === 1 && t[0]!.tokenId === zero.tokenIds[i])).toBe(
      true,
    );
    expect(zero.logprobs).toEqual(a.logprobs);
    expect(run(1, null).topLogprobs).toBeUndefined();
  });

  it('gives the policy no messages, only the prompt and the assistant turns it holds', () => {
    const seen: Parameters<Policy>[0][] = [];
    const spy: Policy = (ctx) => {
      seen.push(ctx);
      return scriptedPolicy([
        { toolCall: { name: 'read_file', arguments: { path: 'a' } } },
        { answer: 'Done reading.' },
      ])(ctx);
    };
    const engine = new SimEngine({ policy: spy });
    const messages: ChatMessageInput[] = [{ role: 'user', content: 'read a' }];
    const first = engine.completeText({
      prompt: tokenizeChat({ messages, tools, addGenerationPrompt: true }),
      seed: 2,
      max_tokens: null,
    });
    expect(seen[0]).toMatchObject({ messages: [], tools: [], turn: 0 });
    expect(seen[0]?.prompt).toContain('<|im_start|>user\nread a<|im_end|>');
    // Raw text: the hermes block as the model writes it, not parsed.
    expect(first.text).toBe('<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>');
    expect(tok.decode(first.tokenIds)).toBe(first.text + IM_END);

    messages.push(
      {
        role: 'assistant',
        content: null,
        tool_calls: [{ function: { name: 'read_file', arguments: '{"path":"a"}' } }],
      },
      { role: 'tool', content: '' },
    );
    const second = engine.completeText({
      prompt: tokenizeChat({ messages, tools, addGenerationPrompt: true }),
      seed: 2,
      max_tokens: null,
    });
    expect(seen[1]?.turn).toBe(1);
    expect(second.text).toBe('Done reading.');
  });

  it('ends before a stop string, without EOS; a JSON response_format makes the text JSON', () => {
    const engine = new SimEngine({ policy: fixed({ text: 'one two STOP three' }) });
    const r = engine.completeText({ prompt: 'x', stop: 'STOP' });
    expect(r.text).toBe('one two ');
    expect(r.stopReason).toBe('STOP');
    expect(tok.decode(r.tokenIds)).toBe('one two ');
    const json = engine.completeText({
      prompt: 'x',
      response_format: { type: 'json_object' },
      max_tokens: null,
    });
    expect(JSON.parse(json.text)).toEqual({ answer: 'one two STOP three' });
  });

  it('rejects bad prompts and limits with a ValidationError naming the field', () => {
    const engine = new SimEngine({ policy: echoPolicy });
    const field = (request: Parameters<SimEngine['completeText']>[0]) => {
      try {
        engine.completeText(request);
      } catch (error) {
        if (error instanceof ValidationError) return error.field;
        throw error;
      }
      return 'accepted';
    };
    expect(field({ prompt: '' })).toBe('prompt');
    expect(field({ prompt: [] })).toBe('prompt');
    expect(field({ prompt: [1, -2] })).toBe('prompt.1');
    expect(field({ prompt: [1.5] })).toBe('prompt.0');
    expect(field({ prompt: [tok.tokenId('</think>')!] })).toBe('accepted');
    expect(field({ prompt: [tok.tokenId('</think>')! + 1] })).toBe('prompt.0');
    expect(field({ prompt: 'x', logprobs: 21 })).toBe('logprobs');
    expect(field({ prompt: 'x', logprobs: -1 })).toBe('logprobs');
    expect(field({ prompt: 'x', max_tokens: 0 })).toBe('max_tokens');
    expect(field({ prompt: 'x', seed: 0.5 })).toBe('seed');
  });
});
