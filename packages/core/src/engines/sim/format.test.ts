import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { loadQwen3Tokenizer } from '../../text/index.js';
import { type SimChatRequest, SimEngine, type SimResult, type SimTextResult } from './engine.js';
import {
  type ChatCompletionChunk,
  toChatCompletion,
  toChatCompletionChunks,
  toTextCompletion,
  toTextCompletionChunks,
} from './format.js';
import { echoPolicy, type Policy, randomPolicy } from './policies.js';

const tok = loadQwen3Tokenizer();
const meta = { id: 'chatcmpl-sim-1', created: 1_700_000_000, model: 'sim' };
const tools = [
  {
    type: 'function' as const,
    function: { name: 'read_file', parameters: { type: 'object', properties: { path: { type: 'string' } } } },
  },
];
const req = (over: Partial<SimChatRequest> = {}): SimChatRequest => ({
  messages: [{ role: 'user', content: 'Grüße 🌍 and 你好' }],
  seed: 3,
  ...over,
});
const fixed =
  (out: ReturnType<Policy>): Policy =>
  () =>
    out;

/** What an OpenAI client rebuilds from the stream. */
function assemble(chunks: ChatCompletionChunk[]) {
  let content = '';
  let reasoning = '';
  let finish: string | null = null;
  const ids: number[] = [];
  const logprobs: number[] = [];
  const calls: { id: string; name: string; arguments: string }[] = [];
  let usage: unknown;
  for (const chunk of chunks) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      content += choice.delta.content ?? '';
      reasoning += choice.delta.reasoning_content ?? '';
      for (const tc of choice.delta.tool_calls ?? []) {
        calls[tc.index] ??= { id: '', name: '', arguments: '' };
        const c = calls[tc.index]!;
        c.id ||= tc.id;
        c.name += tc.function.name;
        c.arguments += tc.function.arguments;
      }
      ids.push(...(choice.token_ids ?? []));
      logprobs.push(...(choice.logprobs?.content.map((e) => e.logprob) ?? []));
      finish = choice.finish_reason ?? finish;
    }
  }
  return { content, reasoning, finish, ids, logprobs, calls, usage };
}

function checkStream(r: SimResult) {
  const timed = toChatCompletionChunks(r, meta, tok);
  const chunks = timed.map((t) => t.chunk);
  const full = toChatCompletion(r, meta, tok);
  const got = assemble(chunks);
  const message = full.choices[0]!.message;
  expect(got.content).toBe(message.content ?? '');
  expect(got.reasoning).toBe(message.reasoning_content ?? '');
  expect(got.calls).toEqual(message.tool_calls.map((c) => ({ id: c.id, ...c.function })));
  expect(got.finish).toBe(full.choices[0]!.finish_reason);
  if (r.options.returnTokenIds) {
    expect(got.ids).toEqual(r.tokenIds);
    expect(chunks[0]?.prompt_token_ids).toEqual(r.promptTokenIds);
  }
  if (r.options.logprobs) expect(got.logprobs).toEqual(r.logprobs);
  // Chunks are paced by the tokens they carry: never decreasing, ending at the last token.
  const through = timed.map((t) => t.tokensThrough);
  expect(through).toEqual([...through].sort((a, b) => a - b));
  expect(through.at(-1)).toBe(r.tokenIds.length);
  return { chunks, full, got };
}

describe('toChatCompletion', () => {
  it('builds the vLLM body with ids, usage and OpenAI logprobs', () => {
    const r = new SimEngine({ policy: echoPolicy }).complete(req({ logprobs: true, top_logprobs: 2 }));
    const body = toChatCompletion(r, meta, tok);
    expect(body).toMatchObject({
      id: meta.id,
      object: 'chat.completion',
      created: meta.created,
      model: 'sim',
      prompt_token_ids: r.promptTokenIds,
      usage: r.usage,
      choices: [
        {
          index: 0,
          message: { role: 'assistant', content: 'Grüße 🌍 and 你好', tool_calls: [] },
          finish_reason: 'stop',
          stop_reason: null,
          token_ids: r.tokenIds,
        },
      ],
    });
    const content = body.choices[0]!.logprobs!.content;
    expect(content).toHaveLength(r.tokenIds.length);
    expect(content.at(-1)?.token).toBe('<|im_end|>');
    expect(content[0]?.top_logprobs).toHaveLength(2);
    expect(content[0]?.top_logprobs[0]?.logprob).toBe(content[0]?.logprob);
    for (const e of content) expect(Buffer.from(e.bytes).toString('utf8')).toBe(e.token);
    // The JSON is what goes on the wire: it must survive serialisation unchanged.
    expect(JSON.parse(JSON.stringify(body))).toEqual(body);
  });

  it('reports tool_calls, and omits logprobs and ids when not asked', () => {
    const r = new SimEngine({
      policy: fixed({ toolCalls: [{ name: 'read_file', arguments: { path: 'a' } }] }),
    }).complete(req({ tools, return_token_ids: false }));
    const body = toChatCompletion(r, meta, tok);
    const choice = body.choices[0]!;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    expect(choice.message.tool_calls).toEqual([
      {
        id: r.toolCalls[0]!.id,
        type: 'function',
        function: { name: 'read_file', arguments: '{"path": "a"}' },
      },
    ]);
    expect(choice.logprobs).toBeNull();
    expect(choice.token_ids).toBeNull();
    expect(body.prompt_token_ids).toBeNull();
  });
});

describe('toChatCompletionChunks', () => {
  it('streams a role chunk, content token by token, the finish and the usage chunk', () => {
    const r = new SimEngine({ policy: echoPolicy }).complete(
      req({ logprobs: true, stream: true, stream_options: { include_usage: true } }),
    );
    const { chunks, got } = checkStream(r);
    expect(chunks[0]?.choices[0]?.delta).toEqual({ role: 'assistant', content: '' });
    expect(chunks.every((c) => c.object === 'chat.completion.chunk' && c.id === meta.id)).toBe(true);
    // One chunk per content token, then the EOS/finish chunk, then usage.
    expect(chunks).toHaveLength(1 + (r.tokenIds.length - 1) + 1 + 1);
    expect(chunks.at(-2)?.choices[0]?.token_ids).toEqual([tok.tokenId('<|im_end|>')]);
    expect(chunks.at(-1)?.choices).toEqual([]);
    expect(got.usage).toEqual(r.usage);
  });

  it('streams text then each tool call whole', () => {
    const calls = [
      { name: 'read_file', arguments: { path: 'x/ü.ts' } },
      { name: 'read_file', arguments: { path: 'y' } },
    ];
    const r = new SimEngine({ policy: fixed({ text: 'Looking 🌍.', toolCalls: calls }) }).complete(
      req({ tools }),
    );
    const { chunks } = checkStream(r);
    const callChunks = chunks.filter((c) => c.choices[0]?.delta.tool_calls);
    expect(callChunks).toHaveLength(2);
    expect(tok.decode(callChunks[1]!.choices[0]!.token_ids!)).toBe(
      '\n<tool_call>\n{"name": "read_file", "arguments": {"path": "y"}}\n</tool_call>',
    );
  });

  it('streams reasoning, truncated output and stop strings consistently', () => {
    checkStream(new SimEngine({ policy: fixed({ reasoning: 'think 🤔', text: 'ok' }) }).complete(req()));
    checkStream(
      new SimEngine({
        policy: fixed({ toolCalls: [{ name: 'read_file', arguments: { path: 'a' } }] }),
      }).complete(req({ tools, max_tokens: 5, logprobs: true })),
    );
    const stopped = new SimEngine({ policy: fixed({ text: 'a b STOP c' }) }).complete(req({ stop: 'STOP' }));
    const { chunks } = checkStream(stopped);
    expect(chunks.at(-1)?.choices[0]).toMatchObject({
      finish_reason: 'stop',
      stop_reason: 'STOP',
      token_ids: [],
    });
  });

  it('property: any seed, any max_tokens, chunks reassemble to the full response', () => {
    const engine = new SimEngine({ policy: randomPolicy({ toolCallRate: 0.5 }) });
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.option(fc.integer({ min: 1, max: 40 })),
        (seed, max) => {
          checkStream(engine.complete(req({ tools, seed, max_tokens: max, logprobs: true })));
        },
      ),
      { numRuns: 60 },
    );
  });
});

const codePoints = (t: string) => [...t].length;

/** Streams a text result and checks it against the non-streaming body, as a client would see it. */
function checkTextStream(r: SimTextResult) {
  const timed = toTextCompletionChunks(r, meta, tok);
  const chunks = timed.map((t) => t.chunk);
  const full = toTextCompletion(r, meta, tok);
  const choices = chunks.flatMap((c) => c.choices);
  expect(chunks.every((c) => c.object === 'text_completion' && c.id === meta.id)).toBe(true);
  expect(choices.map((c) => c.text).join('')).toBe(full.choices[0]!.text);
  expect(choices.at(-1)?.finish_reason).toBe(full.choices[0]!.finish_reason);
  expect(choices.at(-1)?.stop_reason).toBe(full.choices[0]!.stop_reason);
  expect(choices.slice(0, -1).every((c) => c.finish_reason === null)).toBe(true);
  if (r.options.returnTokenIds) {
    expect(choices.flatMap((c) => c.token_ids ?? [])).toEqual(r.tokenIds);
    expect(choices[0]?.prompt_token_ids).toEqual(r.promptTokenIds);
    expect(choices.slice(1).every((c) => c.prompt_token_ids === null)).toBe(true);
  } else {
    expect(choices.every((c) => c.token_ids === null && c.prompt_token_ids === null)).toBe(true);
  }
  if (r.options.logprobs !== null) {
    expect(choices.flatMap((c) => c.logprobs!.token_logprobs)).toEqual(r.logprobs);
    expect(choices.flatMap((c) => c.logprobs!.tokens)).toEqual(full.choices[0]!.logprobs!.tokens);
    // vLLM counts a streamed chunk's offsets from the text already sent.
    let sent = '';
    for (const c of choices) {
      if (c.logprobs!.text_offset.length > 0) expect(c.logprobs!.text_offset[0]).toBe(codePoints(sent));
      sent += c.text;
    }
  }
  const through = timed.map((t) => t.tokensThrough);
  expect(through).toEqual([...through].sort((a, b) => a - b));
  expect(through.at(-1)).toBe(r.tokenIds.length);
  return { chunks, full };
}

describe('toTextCompletion', () => {
  it('builds the vLLM text_completion body with ids in the choice and legacy logprobs', () => {
    const r = new SimEngine({ policy: echoPolicy }).completeText({
      prompt: 'Grüße 🌍 and 你好',
      seed: 3,
      logprobs: 2,
      max_tokens: null,
    });
    const body = toTextCompletion(r, meta, tok);
    expect(body).toMatchObject({
      id: meta.id,
      object: 'text_completion',
      created: meta.created,
      model: 'sim',
      choices: [
        {
          index: 0,
          text: 'Grüße 🌍 and 你好',
          finish_reason: 'stop',
          stop_reason: null,
          prompt_logprobs: null,
          prompt_token_ids: r.promptTokenIds,
          token_ids: r.tokenIds,
        },
      ],
      usage: r.usage,
      system_fingerprint: null,
    });
    const lp = body.choices[0]!.logprobs!;
    expect(lp.tokens).toHaveLength(r.tokenIds.length);
    expect(lp.tokens.at(-1)).toBe('<|im_end|>');
    expect(lp.token_logprobs).toEqual(r.logprobs);
    // Offsets: each token starts where the previous decoded token (in code points) ended.
    expect(lp.text_offset[0]).toBe(0);
    for (let i = 1; i < lp.tokens.length; i++) {
      expect(lp.text_offset[i]).toBe(lp.text_offset[i - 1]! + codePoints(lp.tokens[i - 1]!));
    }
    lp.top_logprobs.forEach((top, i) => {
      expect(Object.keys(top)).toHaveLength(2);
      expect(top[lp.tokens[i]!]).toBe(lp.token_logprobs[i]);
      expect(Math.max(...Object.values(top))).toBe(lp.token_logprobs[i]);
    });
    expect(JSON.parse(JSON.stringify(body))).toEqual(body);
  });

  it('omits ids and logprobs when not asked', () => {
    const r = new SimEngine({ policy: echoPolicy }).completeText({ prompt: 'abc', return_token_ids: false });
    const choice = toTextCompletion(r, meta, tok).choices[0]!;
    expect(choice.logprobs).toBeNull();
    expect(choice.token_ids).toBeNull();
    expect(choice.prompt_token_ids).toBeNull();
  });
});

describe('toTextCompletionChunks', () => {
  it('streams token by token, the EOS chunk last with the finish reason, then usage', () => {
    const r = new SimEngine({ policy: echoPolicy }).completeText({
      prompt: 'Grüße 🌍 and 你好',
      seed: 3,
      logprobs: 1,
      stream: true,
      stream_options: { include_usage: true },
    });
    const { chunks } = checkTextStream(r);
    // One chunk per token, then usage; no role chunk.
    expect(chunks).toHaveLength(r.tokenIds.length + 1);
    expect(chunks.at(-2)?.choices[0]).toMatchObject({
      text: '',
      finish_reason: 'stop',
      token_ids: [tok.tokenId('<|im_end|>')],
    });
    expect(chunks.at(-1)).toEqual({ ...chunks.at(-1), choices: [], usage: r.usage });
    expect(chunks.slice(0, -1).every((c) => c.usage === null)).toBe(true);
    // The emoji spans two tokens: the first of them sends no text yet.
    expect(chunks.some((c) => c.choices[0]?.text === '' && c.choices[0]?.finish_reason === null)).toBe(true);
  });

  it('a text stopped before its first token still ends with one chunk', () => {
    const r = new SimEngine({ policy: echoPolicy }).completeText({ prompt: 'STOP here', stop: ['STOP'] });
    const { chunks } = checkTextStream(r);
    expect(chunks).toHaveLength(1);
    expect(chunks[0]?.choices[0]).toMatchObject({ text: '', token_ids: [], stop_reason: 'STOP' });
  });

  it('property: any seed, max_tokens, logprobs and stop, chunks reassemble to the full response', () => {
    const engine = new SimEngine({ policy: randomPolicy() });
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 2 ** 31 }),
        fc.option(fc.integer({ min: 1, max: 40 })),
        fc.option(fc.integer({ min: 0, max: 5 })),
        fc.constantFrom(undefined, 'ok', ['done', 'e']),
        fc.boolean(),
        (seed, max, logprobs, stop, returnTokenIds) => {
          checkTextStream(
            engine.completeText({
              prompt: 'Grüße 🌍',
              seed,
              max_tokens: max,
              logprobs,
              stop,
              return_token_ids: returnTokenIds,
            }),
          );
        },
      ),
      { numRuns: 60 },
    );
  });
});
