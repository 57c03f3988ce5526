import { describe, expect, it } from 'vitest';
import { renderChat } from '../../text/index.js';
import { seededRandom } from '../../util/random.js';
import {
  assistantTurns,
  assistantTurnsInPrompt,
  echoPolicy,
  injectError,
  type PolicyContext,
  randomPolicy,
  referencePolicy,
  type ScriptStep,
  scriptedPolicy,
} from './policies.js';

const tools = [
  {
    type: 'function' as const,
    function: {
      name: 'read_file',
      parameters: { type: 'object', properties: { path: { type: 'string' }, limit: { type: 'integer' } } },
    },
  },
];

function ctx(over: Partial<PolicyContext> = {}): PolicyContext {
  const seed = over.seed ?? 1;
  const messages = over.messages ?? [{ role: 'user', content: 'hi' }];
  return {
    messages,
    tools: [],
    seed,
    turn: assistantTurns(messages),
    random: seededRandom('policy', seed),
    ...over,
  };
}

const script: ScriptStep[] = [
  { toolCall: { name: 'read_file', arguments: { path: 'src/a.ts' } }, text: 'Reading the file.' },
  { toolCall: { name: 'run', arguments: { cmd: 'npm test' } } },
  { answer: 'All tests pass.' },
];

describe('echoPolicy', () => {
  it('repeats the last user message, flattening text parts', () => {
    const messages = [
      { role: 'user' as const, content: 'first' },
      { role: 'assistant' as const, content: 'x' },
      {
        role: 'user' as const,
        content: [
          { type: 'text' as const, text: 'a' },
          { type: 'text' as const, text: 'b' },
        ],
      },
    ];
    expect(echoPolicy(ctx({ messages }))).toEqual({ text: 'a\nb' });
    expect(echoPolicy(ctx({ messages: [{ role: 'system', content: 's' }] }))).toEqual({ text: '' });
  });

  it('without messages repeats a raw prompt, or the last user turn of a ChatML one', () => {
    expect(echoPolicy(ctx({ messages: [], prompt: 'Once upon a time' }))).toEqual({
      text: 'Once upon a time',
    });
    const prompt = renderChat({
      messages: [
        { role: 'user', content: 'list the files' },
        { role: 'assistant', content: null, tool_calls: [{ function: { name: 'ls', arguments: '{}' } }] },
        { role: 'tool', content: 'a.ts' },
      ],
      addGenerationPrompt: true,
    });
    // The tool result is a user turn too in Qwen3's template; echo skips it.
    expect(echoPolicy(ctx({ messages: [], prompt }))).toEqual({ text: 'list the files' });
  });
});

describe('assistantTurnsInPrompt', () => {
  it('counts completed assistant turns of a rendered conversation, 0 for plain text', () => {
    const messages = [
      { role: 'user' as const, content: 'a' },
      { role: 'assistant' as const, content: 'b' },
      { role: 'user' as const, content: 'c' },
      { role: 'assistant' as const, content: 'd' },
      { role: 'user' as const, content: 'e' },
    ];
    expect(assistantTurnsInPrompt(renderChat({ messages, addGenerationPrompt: true }))).toBe(2);
    expect(assistantTurnsInPrompt('plain text <|im_start|>assistant\n')).toBe(0);
  });
});

describe('randomPolicy', () => {
  it('is deterministic for a seed and differs across seeds', () => {
    const p = randomPolicy();
    expect(p(ctx({ seed: 7 }))).toEqual(p(ctx({ seed: 7 })));
    const outs = new Set(Array.from({ length: 10 }, (_, s) => JSON.stringify(p(ctx({ seed: s })))));
    expect(outs.size).toBeGreaterThan(5);
  });

  it('calls offered tools with schema-shaped arguments at the configured rate', () => {
    const p = randomPolicy({ toolCallRate: 1 });
    const out = p(ctx({ tools }));
    expect(out.toolCalls).toHaveLength(1);
    expect(out.toolCalls?.[0]?.name).toBe('read_file');
    expect(typeof out.toolCalls?.[0]?.arguments.path).toBe('string');
    expect(Number.isInteger(out.toolCalls?.[0]?.arguments.limit)).toBe(true);
    expect(randomPolicy({ toolCallRate: 1 })(ctx()).toolCalls).toBeUndefined();
  });

  it('honours toolChoice: never with none, always with required, the named tool when named', () => {
    const two = [...tools, { type: 'function' as const, function: { name: 'run' } }];
    const seeds = Array.from({ length: 30 }, (_, s) => s);
    const p = randomPolicy();
    // The default rate is 0.3: "auto" leaves some turns without a call.
    expect(seeds.some((seed) => p(ctx({ seed, tools: two })).toolCalls === undefined)).toBe(true);
    for (const seed of seeds) {
      expect(p(ctx({ seed, tools: two, toolChoice: 'none' })).toolCalls).toBeUndefined();
      expect(p(ctx({ seed, tools: two, toolChoice: 'required' })).toolCalls).toHaveLength(1);
      expect(p(ctx({ seed, tools: two, toolChoice: { name: 'run' } })).toolCalls).toEqual([
        { name: 'run', arguments: {} },
      ]);
    }
    // "auto" is the default: the same draws as before toolChoice existed.
    expect(p(ctx({ seed: 4, tools: two, toolChoice: 'auto' }))).toEqual(p(ctx({ seed: 4, tools: two })));
  });
});

describe('scriptedPolicy', () => {
  const at = (turn: number, p = scriptedPolicy(script)) => p(ctx({ turn }));

  it('follows the script by turn, then keeps giving the final answer', () => {
    expect(at(0)).toEqual({
      text: 'Reading the file.',
      toolCalls: [{ name: 'read_file', arguments: { path: 'src/a.ts' } }],
    });
    expect(at(1)).toEqual({ toolCalls: [{ name: 'run', arguments: { cmd: 'npm test' } }] });
    expect(at(2)).toEqual({ text: 'All tests pass.' });
    expect(at(5)).toEqual({ text: 'All tests pass.' });
  });

  it('with errorRate 1 injects a wrong call, then the correction on the next turn', () => {
    const p = scriptedPolicy(script, { errorRate: 1, errorKinds: ['wrong_argument'] });
    expect(at(0, p)).toEqual({ toolCalls: [{ name: 'read_file', arguments: { path: 'src/a.ts_wrong' } }] });
    expect(at(1, p)).toEqual({
      text: 'That call was wrong; retrying with the correct one.',
      toolCalls: [{ name: 'read_file', arguments: { path: 'src/a.ts' } }],
    });
    expect(at(2, p).toolCalls?.[0]).toEqual({ name: 'run', arguments: { cmd: 'npm test_wrong' } });
    expect(at(3, p).toolCalls?.[0]).toEqual({ name: 'run', arguments: { cmd: 'npm test' } });
    expect(at(4, p)).toEqual({ text: 'All tests pass.' });
  });

  it('draws the error plan from the seed, deterministically', () => {
    const p = scriptedPolicy(script, { errorRate: 0.5 });
    const plan = (seed: number) =>
      Array.from({ length: 6 }, (_, turn) => JSON.stringify(p(ctx({ turn, seed }))));
    expect(plan(3)).toEqual(plan(3));
    const plans = new Set(Array.from({ length: 20 }, (_, s) => plan(s).join('|')));
    expect(plans.size).toBeGreaterThan(1);
    // An explicit plan seed overrides the request's.
    const fixed = scriptedPolicy(script, { errorRate: 0.5, seed: 9 });
    expect(fixed(ctx({ turn: 0, seed: 1 }))).toEqual(fixed(ctx({ turn: 0, seed: 2 })));
  });

  it('with toolChoice none answers instead of calling (no injected error either)', () => {
    const p = scriptedPolicy(script, { errorRate: 1 });
    expect(p(ctx({ turn: 0, toolChoice: 'none' }))).toEqual({ text: 'All tests pass.' });
    expect(p(ctx({ turn: 2, toolChoice: 'none' }))).toEqual({ text: 'All tests pass.' });
    expect(p(ctx({ turn: 4, toolChoice: 'none' }))).toEqual(at(4, p));
    // "required" and named choices leave the script in charge.
    expect(p(ctx({ turn: 0, toolChoice: 'required' }))).toEqual(at(0, p));
  });

  it('picks a script per task and rejects a bad errorRate', () => {
    const p = scriptedPolicy((c) => (c.messages[0]?.content === 'task-b' ? [{ answer: 'B' }] : undefined));
    expect(p(ctx({ messages: [{ role: 'user', content: 'task-b' }] }))).toEqual({ text: 'B' });
    expect(p(ctx())).toEqual({ text: 'Done.' });
    expect(() => scriptedPolicy(script, { errorRate: 2 })).toThrow(/errorRate/);
  });
});

describe('injectError', () => {
  const call = { name: 'read_file', arguments: { path: 'a' } };
  it('renames the tool, or writes a block no parser accepts', () => {
    expect(injectError(call, 'unknown_tool')).toEqual({
      toolCalls: [{ name: 'read_file_v2', arguments: { path: 'a' } }],
    });
    const bad = injectError(call, 'malformed').text ?? '';
    expect(bad.startsWith('<tool_call>\n')).toBe(true);
    expect(() => JSON.parse(bad.slice('<tool_call>\n'.length, -'\n</tool_call>'.length))).toThrow();
    // No string argument to corrupt: falls back to a malformed block.
    expect(injectError({ name: 'x', arguments: { n: 1 } }, 'wrong_argument').text).toContain('<tool_call>');
  });
});

describe('reference policy', () => {
  const tasks = [
    {
      prompt: 'Write the total to output/total.txt.',
      actions: [
        { name: 'read', arguments: { path: 'input/data.csv' } },
        { name: 'write', arguments: { path: 'output/total.txt', content: '42' } },
      ],
    },
    { prompt: 'List the files.', actions: [{ name: 'ls', arguments: { path: '.' } }] },
  ];
  /** Plays an episode: each tool call is answered by a tool message, until the policy answers. */
  function episode(policy: ReturnType<typeof referencePolicy>, first: string, seed: number) {
    const messages: PolicyContext['messages'][number][] = [{ role: 'user', content: first }];
    const calls: string[] = [];
    for (let turn = 0; turn < 20; turn++) {
      const out = policy(ctx({ messages, seed }));
      if (!out.toolCalls) return { calls, answer: out.text ?? '', text: out.text };
      calls.push(...out.toolCalls.map((c) => `${c.name} ${JSON.stringify(c.arguments)}`));
      messages.push({ role: 'assistant', content: out.text ?? '' }, { role: 'tool', content: 'ok' });
    }
    throw new Error('the episode did not end');
  }

  it('follows the reference actions of the task the conversation opens with, then answers', () => {
    const run = episode(referencePolicy(tasks), 'List the files.', 1);
    expect(run.calls).toEqual(['ls {"path":"."}']);
    const other = episode(referencePolicy(tasks), 'Please help. Write the total to output/total.txt.', 1);
    expect(other.calls).toEqual([
      'read {"path":"input/data.csv"}',
      'write {"path":"output/total.txt","content":"42"}',
    ]);
    expect(other.answer).toMatch(/^Done/);
    expect(episode(referencePolicy(tasks), 'Something else entirely.', 1)).toMatchObject({
      calls: [],
      answer: 'Done.',
    });
  });

  it('injects wrong calls followed by the correct one, per episode seed', () => {
    const policy = referencePolicy(tasks, { errorRate: 1 });
    const run = episode(policy, 'Write the total to output/total.txt.', 3);
    // Every action is preceded by a wrong call (a wrong argument or an unknown tool), never by a
    // malformed block, which an agent would take for its final answer.
    expect(run.calls).toHaveLength(4);
    expect(run.calls[1]).toBe('read {"path":"input/data.csv"}');
    expect(run.calls[3]).toBe('write {"path":"output/total.txt","content":"42"}');
    expect(run.calls[0]).not.toBe(run.calls[1]);
    expect(run.calls[2]).not.toBe(run.calls[3]);
    expect(run.answer).toMatch(/^Done/);
  });

  it('gives up part way in some episodes when asked, and the same seed gives the same episode', () => {
    const policy = referencePolicy(tasks, { giveUpRate: 0.5 });
    const outcomes = Array.from({ length: 40 }, (_, seed) =>
      episode(policy, 'Write the total to output/total.txt.', seed),
    );
    const gaveUp = outcomes.filter((o) => o.answer === 'I could not finish the task.');
    expect(gaveUp.length).toBeGreaterThan(5);
    expect(gaveUp.length).toBeLessThan(35);
    for (const o of gaveUp) expect(o.calls.length).toBeLessThan(2);
    expect(episode(policy, 'Write the total to output/total.txt.', 7)).toEqual(
      episode(policy, 'Write the total to output/total.txt.', 7),
    );
  });
});
