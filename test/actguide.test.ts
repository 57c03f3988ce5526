import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it, onTestFinished } from 'vitest';
import {
  assistantPrefix,
  chooseGuidanceK,
  EMPTY_HINT,
  fixedRatioK,
  guidedPrompt,
  HINT_HEADING,
  isHardGroup,
  messagesWithoutHint,
  planFromSteps,
  promptViews,
  pythonFloat,
  pythonJson,
  pythonJsonOfText,
  renderHint,
  stripHint,
  withAssistantPrefix,
} from '../packages/core/src/curation/actguide/index.js';
import { ValidationError } from '../packages/core/src/domain/errors.js';
import {
  assistantTurns,
  type PolicyContext,
  referencePolicy,
} from '../packages/core/src/engines/sim/policies.js';
import { loadQwen3Tokenizer, tokenizeChat } from '../packages/core/src/text/index.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import { readActionLogs } from '../packages/gym/src/guide-run.js';

/*
 * ActGuide-RL's pure pieces: the hint (format and placement), the scheduler's worked examples, the two
 * prompt views of a guided step, plans read from stored steps, and the sim policy that needs a plan.
 */

const searchVisit = [
  { name: 'search', arguments: { query: ['x'] } },
  { name: 'visit', arguments: { url: ['u'] } },
];

describe('renderHint', () => {
  it('renders the first k actions as numbered lines with Python-style JSON (the worked example)', () => {
    expect(renderHint(searchVisit, 1)).toBe('1. search: {"query": ["x"]}');
    expect(renderHint(searchVisit, 2)).toBe('1. search: {"query": ["x"]}\n2. visit: {"url": ["u"]}');
    expect(renderHint(searchVisit, 9)).toBe(renderHint(searchVisit, 2));
  });

  it('says None for k = 0 and for an empty plan', () => {
    expect(renderHint(searchVisit, 0)).toBe('None');
    expect(renderHint([], 3)).toBe(EMPTY_HINT);
  });

  it('writes JSON as json.dumps(..., ensure_ascii=False): Python separators, non-ASCII as itself', () => {
    expect(pythonJson({ a: 1, b: [true, null, 'x'], c: {}, d: [] })).toBe(
      '{"a": 1, "b": [true, null, "x"], "c": {}, "d": []}',
    );
    // The paper's code passes ensure_ascii=False: the model reads 报告 and café, not \u escapes.
    expect(pythonJson({ path: '数据/报告.md', who: 'café' })).toBe('{"path": "数据/报告.md", "who": "café"}');
    // Quotes, backslashes and control characters are escaped as Python escapes them.
    expect(pythonJson({ s: 'say "hi"\\\n\t\u0001' })).toBe('{"s": "say \\"hi\\"\\\\\\n\\t\\u0001"}');
    expect(pythonJson({ n: -2.5, e: 1e21, skipped: undefined })).toBe('{"n": -2.5, "e": 1e+21}');
  });
});

/*
 * The paper's data and wording, written out by hand from the authors' code (AMAP-ML/ActGuide-RL):
 * an `all_actions` record as `preprocess_deepresearch_actguide.py` stores it (`{"name", "args"}`, a
 * visit's `goal` stripped), and the texts of `adaptive_guidance.py`'s APPEND_ONLY_HINT_TEMPLATE and
 * ASSISTANT_PREFIX_TEMPLATE around `build_hint_from_actions`' lines.
 */
const paperActions = JSON.parse(
  '[{"name": "search", "args": {"query": ["Qwen3 发布日期", "Qwen3 release date"]}}, {"name": "visit", "args": {"url": ["https://qwenlm.github.io/blog/qwen3/"]}}]',
);

describe('the paper\'s action data ({"name", "args"})', () => {
  it('renders args as the paper does, never a null', () => {
    expect(renderHint(paperActions, 2)).toBe(
      '1. search: {"query": ["Qwen3 发布日期", "Qwen3 release date"]}\n2. visit: {"url": ["https://qwenlm.github.io/blog/qwen3/"]}',
    );
    expect(renderHint(paperActions, 1)).not.toContain('null');
  });

  it('refuses an action with neither arguments nor args, naming the field', () => {
    const bad = [{ name: 'search' }] as never;
    expect(() => renderHint(bad, 1)).toThrow(ValidationError);
    expect(() => renderHint(bad, 1)).toThrow(/actions\.0.*neither "arguments" nor "args"/);
    expect(() => renderHint([{ name: 'search', args: null }] as never, 1)).toThrow(/actions\.0/);
  });
});

describe("the hint in the user message (the paper's append-only template)", () => {
  it("is the task prompt, a newline, the paper's two lines and the hint; it strips off exactly", () => {
    const hint = renderHint(paperActions, 1);
    const prompt = 'Who released Qwen3, and when?';
    const guided = guidedPrompt(prompt, hint);
    expect(guided).toBe(
      'Who released Qwen3, and when?\n' +
        'Follow the partial action trajectory hint to take acttions, note that the trajectory may not complete and you still need do some extra tool calls to finish the task.\n' +
        'Reference action trajectory hint:\n' +
        '1. search: {"query": ["Qwen3 发布日期", "Qwen3 release date"]}',
    );
    expect(stripHint(guided, hint)).toEqual({ text: prompt, removed: true });
    expect(stripHint(prompt, hint)).toEqual({ text: prompt, removed: false });
  });

  it('with k = 0 the hint is None, under the same two lines', () => {
    expect(guidedPrompt('Q', renderHint(paperActions, 0))).toBe(
      'Q\nFollow the partial action trajectory hint to take acttions, note that the trajectory may not complete and you still need do some extra tool calls to finish the task.\nReference action trajectory hint:\nNone',
    );
  });
});

describe("the hint's arguments as Python's json.dumps writes the parsed action data", () => {
  it('keeps source key order and big integers from an action log (a parsed JS object would not)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-actlog-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'actions.jsonl');
    writeFileSync(
      file,
      `${JSON.stringify({ task_id: 'x', actions: [] }).replace('[]', '[{"name":"search","args":{"b":1,"10":2,"a":3,"id":12345678901234567890}}]')}\n`,
    );
    const logs = readActionLogs(file);
    // json.dumps(json.loads(line)["actions"][0]["args"], ensure_ascii=False), written out by hand.
    expect(renderHint(logs.get('x')!, 1)).toBe(
      '1. search: {"b": 1, "10": 2, "a": 3, "id": 12345678901234567890}',
    );
  });

  it("reads the paper's own form: all_actions as the JSON string its parquet extra_info holds", () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-actlog-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const file = join(dir, 'actions.jsonl');
    const allActions =
      '[{"name": "search", "args": {"query": ["Qwen3 发布日期"], "10": 1}}, {"name": "visit", "args": {"url": ["u"]}}]';
    writeFileSync(file, `${JSON.stringify({ task_id: 'q1', all_actions: allActions })}\n`);
    expect(renderHint(readActionLogs(file).get('q1')!, 2)).toBe(
      '1. search: {"query": ["Qwen3 发布日期"], "10": 1}\n2. visit: {"url": ["u"]}',
    );
    writeFileSync(file, `${JSON.stringify({ task_id: 'q1', all_actions: '[{"name": "search"' })}\n`);
    expect(() => readActionLogs(file)).toThrow(/line 1: all_actions is not a JSON array/);
  });

  it("renders floats, repeated keys and non-ASCII text as Python's json does", () => {
    expect(pythonJsonOfText('{"q":["Qwen3 发布",1.0,-0,1E2,true,null],"k":{"k":1,"k":2}}')).toBe(
      '{"q": ["Qwen3 发布", 1.0, 0, 100.0, true, null], "k": {"k": 2}}',
    );
    // Python's repr of each float.
    expect([1.0, 1e-7, 2.5e20, 1e16, 100.0, 0.0001, 123.456, -0.5, 1.5e-5].map(pythonFloat)).toEqual([
      '1.0',
      '1e-07',
      '2.5e+20',
      '1e+16',
      '100.0',
      '0.0001',
      '123.456',
      '-0.5',
      '1.5e-05',
    ]);
    expect(() => pythonJsonOfText('{"a":1,}')).toThrow(/not JSON/);
  });
});

describe('the hint as an assistant prefix', () => {
  const conversation: { role: 'system' | 'user' | 'assistant' | 'tool'; content: string }[] = [
    { role: 'system', content: 'You are a deep research assistant.' },
    { role: 'user', content: 'Who released Qwen3, and when?' },
  ];

  it("opens the assistant side with the paper's prefix, after the user message", () => {
    const hint = renderHint(paperActions, 2);
    expect(assistantPrefix(hint)).toBe(
      'I have a partial action plan trajectory hint:\n' +
        '1. search: {"query": ["Qwen3 发布日期", "Qwen3 release date"]}\n' +
        '2. visit: {"url": ["https://qwenlm.github.io/blog/qwen3/"]}\n' +
        '\n' +
        'I will solve the task by following this hint when useful.\n',
    );
    // First call: the prefix is the last message, for the engine to continue (the paper's placement).
    const first = withAssistantPrefix(conversation, hint);
    expect(first).toEqual({
      messages: [...conversation, { role: 'assistant', content: assistantPrefix(hint) }],
      continueFinal: true,
    });
    // Later calls: the prefix opens the first reply, one turn with it; no extra assistant message.
    const later = [
      ...conversation,
      { role: 'assistant', content: 'calling search' },
      { role: 'tool', content: 'r' },
    ];
    const once = withAssistantPrefix(later, hint);
    expect(once.continueFinal).toBe(false);
    expect(once.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool']);
    expect(once.messages[2]!.content).toBe(`${assistantPrefix(hint)}calling search`);
    // A history that already has it (the agent sends it back) is left as it is.
    expect(withAssistantPrefix(once.messages, hint)).toEqual(once);
  });

  it('adds nothing for the hint None, as the paper does', () => {
    expect(withAssistantPrefix(conversation, renderHint(paperActions, 0))).toEqual({
      messages: conversation,
      continueFinal: false,
    });
  });

  it('training prompt = the conversation without the prefix, on the first call and later ones', () => {
    const tokenizer = loadQwen3Tokenizer();
    const hint = renderHint(paperActions, 1);
    const first = withAssistantPrefix(conversation, hint).messages;
    const step = {
      trajectoryId: 't',
      index: 0,
      promptIds: tokenizeChat({ messages: first, continueFinalMessage: true }, tokenizer),
      responseIds: [1, 2],
      messages: first as never,
      tools: null,
      metadata: { continue_final_message: true, add_generation_prompt: false },
    };
    const views = promptViews(step, hint, tokenizer, 'assistant_prefix');
    expect(views.behaviourReproduced).toBe(true);
    expect(tokenizer.decode(views.trainingPromptIds)).toBe(
      '<|im_start|>system\nYou are a deep research assistant.<|im_end|>\n' +
        '<|im_start|>user\nWho released Qwen3, and when?<|im_end|>\n<|im_start|>assistant\n',
    );
    // Stored as a closed turn (the engine would open another), the behaviour is not what was sent.
    const closed = tokenizeChat({ messages: first, addGenerationPrompt: true }, tokenizer);
    expect(
      promptViews({ ...step, promptIds: closed }, hint, tokenizer, 'assistant_prefix').behaviourReproduced,
    ).toBe(false);

    const history = [
      ...conversation,
      { role: 'assistant' as const, content: 'Searching.' },
      { role: 'tool' as const, content: 'r' },
    ];
    const later = withAssistantPrefix(history, hint).messages;
    const laterStep = {
      ...step,
      index: 1,
      messages: later as never,
      metadata: {},
      promptIds: tokenizeChat({ messages: later, addGenerationPrompt: true }, tokenizer),
    };
    const laterViews = promptViews(laterStep, hint, tokenizer, 'assistant_prefix');
    expect(laterViews.behaviourReproduced).toBe(true);
    expect(laterViews.trainingPromptIds).toEqual(
      tokenizeChat({ messages: history, addGenerationPrompt: true }, tokenizer),
    );
    expect(() =>
      messagesWithoutHint({ ...step, messages: conversation as never }, hint, 'assistant_prefix'),
    ).toThrow(/no assistant message opens with the hint prefix/);
  });
});

describe('isHardGroup', () => {
  it('is hard when there are rewards and none beats the threshold', () => {
    expect(isHardGroup([0, 0, 0])).toBe(true);
    expect(isHardGroup([0, 0.25])).toBe(false);
    expect(isHardGroup([0.5, 0.25], 0.5)).toBe(true);
    expect(isHardGroup([])).toBe(false);
  });
});

/** A probe against a monotone task: a rollout succeeds iff the hint shows at least `need` actions. */
function probeNeeding(need: number) {
  const calls: number[] = [];
  const probe = async (k: number) => {
    calls.push(k);
    return k >= need ? [0, 1] : [0, 0];
  };
  return { probe, calls };
}

const actions = (n: number) => Array.from({ length: n }, (_, i) => ({ name: `a${i}`, arguments: {} }));

describe('chooseGuidanceK', () => {
  it('adaptive: 10 actions, success iff k >= 6 → probes at 5 ✗, 8 ✓, 7 ✓, 6 ✓ → k = 6', async () => {
    const { probe, calls } = probeNeeding(6);
    const choice = await chooseGuidanceK(actions(10), probe);
    expect(calls).toEqual([5, 8, 7, 6]);
    expect(choice).toEqual({
      k: 6,
      strategy: 'adaptive',
      probes: [
        { k: 5, rewards: [0, 0] },
        { k: 8, rewards: [0, 1] },
        { k: 7, rewards: [0, 1] },
        { k: 6, rewards: [0, 1] },
      ],
    });
  });

  it('adaptive: when every probe fails, k = len (10 actions: probes at 5, 8, 9)', async () => {
    const { probe, calls } = probeNeeding(Number.POSITIVE_INFINITY);
    const choice = await chooseGuidanceK(actions(10), probe, { maxProbeSteps: 5 });
    expect(calls).toEqual([5, 8, 9]);
    expect(choice.k).toBe(10);
  });

  it('adaptive: all failing reaches len while len <= 62 with 5 probes; at 63 the budget stops at 62', async () => {
    const at62 = probeNeeding(Number.POSITIVE_INFINITY);
    expect((await chooseGuidanceK(actions(62), at62.probe)).k).toBe(62);
    expect(at62.calls).toHaveLength(5);
    const at63 = probeNeeding(Number.POSITIVE_INFINITY);
    const choice = await chooseGuidanceK(actions(63), at63.probe, { maxProbeSteps: 5 });
    expect(at63.calls).toEqual([31, 47, 55, 59, 61]);
    expect(choice.k).toBe(62);
  });

  it('adaptive: kOffset moves the level found and is clamped to [0, len]', async () => {
    expect((await chooseGuidanceK(actions(10), probeNeeding(6).probe, { kOffset: 2 })).k).toBe(8);
    expect((await chooseGuidanceK(actions(10), probeNeeding(6).probe, { kOffset: 9 })).k).toBe(10);
    expect((await chooseGuidanceK(actions(10), probeNeeding(6).probe, { kOffset: -9 })).k).toBe(0);
  });

  it('adaptive: a success must beat the threshold; a probe at k = 0 that succeeds gives k = 0', async () => {
    const atHalf = async () => [0.5];
    expect((await chooseGuidanceK(actions(4), atHalf, { threshold: 0.5 })).k).toBe(4);
    expect((await chooseGuidanceK(actions(4), atHalf)).k).toBe(0);
    expect(await chooseGuidanceK([], atHalf)).toEqual({ k: 0, strategy: 'adaptive', probes: [] });
  });

  it('fixed_k, fixed_ratio (ceil) and all pick k without probing', async () => {
    const never = async (): Promise<number[]> => {
      throw new Error('no probe expected');
    };
    expect((await chooseGuidanceK(actions(10), never, { strategy: 'fixed_k', k: 3 })).k).toBe(3);
    expect((await chooseGuidanceK(actions(10), never, { strategy: 'fixed_k', k: 30 })).k).toBe(10);
    expect((await chooseGuidanceK(actions(10), never, { strategy: 'fixed_ratio', ratio: 0.25 })).k).toBe(3);
    // 10 × 0.3 is 3.0000000000000004 in floating point: still 3, not 4.
    expect((await chooseGuidanceK(actions(10), never, { strategy: 'fixed_ratio', ratio: 0.3 })).k).toBe(3);
    expect(fixedRatioK(7, 1)).toBe(7);
    expect(await chooseGuidanceK(actions(10), never, { strategy: 'all' })).toEqual({
      k: 10,
      strategy: 'all',
      probes: [],
    });
  });

  it('refuses a strategy without its parameter, naming the field', async () => {
    const probe = async () => [0];
    await expect(chooseGuidanceK(actions(3), probe, { strategy: 'fixed_k' })).rejects.toThrow(
      ValidationError,
    );
    await expect(chooseGuidanceK(actions(3), probe, { strategy: 'fixed_ratio' })).rejects.toThrow(
      /guidance\.ratio/,
    );
    await expect(chooseGuidanceK(actions(3), probe, { strategy: 'fixed_ratio', ratio: 1.5 })).rejects.toThrow(
      /guidance\.ratio: must be <= 1/,
    );
  });
});

describe('promptViews', () => {
  const tokenizer = loadQwen3Tokenizer();
  const tools = [
    {
      type: 'function',
      function: {
        name: 'write',
        parameters: { type: 'object', properties: { path: { type: 'string' } } },
      },
    },
  ];
  const prompt = 'Write output/a.txt.';
  const hint = renderHint([{ name: 'write', arguments: { path: 'output/a.txt' } }], 1);
  const conversation = (user: unknown) => [
    { role: 'system', content: 'You are a capable assistant.' },
    { role: 'user', content: user },
    {
      role: 'assistant',
      content: null,
      tool_calls: [
        { id: 'c1', type: 'function', function: { name: 'write', arguments: '{"path": "output/a.txt"}' } },
      ],
    },
    { role: 'tool', tool_call_id: 'c1', content: 'wrote output/a.txt' },
  ];
  const stepOf = (messages: ReturnType<typeof conversation>) => ({
    trajectoryId: 't1',
    index: 1,
    promptIds: tokenizeChat({
      messages: messages as never,
      tools: tools as never,
      addGenerationPrompt: true,
    }),
    responseIds: tokenizer.encode('Done.<|im_end|>', { addSpecialTokens: false }),
    messages: messages as never,
    tools: tools as never,
    metadata: {},
  });

  it('training prompt = the same chat without the hint; response ids untouched', () => {
    const step = stepOf(conversation(guidedPrompt(prompt, hint)));
    const views = promptViews(step, hint);
    expect(views.behaviourReproduced).toBe(true);
    expect(views.behaviourPromptIds).toBe(step.promptIds);
    expect(views.responseIds).toBe(step.responseIds);
    const behaviourText = tokenizer.decode(views.behaviourPromptIds);
    const trainingText = tokenizer.decode(views.trainingPromptIds);
    expect(behaviourText).toContain(HINT_HEADING);
    expect(trainingText).not.toContain(HINT_HEADING);
    expect(trainingText).not.toContain('1. write:');
    // Exactly the prompt an unguided rollout of the same conversation would have had.
    expect(views.trainingPromptIds).toEqual(
      tokenizeChat({
        messages: conversation(prompt) as never,
        tools: tools as never,
        addGenerationPrompt: true,
      }),
    );
  });

  it('finds the hint in text parts too, and refuses a step without it', () => {
    const parts = conversation([{ type: 'text', text: guidedPrompt(prompt, hint) }]);
    const stripped = messagesWithoutHint(stepOf(parts), hint);
    expect(stripped[1]!.content).toEqual([{ type: 'text', text: prompt }]);
    expect(() => promptViews(stepOf(conversation(prompt)), hint)).toThrow(/no user message holds the hint/);
    expect(() => promptViews({ ...stepOf(conversation(prompt)), messages: null }, hint)).toThrow(
      /kept no chat messages/,
    );
  });

  it('flags a prompt the local template does not reproduce', () => {
    const step = stepOf(conversation(guidedPrompt(prompt, hint)));
    expect(promptViews({ ...step, promptIds: [1, 2, 3] }, hint).behaviourReproduced).toBe(false);
  });
});

describe('planFromSteps', () => {
  it('keeps the successful tool calls in step order', () => {
    const call = (id: string, name: string, args: string) => ({
      id,
      type: 'function',
      function: { name, arguments: args },
    });
    const plan = planFromSteps([
      {
        index: 1,
        toolCalls: [call('c2', 'write', '{"path": "out.txt", "content": "9"}')],
        toolResults: [{ tool_call_id: 'c2', content: 'ok', error: false }],
      },
      {
        index: 0,
        toolCalls: [call('c0', 'read', '{"path": "missing"}'), call('c1', 'read', '{"path": "in.txt"}')],
        toolResults: [
          { tool_call_id: 'c0', content: 'Error: no such file', error: true },
          { tool_call_id: 'c1', content: '9', error: false },
        ],
      },
      { index: 2, toolCalls: [call('c3', 'exec', '{"command": ')], toolResults: null },
      { index: 3, toolCalls: null, toolResults: null },
    ]);
    expect(plan).toEqual([
      { name: 'read', arguments: { path: 'in.txt' } },
      { name: 'write', arguments: { path: 'out.txt', content: '9' } },
    ]);
  });
});

describe('the sim reference policy with needsPlan reads our hints', () => {
  const task = {
    prompt: 'Write four files.',
    actions: [1, 2, 3, 4].map((i) => ({ name: 'write', arguments: { path: `f${i}.txt`, content: `${i}` } })),
  };
  function episode(needsPlan: number, first: string) {
    const policy = referencePolicy([task], { needsPlan });
    const messages: PolicyContext['messages'][number][] = [{ role: 'user', content: first }];
    let calls = 0;
    for (let turn = 0; turn < 10; turn++) {
      const out = policy({
        messages,
        tools: [],
        seed: 1,
        turn: assistantTurns(messages),
        random: seededRandom('t', turn),
      });
      if (!out.toolCalls) return { calls, answer: out.text };
      calls += out.toolCalls.length;
      messages.push({ role: 'assistant', content: '' }, { role: 'tool', content: 'ok' });
    }
    throw new Error('the episode did not end');
  }

  it('without enough of the plan it takes the shown steps and gives up; with enough it finishes', () => {
    const hinted = (k: number) => guidedPrompt(task.prompt, renderHint(task.actions, k));
    expect(episode(0.75, task.prompt)).toEqual({ calls: 0, answer: 'I could not finish the task.' });
    expect(episode(0.75, hinted(2))).toEqual({ calls: 2, answer: 'I could not finish the task.' });
    expect(episode(0.75, hinted(3))).toMatchObject({ calls: 4, answer: expect.stringMatching(/^Done/) });
    expect(episode(0, task.prompt)).toMatchObject({ calls: 4 });
  });
});

describe('--guide-actions (imported action logs)', () => {
  const file = (text: string) => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-actions-'));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const path = join(dir, 'actions.jsonl');
    writeFileSync(path, text);
    return path;
  };

  it('reads one plan per task id, blank lines allowed', () => {
    const logs = readActionLogs(
      file(
        `${JSON.stringify({ task_id: 't1', actions: [{ name: 'read', arguments: { path: 'a' } }] })}\n\n${JSON.stringify(
          {
            task_id: 't2',
            actions: [
              { name: 'ls', arguments: {} },
              { name: 'write', arguments: { path: 'b', content: 'x' } },
            ],
          },
        )}\n`,
      ),
    );
    expect([...logs.keys()]).toEqual(['t1', 't2']);
    expect(renderHint(logs.get('t2')!, 2)).toBe('1. ls: {}\n2. write: {"path": "b", "content": "x"}');
  });

  it("reads the paper's action records, with args", () => {
    const logs = readActionLogs(file(`${JSON.stringify({ task_id: 'q1', actions: paperActions })}\n`));
    expect(renderHint(logs.get('q1')!, 2)).toBe(
      '1. search: {"query": ["Qwen3 发布日期", "Qwen3 release date"]}\n2. visit: {"url": ["https://qwenlm.github.io/blog/qwen3/"]}',
    );
  });

  it('names the line and the field of a bad entry, and a missing file', () => {
    expect(() => readActionLogs(file('{"task_id": "t1", "actions": []}\n'))).toThrow(
      /line 1.*actions.*at least one action/,
    );
    expect(() => readActionLogs(file('{"task_id": "t1", "actions": [{"name": "x"}]}\n'))).toThrow(
      /line 1.*actions\.0\.arguments/,
    );
    expect(() => readActionLogs(file('\n{oops\n'))).toThrow(/--guide-actions: line 2 is not JSON/);
    expect(() =>
      readActionLogs(file('{"task_id": "t1", "actions": [{"name": "x", "args": {}, "arguments": {}}]}\n')),
    ).toThrow(/line 1.*actions\.0\.arguments.*not both/);
    expect(() => readActionLogs('/nonexistent/actions.jsonl')).toThrow(/--guide-actions: .* does not exist/);
  });
});
