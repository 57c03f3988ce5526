import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CompletionCapture } from './capture.js';

const fixtures = join(import.meta.dirname, '../../../../test/fixtures/vllm');
const json = (name: string): Record<string, unknown> =>
  JSON.parse(readFileSync(join(fixtures, name), 'utf8')) as Record<string, unknown>;

/** The JSON chunks of an SSE fixture (`data: <json>` events, without the closing `[DONE]`). */
function sse(name: string): Record<string, unknown>[] {
  return readFileSync(join(fixtures, name), 'utf8')
    .split('\n\n')
    .map((event) => event.trim())
    .filter((event) => event.startsWith('data: ') && event !== 'data: [DONE]')
    .map((event) => JSON.parse(event.slice('data: '.length)) as Record<string, unknown>);
}

interface FixtureChoice {
  token_ids: number[];
  prompt_token_ids?: number[];
  message?: { content: string };
  text?: string;
  logprobs: { content?: { logprob: number }[]; token_logprobs?: number[] };
}
const firstChoice = (answer: Record<string, unknown>) => (answer.choices as FixtureChoice[])[0]!;

/** A clock the test moves by hand. */
function manualClock(start = 0) {
  const clock = { now: start, read: () => clock.now };
  return clock;
}

const chunk = (choice: Record<string, unknown>, extra: Record<string, unknown> = {}) => ({
  object: 'chat.completion.chunk',
  model: 'm',
  choices: [{ index: 0, finish_reason: null, ...choice }],
  ...extra,
});
const lp = (...values: number[]) => ({ content: values.map((logprob) => ({ token: 't', logprob })) });

describe('CompletionCapture: whole answers', () => {
  it('captures the recorded vLLM chat.completion exactly', () => {
    const answer = json('chat-completion.json');
    const choice = firstChoice(answer);
    const capture = new CompletionCapture();
    capture.addCompletion(answer);
    const r = capture.result();
    expect(r.promptIds).toEqual(answer.prompt_token_ids);
    expect(r.promptIds).toHaveLength(38);
    expect(r.responseIds).toEqual(choice.token_ids);
    expect(r.responseIds).toHaveLength(23);
    expect(r.responseIds!.at(-1)).toBe(151645); // <|im_end|> is kept
    expect(r.logprobs).toEqual(choice.logprobs.content!.map((e) => e.logprob));
    expect(r.content).toBe('Water boils at 100 °C (212 °F) at sea level. 💧');
    expect(r.reasoning).toBeNull(); // reasoning_content: null
    expect(r.toolCalls).toEqual([]);
    expect(r.finishReason).toBe('stop');
    expect(r.model).toBe('Qwen/Qwen3-8B');
    expect(r.usage).toMatchObject({ prompt_tokens: 38, completion_tokens: 23 });
    expect(r.idsIncomplete).toBe(false);
    expect(capture.generated).toBe(true);
  });

  it('captures reasoning and tool calls of a chat message', () => {
    const capture = new CompletionCapture();
    capture.addCompletion({
      model: 'm',
      prompt_token_ids: [1, 2],
      choices: [
        {
          message: {
            role: 'assistant',
            content: null,
            reasoning_content: 'think first',
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{"dir":"."}' } },
              { id: 'call_2', type: 'function', function: { name: 'cat', arguments: '{"f":"a"}' } },
            ],
          },
          finish_reason: 'tool_calls',
          token_ids: [5, 6, 7],
          logprobs: lp(-0.1, -0.2, -0.3),
        },
      ],
    });
    const r = capture.result();
    expect(r.content).toBe('');
    expect(r.reasoning).toBe('think first');
    expect(r.toolCalls).toEqual([
      { id: 'call_1', type: 'function', function: { name: 'ls', arguments: '{"dir":"."}' } },
      { id: 'call_2', type: 'function', function: { name: 'cat', arguments: '{"f":"a"}' } },
    ]);
    expect(r.finishReason).toBe('tool_calls');
    expect(r.promptIds).toEqual([1, 2]);
    expect(r.responseIds).toEqual([5, 6, 7]);
    expect(r.logprobs).toEqual([-0.1, -0.2, -0.3]);
  });

  it('reads `reasoning` (the newer vLLM name) as well', () => {
    const capture = new CompletionCapture();
    capture.addCompletion({ choices: [{ message: { content: 'x', reasoning: 'hmm' } }] });
    expect(capture.result().reasoning).toBe('hmm');
  });

  it('captures the recorded text_completion: text, prompt ids in the choice, legacy logprobs', () => {
    const answer = json('completions.json');
    const choice = firstChoice(answer);
    const capture = new CompletionCapture();
    capture.addCompletion(answer);
    const r = capture.result();
    expect(r.content).toBe('The capital of France is Paris.');
    expect(r.promptIds).toEqual(choice.prompt_token_ids);
    expect(r.promptIds).toHaveLength(24);
    expect(r.responseIds).toEqual([785, 6722, 315, 9625, 374, 12095, 13, 151645]);
    expect(r.logprobs).toEqual(choice.logprobs.token_logprobs);
    expect(r.finishReason).toBe('stop');
    expect(r.idsIncomplete).toBe(false);
  });

  it('gives null ids and logprobs for a plain OpenAI answer that has none', () => {
    const capture = new CompletionCapture();
    capture.addCompletion({
      model: 'gpt',
      choices: [{ message: { content: 'hi' }, finish_reason: 'stop' }],
      usage: { prompt_tokens: 3, completion_tokens: 1 },
    });
    const r = capture.result();
    expect(r).toMatchObject({ promptIds: null, responseIds: null, logprobs: null, content: 'hi' });
    expect(r.idsIncomplete).toBe(false);
    expect(r.usage).toEqual({ prompt_tokens: 3, completion_tokens: 1 });
  });

  it('ignores what is not an answer', () => {
    const capture = new CompletionCapture();
    capture.addCompletion(null);
    capture.addCompletion('text');
    capture.addCompletion({ choices: [] });
    capture.addChunk([1, 2]);
    expect(capture.generated).toBe(false);
    expect(capture.result()).toEqual({
      promptIds: null,
      responseIds: null,
      logprobs: null,
      content: '',
      reasoning: null,
      toolCalls: [],
      finishReason: null,
      usage: null,
      model: null,
      idsIncomplete: false,
      versionSpans: null,
    });
  });
});

describe('CompletionCapture: malformed answers', () => {
  it('names ids that are not token ids, in a whole answer, and keeps none of them', () => {
    const capture = new CompletionCapture();
    capture.addCompletion({
      object: 'chat.completion',
      prompt_token_ids: [1, 2],
      choices: [{ index: 0, message: { content: 'hi' }, token_ids: [5, 'x'], finish_reason: 'stop' }],
    });
    const r = capture.result();
    expect(r.malformed).toMatch(/^choices\.0\.token_ids\.1: /);
    expect([r.promptIds, r.responseIds, r.logprobs]).toEqual([null, null, null]);
    expect(r.content).toBe('hi');
  });

  it('names the first malformed field of a stream, even in a chunk that carries only ids', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'a' }, token_ids: [10] }, { prompt_token_ids: [1] }));
    capture.addChunk(chunk({ delta: {}, token_ids: [-1] }));
    capture.addChunk(chunk({ delta: {}, token_ids: [1.5] }));
    const r = capture.result();
    expect(r.malformed).toMatch(/^choices\.0\.token_ids\.0: .*>=0/);
    expect(r.responseIds).toBeNull();
    expect(new CompletionCapture().result().malformed).toBeUndefined();
  });

  it('names malformed prompt ids at the top of an answer', () => {
    const capture = new CompletionCapture();
    capture.addCompletion({ prompt_token_ids: [1, null], choices: [{ text: 'x', token_ids: [3] }] });
    expect(capture.result().malformed).toMatch(/^prompt_token_ids\.1: /);
  });

  it('keeps usage as it came but reads only numeric counts', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'ok' }, token_ids: [10] }));
    capture.addChunk({ choices: [], usage: { completion_tokens: '7', prompt_tokens: 3, total_tokens: 10 } });
    const r = capture.result();
    expect(r.usage).toEqual({ prompt_tokens: 3, total_tokens: 10 });
    // A count that is no number says nothing about missing ids.
    expect([r.responseIds, r.idsIncomplete]).toEqual([[10], false]);
  });
});

describe('CompletionCapture: streams', () => {
  it('merges the recorded hermes tool-call stream and flags the ids vLLM dropped', () => {
    const chunks = sse('chat-stream-tools.sse');
    const capture = new CompletionCapture();
    for (const c of chunks) capture.addChunk(c);
    const r = capture.result();
    expect(r.promptIds).toEqual(chunks[0]!.prompt_token_ids);
    expect(r.toolCalls).toEqual([
      {
        id: 'chatcmpl-tool-4c8e2a6f0b3d4e1f9a7c5b3d1e2f4a6b',
        type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Paris", "unit": "celsius"}' },
      },
    ]);
    expect(r.content).toBe('');
    expect(r.finishReason).toBe('tool_calls');
    expect(r.usage).toEqual({ prompt_tokens: 200, total_tokens: 227, completion_tokens: 27 });
    // Only 12 of the 27 generated ids arrived (vLLM issue 27482): the ids cannot be used.
    expect(r.idsIncomplete).toBe(true);
    expect(r.responseIds).toBeNull();
    expect(r.logprobs).toBeNull();
    expect(capture.generated).toBe(true);
  });

  it('keeps every id and logprob of the fixed stream (one chunk per token)', () => {
    const chunks = sse('chat-stream-tools.all-token-ids.sse');
    const expectedIds = chunks.flatMap((c) =>
      ((c.choices as { token_ids?: number[] }[])[0]?.token_ids ?? []).map(Number),
    );
    expect(expectedIds).toHaveLength(27);
    const capture = new CompletionCapture();
    for (const c of chunks) capture.addChunk(c);
    const r = capture.result();
    expect(r.idsIncomplete).toBe(false);
    expect(r.responseIds).toEqual(expectedIds);
    expect(r.logprobs).toHaveLength(27);
    expect(r.logprobs!.every((v) => v < 0)).toBe(true);
    expect(r.toolCalls[0]!.function.arguments).toBe('{"city": "Paris", "unit": "celsius"}');
  });

  it('gives the same capture for the streamed completion as for the whole one', () => {
    const streamed = new CompletionCapture();
    for (const c of sse('completions-stream.sse')) streamed.addChunk(c);
    const whole = new CompletionCapture();
    whole.addCompletion(json('completions.json'));
    const s = streamed.result();
    const w = whole.result();
    expect(s.content).toBe('The capital of France is Paris.');
    expect(s.responseIds).toEqual(w.responseIds);
    expect(s.promptIds).toEqual(w.promptIds);
    expect(s.logprobs).toEqual(w.logprobs);
    expect(s.finishReason).toBe('stop');
    expect(s.usage).toEqual({ prompt_tokens: 24, total_tokens: 32, completion_tokens: 8 });
    expect(s.idsIncomplete).toBe(false);
  });

  it('merges tool-call deltas by index: id and name first, then argument fragments', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { role: 'assistant', content: '' } }, { prompt_token_ids: [9, 8] }));
    capture.addChunk(
      chunk({
        delta: { tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'read' } }] },
        token_ids: [1],
        logprobs: lp(-1),
      }),
    );
    capture.addChunk(
      chunk({
        delta: { tool_calls: [{ index: 0, function: { arguments: '{"path": ' } }] },
        token_ids: [2],
        logprobs: lp(-2),
      }),
    );
    // A second call starts, then the first one's arguments continue.
    capture.addChunk(
      chunk({
        delta: { tool_calls: [{ index: 1, id: 'call_b', type: 'function', function: { name: 'ls' } }] },
        token_ids: [3],
        logprobs: lp(-3),
      }),
    );
    capture.addChunk(
      chunk({
        delta: {
          tool_calls: [
            { index: 1, function: { arguments: '{}' } },
            { index: 0, function: { arguments: '"a.txt"}' } },
          ],
        },
        token_ids: [4, 5],
        logprobs: lp(-4, -5),
      }),
    );
    capture.addChunk(
      chunk({ delta: { content: '' }, finish_reason: 'tool_calls', token_ids: [6], logprobs: lp(-6) }),
    );
    capture.addChunk({ choices: [], usage: { prompt_tokens: 2, completion_tokens: 6 } });
    const r = capture.result();
    expect(r.toolCalls).toEqual([
      { id: 'call_a', type: 'function', function: { name: 'read', arguments: '{"path": "a.txt"}' } },
      { id: 'call_b', type: 'function', function: { name: 'ls', arguments: '{}' } },
    ]);
    expect(r.promptIds).toEqual([9, 8]);
    expect(r.responseIds).toEqual([1, 2, 3, 4, 5, 6]);
    expect(r.logprobs).toEqual([-1, -2, -3, -4, -5, -6]);
    expect(r.finishReason).toBe('tool_calls');
    expect(r.idsIncomplete).toBe(false);
  });

  it('orders tool calls by index whatever order they started in', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { tool_calls: [{ index: 2, id: 'c2', function: { name: 'z' } }] } }));
    capture.addChunk(chunk({ delta: { tool_calls: [{ index: 0, id: 'c0', function: { name: 'x' } }] } }));
    expect(capture.result().toolCalls.map((c) => c.id)).toEqual(['c0', 'c2']);
  });

  it('gathers streamed content and reasoning', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { reasoning_content: 'Let me ' } }));
    capture.addChunk(chunk({ delta: { reasoning_content: 'think.' } }));
    capture.addChunk(chunk({ delta: { content: 'Hello' } }));
    capture.addChunk(chunk({ delta: { content: ', world' }, finish_reason: 'length' }));
    const r = capture.result();
    expect(r.reasoning).toBe('Let me think.');
    expect(r.content).toBe('Hello, world');
    expect(r.finishReason).toBe('length');
    expect(r.model).toBe('m');
  });

  it('keeps the first model name and the first prompt ids', () => {
    const capture = new CompletionCapture();
    capture.addChunk(
      chunk({ delta: { content: 'a' }, token_ids: [1] }, { model: 'first', prompt_token_ids: [7] }),
    );
    capture.addChunk(
      chunk({ delta: { content: 'b' }, token_ids: [2] }, { model: 'second', prompt_token_ids: [8] }),
    );
    const r = capture.result();
    expect(r.model).toBe('first');
    expect(r.promptIds).toEqual([7]);
  });

  it('gives null ids (and logprobs) when some token-carrying chunk had none', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'Hel' }, token_ids: [10], logprobs: lp(-1) }));
    capture.addChunk(chunk({ delta: { content: 'lo' }, logprobs: lp(-2) })); // no token_ids
    capture.addChunk(chunk({ delta: { content: '!' }, token_ids: [12], logprobs: lp(-3) }));
    capture.addChunk({ choices: [], usage: { completion_tokens: 3 } });
    const r = capture.result();
    expect(r.responseIds).toBeNull();
    expect(r.logprobs).toBeNull();
    expect(r.idsIncomplete).toBe(false); // missing, not incomplete
    expect(r.content).toBe('Hello!');
  });

  it('does not count a finish-only or usage chunk without ids as missing ids', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'ok' }, token_ids: [10], logprobs: lp(-1) }));
    capture.addChunk(chunk({ delta: {}, finish_reason: 'stop' }));
    capture.addChunk(chunk({ delta: { content: '' }, finish_reason: 'stop' }));
    capture.addChunk({ choices: [], usage: { completion_tokens: 1 } });
    const r = capture.result();
    expect(r.responseIds).toEqual([10]);
    expect(r.logprobs).toEqual([-1]);
  });

  it('keeps the ids but drops the logprobs when their counts differ', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'ab' }, token_ids: [1, 2], logprobs: lp(-1) }));
    capture.addChunk(chunk({ delta: { content: 'c' }, token_ids: [3], logprobs: lp(-3) }));
    const r = capture.result();
    expect(r.responseIds).toEqual([1, 2, 3]);
    expect(r.logprobs).toBeNull();
  });

  it('drops misaligned logprobs even when the totals agree', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'ab' }, token_ids: [1, 2], logprobs: lp(-1) }));
    capture.addChunk(chunk({ delta: { content: 'c' }, token_ids: [3], logprobs: lp(-2, -3) }));
    const r = capture.result();
    expect(r.responseIds).toEqual([1, 2, 3]);
    expect(r.logprobs).toBeNull();
  });

  it('drops the logprobs when a chunk had none, or a non-numeric one', () => {
    const none = new CompletionCapture();
    none.addChunk(chunk({ delta: { content: 'a' }, token_ids: [1], logprobs: lp(-1) }));
    none.addChunk(chunk({ delta: { content: 'b' }, token_ids: [2], logprobs: null }));
    expect(none.result().responseIds).toEqual([1, 2]);
    expect(none.result().logprobs).toBeNull();

    const bad = new CompletionCapture();
    bad.addChunk(
      chunk({ delta: { content: 'a' }, token_ids: [1, 2], logprobs: { content: [{ logprob: -1 }, {}] } }),
    );
    expect(bad.result().responseIds).toEqual([1, 2]);
    expect(bad.result().logprobs).toBeNull();
  });

  it('flags ids as incomplete when usage counts more tokens than arrived', () => {
    const capture = new CompletionCapture();
    capture.addChunk(chunk({ delta: { content: 'a' }, token_ids: [1], logprobs: lp(-1) }));
    capture.addChunk(chunk({ delta: { content: 'b' }, token_ids: [2], logprobs: lp(-2) }));
    capture.addChunk({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 3 } });
    const r = capture.result();
    expect(r.idsIncomplete).toBe(true);
    expect(r.responseIds).toBeNull();
    expect(r.logprobs).toBeNull();

    const exact = new CompletionCapture();
    exact.addChunk(chunk({ delta: { content: 'a' }, token_ids: [1], logprobs: lp(-1) }));
    exact.addChunk({ choices: [], usage: { completion_tokens: 1 } });
    expect(exact.result().idsIncomplete).toBe(false);
    expect(exact.result().responseIds).toEqual([1]);
  });

  it('streams text completions (choices[].text, token_logprobs, prompt ids in the choice)', () => {
    const capture = new CompletionCapture();
    capture.addChunk({
      object: 'text_completion',
      choices: [
        { text: 'Hi', token_ids: [4], prompt_token_ids: [1, 2, 3], logprobs: { token_logprobs: [-0.5] } },
      ],
      usage: null,
    });
    capture.addChunk({
      object: 'text_completion',
      choices: [
        { text: ' there', token_ids: [5], prompt_token_ids: null, logprobs: { token_logprobs: [-0.25] } },
      ],
      usage: null,
    });
    capture.addChunk({
      object: 'text_completion',
      choices: [{ text: '', token_ids: [0], logprobs: { token_logprobs: [null] }, finish_reason: 'stop' }],
    });
    const r = capture.result();
    expect(r.content).toBe('Hi there');
    expect(r.promptIds).toEqual([1, 2, 3]);
    expect(r.responseIds).toEqual([4, 5, 0]);
    expect(r.logprobs).toBeNull(); // one logprob was null
    expect(r.finishReason).toBe('stop');
  });
});

describe('CompletionCapture: time to first token', () => {
  it('is set by the first chunk that carries tokens, never by the role chunk or later ones', () => {
    const clock = manualClock(1_000);
    const capture = new CompletionCapture(clock.read);
    const chunks = sse('chat-stream-tools.sse');
    capture.addChunk(chunks[0]); // role and prompt ids, content ""
    expect(capture.firstTokenAt).toBeNull();
    expect(capture.generated).toBe(false);
    clock.now = 1_250;
    capture.addChunk(chunks[1]); // the tool call's id and name, with its token
    expect(capture.firstTokenAt).toBe(1_250);
    for (const c of chunks.slice(2)) {
      clock.now += 10;
      capture.addChunk(c);
    }
    expect(capture.firstTokenAt).toBe(1_250);
  });

  it('is not set by finish or usage chunks, then set by content without ids', () => {
    const clock = manualClock();
    const capture = new CompletionCapture(clock.read);
    clock.now = 5;
    capture.addChunk(chunk({ delta: { role: 'assistant' } }));
    capture.addChunk({ choices: [], usage: { completion_tokens: 0 } });
    capture.addChunk(chunk({ delta: {}, finish_reason: null }));
    expect(capture.firstTokenAt).toBeNull();
    clock.now = 42;
    capture.addChunk(chunk({ delta: { content: 'x' } }));
    clock.now = 99;
    capture.addChunk(chunk({ delta: { content: 'y' } }));
    expect(capture.firstTokenAt).toBe(42);
  });

  it('is set by a chunk that carries only ids (an empty delta)', () => {
    const clock = manualClock(7);
    const capture = new CompletionCapture(clock.read);
    capture.addChunk(chunk({ delta: {}, token_ids: [151657], logprobs: lp(-0.1) }));
    expect(capture.firstTokenAt).toBe(7);
  });

  it('is left unset by a whole answer (it times chunks)', () => {
    const capture = new CompletionCapture(() => 3);
    capture.addCompletion(json('chat-completion.json'));
    expect(capture.firstTokenAt).toBeNull();
  });
});
