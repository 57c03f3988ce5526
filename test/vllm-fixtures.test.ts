/**
 * Internal consistency of the recorded-shape vLLM fixtures in test/fixtures/vllm (see its README):
 * token ids decode to the texts, logprobs line up with the ids, the streams parse with our SSE
 * decoder, tool-call argument fragments add up to JSON, and the files are what generate.ts writes.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  type ChatMessageInput,
  type ChatToolInput,
  isSseDone,
  loadQwen3Tokenizer,
  renderChat,
  renderToolCalls,
  SseDecoder,
  tokenizeChat,
} from '../packages/core/src/text/index.js';
import { buildFixtures } from './fixtures/vllm/generate.js';

const dir = join(import.meta.dirname, 'fixtures/vllm');
const t = loadQwen3Tokenizer();
const EOS = t.tokenId('<|im_end|>') ?? -1;
const utf8 = new TextEncoder();

// The fixtures are untyped JSON; these are the fields the checks read.
interface LogprobEntry {
  token: string;
  logprob: number;
  bytes: number[] | null;
  top_logprobs?: LogprobEntry[];
}
interface LegacyLogprobs {
  text_offset: number[];
  token_logprobs: number[];
  tokens: string[];
  top_logprobs: Record<string, number>[];
}
interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}
interface DeltaToolCall {
  id?: string;
  type?: string;
  index: number;
  function?: { name?: string; arguments?: string };
}
interface ChatChunk {
  id: string;
  object: string;
  created: number;
  model: string;
  choices: {
    index: number;
    delta: { role?: string; content?: string; tool_calls?: DeltaToolCall[] };
    logprobs: { content: LogprobEntry[] } | null;
    finish_reason: string | null;
    stop_reason?: string | number | null;
    token_ids?: number[];
  }[];
  usage?: Usage;
  prompt_token_ids?: number[];
}
interface CompletionChunk {
  id: string;
  choices: {
    index: number;
    text: string;
    logprobs: LegacyLogprobs;
    finish_reason: string | null;
    stop_reason: string | number | null;
    prompt_token_ids: number[] | null;
    token_ids: number[];
  }[];
  usage: Usage | null;
}
interface ChatRequest {
  messages: ChatMessageInput[];
  tools?: ChatToolInput[];
  top_logprobs: number;
  chat_template_kwargs: { enable_thinking: boolean };
}

const readText = (name: string) => readFileSync(join(dir, name), 'utf8');
const readJson = <T>(name: string) => JSON.parse(readText(name)) as T;

/** Parses a fixture stream with our decoder, fed in uneven chunks; returns the JSON payloads before [DONE]. */
function readSse<T>(name: string): T[] {
  const wire = readFileSync(join(dir, name));
  const decoder = new SseDecoder();
  const events = [];
  for (let at = 0, size = 1; at < wire.length; at += size, size = (size * 7) % 61) {
    events.push(...decoder.push(wire.subarray(at, at + size)));
  }
  events.push(...decoder.end());
  expect(decoder.truncated).toBe(false);
  const last = events.pop();
  expect(last !== undefined && isSseDone(last)).toBe(true);
  expect(events.some(isSseDone)).toBe(false);
  for (const e of events) expect(e.event).toBeUndefined();
  return events.map((e) => JSON.parse(e.data) as T);
}

function promptOf(request: ChatRequest): string {
  return renderChat({
    messages: request.messages,
    tools: request.tools ?? null,
    addGenerationPrompt: true,
    enableThinking: request.chat_template_kwargs.enable_thinking,
  });
}

function expectPromptIds(ids: readonly number[], request: ChatRequest): void {
  expect(t.decode(ids)).toBe(promptOf(request));
  expect(ids).toEqual(
    tokenizeChat({
      messages: request.messages,
      tools: request.tools ?? null,
      addGenerationPrompt: true,
      enableThinking: request.chat_template_kwargs.enable_thinking,
    }),
  );
}

/** A chat logprob entry: the token as vLLM decodes one id, its UTF-8 bytes, the sampled token first. */
function expectChatLogprob(entry: LogprobEntry, id: number, topLogprobs: number): void {
  expect(entry.token).toBe(t.decode([id]));
  expect(entry.bytes).toEqual(Array.from(utf8.encode(entry.token)));
  expect(entry.logprob).toBeLessThan(0);
  const top = entry.top_logprobs ?? [];
  expect(top).toHaveLength(topLogprobs);
  expect(top[0]).toEqual({ token: entry.token, logprob: entry.logprob, bytes: entry.bytes });
  for (const alt of top.slice(1)) {
    expect(alt.logprob).toBeLessThan(entry.logprob);
    expect(alt.bytes).toEqual(Array.from(utf8.encode(alt.token)));
  }
}

function expectUsage(usage: Usage | null | undefined, prompt: number, completion: number): void {
  expect(usage).toMatchObject({
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
  });
}

/** Python's len(), which vLLM's text_offset counts in. */
const pyLen = (s: string) => [...s].length;

function expectLegacyLogprobs(
  lp: LegacyLogprobs,
  ids: readonly number[],
  width: number,
  offset: number,
): void {
  expect(lp.tokens).toEqual(ids.map((id) => t.decode([id])));
  expect(lp.token_logprobs).toHaveLength(ids.length);
  expect(lp.top_logprobs).toHaveLength(ids.length);
  expect(lp.text_offset).toHaveLength(ids.length);
  let at = offset;
  lp.tokens.forEach((token, i) => {
    expect(lp.text_offset[i]).toBe(at);
    at += pyLen(token);
    const top = lp.top_logprobs[i] ?? {};
    expect(Object.keys(top)).toHaveLength(width);
    expect(top[token]).toBe(lp.token_logprobs[i]);
    expect(Math.max(...Object.values(top))).toBe(lp.token_logprobs[i]);
  });
}

/** True when `sub` is `full` with some elements left out (order kept). */
function isSubsequence(sub: readonly number[], full: readonly number[]): boolean {
  let i = 0;
  for (const x of full) if (i < sub.length && sub[i] === x) i++;
  return i === sub.length;
}

describe('vLLM fixtures: files', () => {
  it('are exactly what generate.ts writes (JSON compared with key order, streams byte for byte)', () => {
    const built = buildFixtures(t);
    const onDisk = readdirSync(dir).filter((n) => n !== 'generate.ts' && n !== 'README.md');
    expect(onDisk.sort()).toEqual(Object.keys(built).sort());
    for (const [name, content] of Object.entries(built)) {
      if (name.endsWith('.json')) {
        expect(JSON.stringify(readJson(name)), name).toBe(JSON.stringify(JSON.parse(content)));
      } else {
        expect(readText(name), name).toBe(content);
      }
    }
  });

  it('write each stream as compact `data:` events separated by blank lines', () => {
    for (const name of [
      'chat-stream-tools.sse',
      'chat-stream-tools.all-token-ids.sse',
      'completions-stream.sse',
    ]) {
      expect(readText(name)).toMatch(/^(data: [^\n]+\n\n)+$/);
      expect(readText(name).endsWith('data: [DONE]\n\n')).toBe(true);
    }
  });
});

describe('vLLM fixtures: chat completion', () => {
  const request = readJson<ChatRequest & { return_token_ids: boolean; logprobs: boolean }>(
    'chat-completion.request.json',
  );
  const response = readJson<{
    choices: {
      message: Record<string, unknown> & { content: string };
      logprobs: { content: LogprobEntry[] };
      finish_reason: string;
      stop_reason: null;
      token_ids: number[];
    }[];
    usage: Usage;
    prompt_token_ids: number[];
  }>('chat-completion.json');
  const choice = response.choices[0];
  if (!choice) throw new Error('no choice');

  it('asks for token ids and logprobs', () => {
    expect(request).toMatchObject({ return_token_ids: true, logprobs: true, top_logprobs: 2 });
  });

  it('has the fields of vLLM 0.10.2 - 0.11.x in their order', () => {
    expect(Object.keys(response)).toEqual([
      'id',
      'object',
      'created',
      'model',
      'choices',
      'service_tier',
      'system_fingerprint',
      'usage',
      'prompt_logprobs',
      'prompt_token_ids',
      'kv_transfer_params',
    ]);
    expect(Object.keys(choice)).toEqual([
      'index',
      'message',
      'logprobs',
      'finish_reason',
      'stop_reason',
      'token_ids',
    ]);
    expect(choice.message).toEqual({
      role: 'assistant',
      content: choice.message.content,
      refusal: null,
      annotations: null,
      audio: null,
      function_call: null,
      tool_calls: [],
      reasoning_content: null,
    });
  });

  it('carries the prompt ids of the rendered chat', () => {
    expectPromptIds(response.prompt_token_ids, request);
    expect(promptOf(request).endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('carries completion ids that decode to the content plus <|im_end|>', () => {
    expect(t.decode(choice.token_ids)).toBe(`${choice.message.content}<|im_end|>`);
    expect(choice.token_ids.at(-1)).toBe(EOS);
    expect(t.eosTokenIds).toContain(EOS);
    expect(choice).toMatchObject({ finish_reason: 'stop', stop_reason: null });
    expectUsage(response.usage, response.prompt_token_ids.length, choice.token_ids.length);
  });

  it('has one logprob entry per completion token', () => {
    expect(choice.logprobs.content).toHaveLength(choice.token_ids.length);
    choice.logprobs.content.forEach((entry, i) => {
      expectChatLogprob(entry, choice.token_ids[i] ?? -1, request.top_logprobs);
    });
  });

  it('shows that per-token strings cannot rebuild the text (a split emoji reads as U+FFFD)', () => {
    const joined = choice.logprobs.content.map((e) => e.token).join('');
    expect(joined).toContain('\uFFFD');
    expect(joined).not.toBe(`${choice.message.content}<|im_end|>`);
  });
});

for (const [file, allTokenIds] of [
  ['chat-stream-tools.sse', false],
  ['chat-stream-tools.all-token-ids.sse', true],
] as const) {
  describe(`vLLM fixtures: ${file}`, () => {
    const request = readJson<ChatRequest & { tools: ChatToolInput[] }>('chat-stream-tools.request.json');
    const chunks = readSse<ChatChunk>(file);
    const first = chunks[0];
    const usageChunk = chunks.at(-1);
    const body = chunks.slice(1, -1);
    const expectedText = renderToolCalls([
      { function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris', unit: 'celsius' }) } },
    ]);
    const fullIds = [...t.encode(expectedText, { addSpecialTokens: false }), EOS];
    const deliveredIds = body.flatMap((c) => c.choices[0]?.token_ids ?? []);

    it('is one streamed completion with the same id, object, created and model throughout', () => {
      expect(request).toMatchObject({
        stream: true,
        stream_options: { include_usage: true },
        return_token_ids: true,
      });
      for (const c of chunks) {
        expect(c).toMatchObject({ id: first?.id, object: 'chat.completion.chunk', created: first?.created });
        expect(c.model).toBe(first?.model);
      }
    });

    it('opens with the role and the prompt ids', () => {
      expect(first?.choices).toEqual([
        { index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null },
      ]);
      expectPromptIds(first?.prompt_token_ids ?? [], request);
      expect(promptOf(request)).toContain('<tools>\n{"type": "function", "function": {"name": "get_weather"');
      for (const c of chunks.slice(1)) expect(c.prompt_token_ids).toBeUndefined();
    });

    it('has token ids and one logprob per id in every token chunk', () => {
      for (const c of body) {
        expect(c.choices).toHaveLength(1);
        const choice = c.choices[0];
        const ids = choice?.token_ids ?? [];
        expect(ids).toHaveLength(1);
        expect(choice?.logprobs?.content).toHaveLength(ids.length);
        choice?.logprobs?.content.forEach((entry, i) => {
          expectChatLogprob(entry, ids[i] ?? -1, request.top_logprobs);
        });
      }
    });

    it('streams the hermes tool call: id, type and name first, then argument fragments', () => {
      const calls = body.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []);
      const [head, ...rest] = calls;
      expect(head).toEqual({
        id: expect.stringMatching(/^chatcmpl-tool-[0-9a-f]{32}$/),
        type: 'function',
        index: 0,
        function: { name: 'get_weather' },
      });
      expect(rest.length).toBeGreaterThan(1);
      for (const call of rest) {
        expect(Object.keys(call)).toEqual(['index', 'function']);
        expect(call.index).toBe(0);
        expect(Object.keys(call.function ?? {})).toEqual(['arguments']);
      }
      const args = rest.map((c) => c.function?.arguments ?? '').join('');
      expect(JSON.parse(args)).toEqual({ city: 'Paris', unit: 'celsius' });
      // The parser re-serializes the first fragment, then passes the model's own text through.
      expect(args).toBe('{"city": "Paris", "unit": "celsius"}');
      // No text content leaks from inside the <tool_call> block.
      const contents = body.flatMap((c) =>
        c.choices[0]?.delta.content === undefined ? [] : [c.choices[0].delta.content],
      );
      expect(contents.join('')).toBe('');
    });

    it('finishes with tool_calls on the <|im_end|> chunk, then reports usage', () => {
      const finishes = body.filter((c) => c.choices[0]?.finish_reason !== null);
      expect(finishes).toHaveLength(1);
      expect(body.at(-1)?.choices[0]).toMatchObject({
        finish_reason: 'tool_calls',
        stop_reason: null,
        token_ids: [EOS],
      });
      expect(usageChunk?.choices).toEqual([]);
      expectUsage(usageChunk?.usage, first?.prompt_token_ids?.length ?? -1, fullIds.length);
    });

    if (allTokenIds) {
      it('delivers every generated id (a chunk with an empty delta for each swallowed token)', () => {
        expect(deliveredIds).toEqual(fullIds);
        expect(t.decode(deliveredIds)).toBe(`${expectedText}<|im_end|>`);
        expect(
          body.filter((c) => Object.keys(c.choices[0]?.delta ?? {}).length === 0).length,
        ).toBeGreaterThan(0);
      });
    } else {
      it('loses the ids of tokens the tool parser swallowed, as vLLM 0.10.2 - 0.11.x does', () => {
        expect(isSubsequence(deliveredIds, fullIds)).toBe(true);
        expect(deliveredIds.length).toBeLessThan(usageChunk?.usage?.completion_tokens ?? 0);
        const tokenId = (s: string) => t.tokenId(s) ?? -1;
        expect(deliveredIds).not.toContain(tokenId('<tool_call>'));
        expect(deliveredIds).not.toContain(tokenId('</tool_call>'));
        expect(t.decode(deliveredIds)).not.toBe(`${expectedText}<|im_end|>`);
      });
    }
  });
}

describe('vLLM fixtures: completions', () => {
  const request = readJson<{ prompt: number[]; logprobs: number; return_token_ids: boolean }>(
    'completions.request.json',
  );
  const response = readJson<{
    choices: {
      text: string;
      logprobs: LegacyLogprobs;
      finish_reason: string;
      stop_reason: null;
      token_ids: number[];
      prompt_logprobs: null;
      prompt_token_ids: number[];
    }[];
    usage: Usage;
  }>('completions.json');
  const choice = response.choices[0];
  if (!choice) throw new Error('no choice');

  it('has the fields of vLLM 0.10.2 - 0.11.x in their order', () => {
    expect(Object.keys(response)).toEqual([
      'id',
      'object',
      'created',
      'model',
      'choices',
      'service_tier',
      'system_fingerprint',
      'usage',
      'kv_transfer_params',
    ]);
    expect(Object.keys(choice)).toEqual([
      'index',
      'text',
      'logprobs',
      'finish_reason',
      'stop_reason',
      'token_ids',
      'prompt_logprobs',
      'prompt_token_ids',
    ]);
  });

  it('echoes the prompt ids it was given, a rendered Qwen3 chat', () => {
    expect(request.return_token_ids).toBe(true);
    expect(choice.prompt_token_ids).toEqual(request.prompt);
    const prompt = t.decode(request.prompt);
    expect(prompt.startsWith('<|im_start|>user\n')).toBe(true);
    expect(prompt.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true);
  });

  it('carries completion ids that decode to the text plus <|im_end|>, with legacy logprobs for each', () => {
    expect(t.decode(choice.token_ids)).toBe(`${choice.text}<|im_end|>`);
    expect(choice.token_ids.at(-1)).toBe(EOS);
    expect(choice).toMatchObject({ finish_reason: 'stop', stop_reason: null });
    expectLegacyLogprobs(choice.logprobs, choice.token_ids, request.logprobs, 0);
    expectUsage(response.usage, request.prompt.length, choice.token_ids.length);
  });
});

describe('vLLM fixtures: completions stream', () => {
  const request = readJson<{ prompt: number[]; logprobs: number; stream: boolean }>(
    'completions-stream.request.json',
  );
  const chunks = readSse<CompletionChunk>('completions-stream.sse');
  const body = chunks.slice(0, -1);
  const usageChunk = chunks.at(-1);
  const text = readJson<{ choices: { text: string }[] }>('completions.json').choices[0]?.text ?? '';

  it('sends every choice field, nulls included, and the prompt ids on the first chunk only', () => {
    expect(request.stream).toBe(true);
    body.forEach((c, i) => {
      expect(Object.keys(c)).toEqual(['id', 'object', 'created', 'model', 'choices', 'usage']);
      expect(c.usage).toBeNull();
      expect(Object.keys(c.choices[0] ?? {})).toEqual([
        'index',
        'text',
        'logprobs',
        'finish_reason',
        'stop_reason',
        'prompt_token_ids',
        'token_ids',
      ]);
      expect(c.choices[0]?.prompt_token_ids).toEqual(i === 0 ? request.prompt : null);
    });
  });

  it('adds up to the same text and ids as the non-streamed completion', () => {
    const ids = body.flatMap((c) => c.choices[0]?.token_ids ?? []);
    expect(body.map((c) => c.choices[0]?.text ?? '').join('')).toBe(text);
    expect(t.decode(ids)).toBe(`${text}<|im_end|>`);
    let offset = 0;
    for (const c of body) {
      const choice = c.choices[0];
      if (!choice) throw new Error('no choice');
      expectLegacyLogprobs(choice.logprobs, choice.token_ids, request.logprobs, offset);
      offset += pyLen(choice.text);
    }
    expect(body.at(-1)?.choices[0]).toMatchObject({ text: '', finish_reason: 'stop', token_ids: [EOS] });
    expect(body.slice(0, -1).every((c) => c.choices[0]?.finish_reason === null)).toBe(true);
    expect(usageChunk?.choices).toEqual([]);
    expectUsage(usageChunk?.usage, request.prompt.length, ids.length);
  });
});
