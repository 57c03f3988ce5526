import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { type ChatMessageInput, type ChatToolInput, renderChat } from '../../text/index.js';
import { seededRandom } from '../../util/random.js';
import {
  assistantTurns,
  assistantTurnsInPrompt,
  echoPolicy,
  injectError,
  type Policy,
  type PolicyContext,
  type PolicyOutput,
  type PolicyToolCall,
  pastTurnCalls,
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

describe('pastTurnCalls', () => {
  it('reads the calls of each assistant turn from messages, or from a rendered ChatML prompt', () => {
    const messages: ChatMessageInput[] = [
      { role: 'user', content: 'go' },
      {
        role: 'assistant',
        content: 'Looking.',
        tool_calls: [{ function: { name: 'ls', arguments: '{"path": "."}' } }],
      },
      { role: 'tool', content: 'a.txt' },
      {
        role: 'assistant',
        content: '<tool_call>\n{"name": "read", "arguments": {"path": "a.txt"}\n</tool_call>',
      },
      { role: 'user', content: 'again' },
      { role: 'assistant', content: 'Done.' },
      { role: 'user', content: 'bye' },
    ];
    const expected = [[{ name: 'ls', arguments: { path: '.' } }], [], []];
    expect(pastTurnCalls({ messages })).toEqual(expected);
    const prompt = renderChat({ messages, addGenerationPrompt: true });
    expect(pastTurnCalls({ messages: [], prompt })).toEqual(expected);
    expect(pastTurnCalls({ messages: [], prompt: 'plain text' })).toEqual([]);
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

/** The assistant message an output becomes in the agent's history (arguments as a JSON string). */
function assistantMessage(out: PolicyOutput, id: string): ChatMessageInput {
  return {
    role: 'assistant',
    content: out.text ?? null,
    ...(out.toolCalls
      ? {
          tool_calls: out.toolCalls.map((c, i) => ({
            id: `${id}_${i}`,
            type: 'function' as const,
            function: { name: c.name, arguments: JSON.stringify(c.arguments) },
          })),
        }
      : {}),
  };
}

/** The history after `outputs`: each turn, then a result for each of its calls. */
function historyOf(
  outputs: readonly PolicyOutput[],
  first: ChatMessageInput[] = [{ role: 'user', content: 'hi' }],
) {
  const messages = [...first];
  outputs.forEach((out, t) => {
    messages.push(assistantMessage(out, `call${t}`));
    for (const [i] of (out.toolCalls ?? []).entries())
      messages.push({ role: 'tool', tool_call_id: `call${t}_${i}`, content: 'ok' });
  });
  return messages;
}

/** The outputs of an episode of `turns` turns, each request holding the policy's own earlier turns. */
function playTurns(p: Policy, turns: number, over: Partial<PolicyContext> = {}): PolicyOutput[] {
  const outputs: PolicyOutput[] = [];
  for (let t = 0; t < turns; t++) outputs.push(p(ctx({ ...over, messages: historyOf(outputs) })));
  return outputs;
}

describe('scriptedPolicy', () => {
  /** Turn `turn` of an episode played so far by `p` itself; `over` applies to that turn's request. */
  const at = (turn: number, p = scriptedPolicy(script), over: Partial<PolicyContext> = {}) =>
    p(ctx({ ...over, messages: historyOf(playTurns(p, turn, { seed: over.seed ?? 1 })) }));

  it('follows the script turn by turn, then keeps giving the final answer', () => {
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
    const plan = (seed: number) => playTurns(p, 6, { seed }).map((o) => JSON.stringify(o));
    expect(plan(3)).toEqual(plan(3));
    const plans = new Set(Array.from({ length: 20 }, (_, s) => plan(s).join('|')));
    expect(plans.size).toBeGreaterThan(1);
    // An explicit plan seed overrides the request's.
    const fixed = scriptedPolicy(script, { errorRate: 0.5, seed: 9 });
    expect(fixed(ctx({ seed: 1 }))).toEqual(fixed(ctx({ seed: 2 })));
  });

  it('with toolChoice none answers instead of calling (no injected error either)', () => {
    const p = scriptedPolicy(script, { errorRate: 1 });
    expect(at(0, p, { toolChoice: 'none' })).toEqual({ text: 'All tests pass.' });
    expect(at(2, p, { toolChoice: 'none' })).toEqual({ text: 'All tests pass.' });
    expect(at(4, p, { toolChoice: 'none' })).toEqual(at(4, p));
    // "required" and named choices leave the script in charge.
    expect(at(0, p, { toolChoice: 'required' })).toEqual(at(0, p));
  });

  it('in a history the sim wrote, places every turn as counting turns does, all error kinds included', () => {
    // With the calls hidden (content only) every turn simply takes the next slot of the script: the
    // turn counting the sim used to do. With them, a plain history (errors kept) gives the same episode.
    const hidden = (outputs: readonly PolicyOutput[]) =>
      historyOf(outputs.map((o) => ({ text: JSON.stringify(o) })));
    for (let seed = 0; seed < 40; seed++) {
      const p = scriptedPolicy(script, { errorRate: 0.5 });
      const withCalls = playTurns(p, 7, { seed });
      const counted: PolicyOutput[] = [];
      for (let t = 0; t < 7; t++) counted.push(p(ctx({ seed, messages: hidden(counted) })));
      expect(withCalls).toEqual(counted);
    }
  });

  it('after a rolled-back wrong call, goes on from the corrected one instead of repeating it', () => {
    const p = scriptedPolicy(script, {
      errorRate: 1,
      errorKinds: ['wrong_argument', 'unknown_tool', 'malformed'],
    });
    for (let seed = 0; seed < 20; seed++) {
      // CLEANER's loop: the wrong call is shown with its error, regenerated, then replaced in the history.
      const kept: PolicyOutput[] = [];
      let generations = 0;
      for (;;) {
        const out = p(ctx({ seed, messages: historyOf(kept) }));
        generations++;
        if (!out.toolCalls && !out.text?.includes('<tool_call>')) {
          kept.push(out);
          break;
        }
        const retry = p(ctx({ seed, messages: historyOf([...kept, out]) }));
        generations++;
        expect(retry.text).toBe('That call was wrong; retrying with the correct one.');
        kept.push(retry);
        if (generations > 10) throw new Error('the episode did not end');
      }
      // Two actions, each a wrong call and its regeneration, then the answer: nothing repeated.
      expect(generations).toBe(5);
      expect(kept.map((o) => o.toolCalls ?? o.text)).toEqual([
        [{ name: 'read_file', arguments: { path: 'src/a.ts' } }],
        [{ name: 'run', arguments: { cmd: 'npm test' } }],
        'All tests pass.',
      ]);
    }
  });

  it('recognises its call however the agent re-serialised the arguments', () => {
    const p = scriptedPolicy(
      [
        { toolCall: { name: 'edit', arguments: { path: 'a', oldText: 'x', newText: 'y' } } },
        { answer: 'ok' },
      ],
      { errorRate: 1, errorKinds: ['wrong_argument'] },
    );
    // The corrected call alone, keys reordered and spaced: the wrong one was rolled back.
    const messages: ChatMessageInput[] = [
      { role: 'user', content: 'hi' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { function: { name: 'edit', arguments: '{ "newText": "y", "oldText": "x", "path": "a" }' } },
        ],
      },
      { role: 'tool', content: 'Edited a' },
    ];
    expect(p(ctx({ messages }))).toEqual({ text: 'ok' });
    // Arguments sent as an object work too.
    const asObject = messages.map((m) =>
      m.role === 'assistant'
        ? {
            ...m,
            tool_calls: [
              { function: { name: 'edit', arguments: { newText: 'y', oldText: 'x', path: 'a' } } },
            ],
          }
        : m,
    );
    expect(p(ctx({ messages: asObject }))).toEqual({ text: 'ok' });
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
      messages.push(assistantMessage(out, `call${turn}`), { role: 'tool', content: 'ok' });
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

  it("finds the task in a later user message when the harness opens with its own (Codex's environment)", () => {
    const policy = referencePolicy(tasks);
    const messages: PolicyContext['messages'][number][] = [
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: '<environment_context>\n  <cwd>/w</cwd>\n</environment_context>' },
      { role: 'user', content: 'List the files.' },
    ];
    expect(policy(ctx({ messages })).toolCalls).toEqual([{ name: 'ls', arguments: { path: '.' } }]);
    // Without the prompt anywhere: no task, a plain answer.
    expect(policy(ctx({ messages: messages.slice(0, 2) }))).toEqual({ text: 'Done.' });
  });

  /**
   * An episode of an agent that sends no seed and opens as Codex CLI does: its environment (with the
   * date) in a user message of its own, then the task. The engine derives a new seed per request.
   */
  function codexEpisode(policy: ReturnType<typeof referencePolicy>, date: string) {
    const messages: PolicyContext['messages'][number][] = [
      {
        role: 'user',
        content: `<environment_context>\n  <cwd>/w</cwd>\n  <current_date>${date}</current_date>\n</environment_context>`,
      },
      { role: 'user', content: 'Write the total to output/total.txt.' },
    ];
    const calls: string[] = [];
    for (let turn = 0; turn < 20; turn++) {
      const out = policy(ctx({ messages, seed: 1000 + turn, seedDerived: true }));
      if (!out.toolCalls) return calls;
      calls.push(...out.toolCalls.map((c) => `${c.name} ${JSON.stringify(c.arguments)}`));
      messages.push(assistantMessage(out, `call${turn}`), { role: 'tool', content: 'ok' });
    }
    throw new Error('the episode did not end');
  }

  it("with one error kind pinned, an unseeded agent's episode is the same whatever date its opening holds", () => {
    const dates = ['2026-12-06', '2027-02-28', '2031-07-15'];
    const wrongPath = referencePolicy(tasks, { errorRate: 1, errorKinds: ['wrong_argument'] });
    // The read gets a wrong path first; the write has no argument whose wrong value fails: no error.
    const expected = [
      'read {"path":"input/data.csv_wrong"}',
      'read {"path":"input/data.csv"}',
      'write {"path":"output/total.txt","content":"42"}',
    ];
    for (const date of dates) expect(codexEpisode(wrongPath, date), date).toEqual(expected);
    const unknown = referencePolicy(tasks, { errorRate: 1, errorKinds: ['unknown_tool'] });
    for (const date of dates)
      expect(codexEpisode(unknown, date), date).toEqual([
        'read_v2 {"path":"input/data.csv"}',
        'read {"path":"input/data.csv"}',
        'write_v2 {"path":"output/total.txt","content":"42"}',
        'write {"path":"output/total.txt","content":"42"}',
      ]);
    // With both kinds the plan is drawn from the opening, so it moves with the date: why the pin.
    const both = referencePolicy(tasks, { errorRate: 1 });
    const days = Array.from({ length: 20 }, (_, d) => `2026-12-${String(d + 1).padStart(2, '0')}`);
    expect(new Set(days.map((d) => codexEpisode(both, d).join('|'))).size).toBeGreaterThan(1);
  });

  it('refuses error kinds it cannot inject as real mistakes, naming errorKinds', () => {
    expect(() => referencePolicy(tasks, { errorKinds: ['malformed'] })).toThrow(/errorKinds.*"malformed"/);
    expect(() => referencePolicy(tasks, { errorKinds: [] })).toThrow(/errorKinds/);
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

describe('reference policy with rewritten histories (CLEANER online)', () => {
  const task = {
    prompt: 'Write the total to output/total.txt.',
    actions: [
      { name: 'ls', arguments: { path: '.' } },
      { name: 'read', arguments: { path: 'input/data.csv' } },
      { name: 'write', arguments: { path: 'output/total.txt', content: '42' } },
      { name: 'exec', arguments: { command: 'cat output/total.txt' } },
    ],
  };
  const builtinTools = ['read', 'write', 'edit', 'exec', 'ls'];
  /** Our built-in tools, as far as these actions go: a wrong path or an unknown tool fails. */
  const fails = (out: PolicyOutput) => {
    const c = out.toolCalls![0]!;
    return !builtinTools.includes(c.name) || String(c.arguments.path ?? '').endsWith('_wrong');
  };

  /**
   * One episode of the built-in agent, with CLEANER's rollback (packages/gym/src/agent/builtin.ts) or without:
   * a failed call is shown to the policy with its error and regenerated, and the regenerated turn takes
   * its place in the history. Returns every generation and the final history's turns.
   */
  function run(policy: Policy, first: string, seed: number, rollback: boolean) {
    const kept: PolicyOutput[] = [];
    const generated: PolicyOutput[] = [];
    const history = (outputs: readonly PolicyOutput[]) =>
      historyOf(outputs, [{ role: 'user', content: first }]);
    for (let turn = 0; turn < 30; turn++) {
      let out = policy(ctx({ messages: history(kept), seed }));
      generated.push(out);
      while (rollback && out.toolCalls && fails(out)) {
        out = policy(ctx({ messages: history([...kept, out]), seed }));
        generated.push(out);
      }
      kept.push(out);
      if (!out.toolCalls) return { generated, kept };
    }
    throw new Error('the episode did not end');
  }
  const callsOf = (outputs: readonly PolicyOutput[]) => outputs.flatMap((o) => o.toolCalls ?? []);

  it('follows the purified history: the same generations as without CLEANER, none repeated', () => {
    const policy = referencePolicy([task], { errorRate: 0.5, giveUpRate: 0.3 });
    const outcomes = new Set<string>();
    for (let seed = 0; seed < 40; seed++) {
      const plain = run(policy, task.prompt, seed, false);
      const cleaned = run(policy, task.prompt, seed, true);
      // The same mistakes, corrections and answer, in the same order (the plan is per episode seed)...
      expect(cleaned.generated).toEqual(plain.generated);
      // ...and the history CLEANER keeps holds the correct calls, each once, in order.
      const correct = callsOf(plain.generated).filter((c) => !fails({ toolCalls: [c] }));
      expect(callsOf(cleaned.kept)).toEqual(correct);
      expect(correct).toEqual(task.actions.slice(0, correct.length));
      outcomes.add(`${correct.length}:${plain.generated.length}`);
    }
    // Some episodes gave up part way, some made mistakes: the runs above covered both.
    expect(outcomes.size).toBeGreaterThan(3);
  });

  it('with errorRate 1: actions + injected errors + the answer, and every action once in the history', () => {
    const cleaned = run(referencePolicy([task], { errorRate: 1 }), task.prompt, 5, true);
    expect(cleaned.generated).toHaveLength(2 * task.actions.length + 1);
    expect(callsOf(cleaned.kept)).toEqual(task.actions);
    expect(cleaned.kept.at(-1)!.text).toMatch(/^Done/);
  });

  it('needsPlan: a rolled-back history still stops after the actions the plan shows', () => {
    const policy = referencePolicy([task], { errorRate: 1, needsPlan: 1 });
    const guided = `${task.prompt}\n\nPlan:\n1. ls: {}\n2. read: {}`;
    const cleaned = run(policy, guided, 2, true);
    expect(callsOf(cleaned.kept)).toEqual(task.actions.slice(0, 2));
    expect(cleaned.generated).toHaveLength(2 * 2 + 1);
    expect(cleaned.kept.at(-1)!.text).toBe('I could not finish the task.');
    const full = task.actions.map((a, i) => `${i + 1}. ${a.name}: {}`).join('\n');
    const solved = run(policy, `${task.prompt}\n\nPlan:\n${full}`, 2, true);
    expect(callsOf(solved.kept)).toEqual(task.actions);
  });
});

describe('reference policy under OpenClaw', () => {
  const offered: ChatToolInput[] = JSON.parse(
    readFileSync(join(import.meta.dirname, '../../../../../test/fixtures/openclaw/tools.json'), 'utf8'),
  );
  const prompt = 'Greet the team in hello.txt, then show it.';
  const task = {
    prompt,
    actions: [
      { name: 'write', arguments: { path: 'hello.txt', content: 'hi\nteam\n' } },
      { name: 'read', arguments: { path: 'hello.txt', offset: 2, limit: 1 } },
      { name: 'edit', arguments: { path: 'hello.txt', oldText: 'hi', newText: 'hello' } },
      { name: 'ls', arguments: { path: '.' } },
      { name: 'exec', arguments: { command: 'cat hello.txt' } },
    ],
  };

  /** OpenClaw's tools over an in-memory workspace: what succeeds and what fails, as OpenClaw reports it. */
  function runTool(files: Map<string, string>, name: string, args: Record<string, unknown>) {
    const path = String(args.path ?? '.');
    const missing = { error: true, content: `ENOENT: no such file or directory, access '${path}'` };
    switch (name) {
      case 'write':
        files.set(path, String(args.content));
        return { error: false, content: `Successfully wrote to ${path}` };
      case 'read': {
        const text = files.get(path);
        if (text === undefined) return missing;
        const lines = text.split('\n');
        const first = Number(args.offset ?? 1) - 1; // 1-based
        return {
          error: false,
          content: lines.slice(first, first + Number(args.limit ?? lines.length)).join('\n'),
        };
      }
      case 'edit': {
        const text = files.get(path);
        if (text === undefined) return missing;
        let next = text;
        for (const e of args.edits as { oldText: string; newText: string }[]) {
          if (next.split(e.oldText).length !== 2) return { error: true, content: 'oldText must occur once' };
          next = next.replace(e.oldText, e.newText);
        }
        files.set(path, next);
        return { error: false, content: `Edited ${path}` };
      }
      case 'ls':
        return path === '.' ? { error: false, content: [...files.keys()].join('\n') } : missing;
      case 'exec':
        return { error: false, content: files.get('hello.txt') ?? '' };
      default:
        return { error: true, content: `Tool ${name} not found` };
    }
  }

  /**
   * One OpenClaw episode: no seed (the engine derives a new one per request, here `seedOf(call)`), the
   * prompt wrapped in a timestamp and a Runtime line, a fresh trailing context message on every call
   * that the next call's history no longer holds, and tool-call ids rewritten. With `rollback`, as
   * CLEANER online: a failed call is shown with its error and regenerated, and only the regenerated
   * turn stays in the history.
   */
  function play(
    policy: ReturnType<typeof referencePolicy>,
    session: string,
    seedOf: (call: number) => number,
    rollback = false,
  ) {
    const history: PolicyContext['messages'][number][] = [
      { role: 'system', content: 'You are a personal assistant running inside a harness.' },
      {
        role: 'user',
        content: `[Thu 2026-12-03 05:31 UTC] ${prompt}\n\nRuntime: agent=main | sessionId=${session} | shell=bash`,
      },
    ];
    const files = new Map<string, string>();
    const steps: { name: string; arguments: Record<string, unknown>; error: boolean }[] = [];
    let call = 0;
    const ask = (messages: PolicyContext['messages'][number][]) => {
      const context = {
        role: 'user' as const,
        content: [{ type: 'text' as const, text: `<<<context ${call}>>>` }],
      };
      const seed = seedOf(call++);
      return policy({
        messages: [...messages, context],
        tools: offered,
        seed,
        seedDerived: true,
        turn: assistantTurns(messages),
        random: seededRandom('policy', seed),
      });
    };
    const turnOf = (c: PolicyToolCall, content: string, id: string): PolicyContext['messages'] => [
      {
        role: 'assistant',
        content: null,
        tool_calls: [
          { id, type: 'function', function: { name: c.name, arguments: JSON.stringify(c.arguments) } },
        ],
      },
      { role: 'tool', content, tool_call_id: id },
    ];
    while (call < 20) {
      let out = ask(history);
      if (!out.toolCalls) return { steps, answer: out.text, files, history };
      let c = out.toolCalls[0]!;
      let result = runTool(files, c.name, c.arguments);
      steps.push({ ...c, error: result.error });
      while (rollback && result.error && call < 20) {
        out = ask([...history, ...turnOf(c, result.content, `call${call - 1}`)]);
        if (!out.toolCalls) break;
        c = out.toolCalls[0]!;
        result = runTool(files, c.name, c.arguments);
        steps.push({ ...c, error: result.error });
      }
      history.push(...turnOf(c, result.content, `call${call - 1}`));
    }
    throw new Error('the episode did not end');
  }

  it("finds the task inside OpenClaw's wrapped prompt and speaks its tool schemas", () => {
    const run = play(referencePolicy([task]), 'a1', (call) => 1000 + call);
    expect(run.steps.map(({ name, arguments: a }) => ({ name, arguments: a }))).toEqual([
      task.actions[0],
      // 1-based offset, as OpenClaw reads it: line 2 is "team".
      task.actions[1],
      { name: 'edit', arguments: { path: 'hello.txt', edits: [{ oldText: 'hi', newText: 'hello' }] } },
      task.actions[3],
      task.actions[4],
    ]);
    expect(run.steps.every((s) => !s.error)).toBe(true);
    expect(run.files.get('hello.txt')).toBe('hello\nteam\n');
    expect(run.answer).toMatch(/^Done/);
  });

  it('keeps one error and give-up plan per episode although every request gets a new seed', () => {
    const policy = referencePolicy([task], { errorRate: 0.5, giveUpRate: 0.3 });
    const plans = new Set<string>();
    for (let s = 0; s < 24; s++) {
      const session = `session-${s}`;
      const run = play(policy, session, (call) => call * 7919 + s);
      // Another draw of the engine's per-request seeds: the same episode.
      expect(play(policy, session, (call) => call * 104_729 + 5 * s + 3)).toEqual(run);
      // Never skipped or repeated: the correct calls are a prefix of the actions, in order.
      const correct = run.steps.filter((st) => !st.error).map((st) => st.name);
      expect(correct).toEqual(task.actions.slice(0, correct.length).map((a) => a.name));
      if (run.answer === 'I could not finish the task.') expect(correct.length).toBeLessThan(5);
      else expect(correct).toHaveLength(5);
      plans.add(JSON.stringify(run.steps));
    }
    // Sessions differ in their opening (session id, timestamp): their plans differ too.
    expect(plans.size).toBeGreaterThan(5);
  });

  it('injects only errors that fail under OpenClaw’s tools, each followed by its correction', () => {
    const policy = referencePolicy([task], { errorRate: 1 });
    const kinds = new Set<string>();
    for (let s = 0; s < 12; s++) {
      const run = play(policy, `s${s}`, (call) => call + 31 * s);
      expect(run.steps).toHaveLength(10);
      for (let i = 0; i < 10; i += 2) {
        const [wrong, right] = [run.steps[i]!, run.steps[i + 1]!];
        expect(wrong.error, JSON.stringify(wrong)).toBe(true);
        expect(right.error).toBe(false);
        const offeredNames = offered.map((t) => t.function.name);
        kinds.add(
          offeredNames.includes(wrong.name) ? `${right.name}: wrong argument` : `${right.name}: unknown tool`,
        );
      }
      // The wrong calls left no stray file behind.
      expect([...run.files.keys()]).toEqual(['hello.txt']);
    }
    // Both kinds are used where they fail; write and exec only ever get an unknown tool.
    expect(kinds).toEqual(
      new Set([
        'write: unknown tool',
        'read: wrong argument',
        'read: unknown tool',
        'edit: wrong argument',
        'edit: unknown tool',
        'ls: wrong argument',
        'ls: unknown tool',
        'exec: unknown tool',
      ]),
    );
  });

  it('with CLEANER rolling failures back, the history holds each action once, in OpenClaw’s schemas', () => {
    const policy = referencePolicy([task], { errorRate: 0.5, giveUpRate: 0.3 });
    for (let s = 0; s < 24; s++) {
      const plain = play(policy, `session-${s}`, (call) => call * 7919 + s);
      const cleaned = play(policy, `session-${s}`, (call) => call * 7919 + s, true);
      // The same generations in the same order as without rollback: nothing repeated, nothing skipped.
      expect(cleaned.steps).toEqual(plain.steps);
      expect(cleaned.answer).toBe(plain.answer);
      expect(cleaned.files).toEqual(plain.files);
      const kept = cleaned.history.flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name);
      expect(kept).toEqual(plain.steps.filter((st) => !st.error).map((st) => st.name));
      expect(
        cleaned.history.filter((m) => m.role === 'tool' && /ENOENT|not found/.test(String(m.content))),
      ).toEqual([]);
    }
    const all = play(referencePolicy([task], { errorRate: 1 }), 'x', (call) => call, true);
    expect(all.steps).toHaveLength(2 * task.actions.length);
    expect(all.history.flatMap((m) => m.tool_calls ?? [])).toHaveLength(task.actions.length);
    expect(all.files.get('hello.txt')).toBe('hello\nteam\n');
  });

  it('with an explicit seed, the plan still follows the seed (built-in agent, unchanged)', () => {
    const policy = referencePolicy([task], { errorRate: 0.5 });
    const at = (seed: number, seedDerived?: boolean) =>
      JSON.stringify(
        policy({
          ...ctx({ messages: [{ role: 'user', content: prompt }], seed }),
          ...(seedDerived ? { seedDerived } : {}),
        }),
      );
    const bySeed = new Set(Array.from({ length: 16 }, (_, s) => at(s)));
    expect(bySeed.size).toBeGreaterThan(1);
    const derived = new Set(Array.from({ length: 16 }, (_, s) => at(s, true)));
    expect(derived.size).toBe(1);
    // Without a seed the plan comes from the first user message, not the system prompt, which some
    // harnesses refresh on every call.
    const withSystem = (system: string) =>
      JSON.stringify(
        policy({
          ...ctx({
            messages: [
              { role: 'system', content: system },
              { role: 'user', content: prompt },
            ],
          }),
          seedDerived: true,
        }),
      );
    expect(new Set(Array.from({ length: 8 }, (_, i) => withSystem(`clock 05:3${i}`)))).toEqual(
      new Set([withSystem('')]),
    );
  });
});

describe('injectError: unknown tools are unknown', () => {
  it('picks a name the request does not offer', () => {
    const call = { name: 'read', arguments: { path: 'a' } };
    expect(injectError(call, 'unknown_tool', ['read', 'read_v2', 'read_v3']).toolCalls?.[0]?.name).toBe(
      'read_v4',
    );
  });

  it('never corrupts an argument of write or exec: that would not fail', () => {
    expect(
      injectError({ name: 'write', arguments: { path: 'a', content: 'b' } }, 'wrong_argument').text,
    ).toContain('<tool_call>');
    expect(injectError({ name: 'read', arguments: { path: 'a' } }, 'wrong_argument').toolCalls).toEqual([
      { name: 'read', arguments: { path: 'a_wrong' } },
    ]);
  });
});
