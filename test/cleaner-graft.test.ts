import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import {
  defaultToolCallTokenId,
  onlineCleaner,
  onlineRepairs,
  toolCallStart,
  trainingSteps,
  trainingView,
} from '../packages/core/src/curation/cleaner/graft.js';
import { callSimilarity } from '../packages/core/src/curation/cleaner/saar.js';
import { newStep, type Step } from '../packages/core/src/domain/index.js';
import { loadQwen3Tokenizer, tokenizeChat } from '../packages/core/src/text/index.js';

/*
 * The token-level graft a lease serves for an online CLEANER trajectory, on the authors' own setup:
 * their `code_interpreter` tool (recipe/cleaner/rstar_code_judge.yaml), a Qwen3 response with a
 * `<think>` block before its `<tool_call>`, and their tool's failure texts. Expected ids are built
 * here from the strings (encode P, encode K′), the modes from CPython's difflib over the decoded
 * call segments, as the authors' `_overwrite_last_assistant_turn` does.
 */

const tok = loadQwen3Tokenizer();
const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'code_interpreter',
      description: 'A tool for executing code.',
      parameters: {
        type: 'object',
        properties: { code: { type: 'string', description: 'The code to execute.' } },
        required: ['code'],
      },
    },
  },
];
const QUESTION = 'What is the sum of the squares of 1..10? Use the tool.';
const FORMAT_ERROR =
  'Tool call failure: tool call format is wrong, please make sure to generate correct json-format tool call arguments.';

const call = (code: string) =>
  `<tool_call>\n{"name": "code_interpreter", "arguments": {"code": ${JSON.stringify(code)}}}\n</tool_call>`;
const encode = (text: string) => tok.encode(text);
const P = '<think>\nI will compute it with Python.\n</think>\n\n';
const P2 =
  '<think>\nThe call failed; maybe a format slip. Let me print a list comprehension sum.\n</think>\n\n';
const K = call('print(sum(i**2 for i in range(1, 11))');
const K1 = call('print(sum(i**2 for i in range(1, 11)))');
const KFAR = call('import numpy as np\nx = np.arange(1, 11)\nprint(int((x * x).sum()))');

/** A turn's response ids as the engine returns them: the text's ids, then `<|im_end|>`. */
const response = (text: string) => [...encode(text), tok.tokenId('<|im_end|>')!];

type Msg = Record<string, unknown>;
const base: Msg[] = [
  { role: 'system', content: 'You are a helpful assistant.' },
  { role: 'user', content: QUESTION },
];
const assistant = (p: string, code: string): Msg => ({
  role: 'assistant',
  content: p.replace(/<think>[\s\S]*<\/think>\n\n/, ''),
  tool_calls: [
    {
      id: 'c',
      type: 'function',
      function: { name: 'code_interpreter', arguments: JSON.stringify({ code }) },
    },
  ],
});
const promptOf = (messages: Msg[]) =>
  tokenizeChat({ messages: messages as never, tools: TOOLS as never, addGenerationPrompt: true }, tok);

function step(
  index: number,
  promptIds: number[],
  responseText: string,
  error: boolean,
  isLast = false,
): Step {
  return {
    ...newStep({
      trajectoryId: 't',
      groupId: 'g',
      index,
      promptIds,
      responseIds: response(responseText),
      responseLogprobs: response(responseText).map(() => -0.5),
      policyVersion: 3,
      tokenSource: 'engine',
      finishReason: 'tool_calls',
      toolResults: [{ tool_call_id: 'c', content: error ? FORMAT_ERROR : '385', error }],
      isLast,
    }),
    channel: 'train',
    createdAt: 0,
  } as Step;
}

function difflibRatio(a: string, b: string): number {
  const out = execFileSync(
    'python3',
    [
      '-c',
      'import sys,json,difflib; a,b=json.load(sys.stdin); print(repr(difflib.SequenceMatcher(None,a,b).ratio()))',
    ],
    { input: JSON.stringify([a, b]) },
  );
  return Number(out.toString().trim());
}

/** A three-step episode: failed attempt 0, regeneration 1 (asked with the error), then step 2 on the purified path. */
function episode(regenP: string, regenK: string, regenCode: string) {
  const h0 = promptOf(base);
  const failed = step(0, h0, P + K, true);
  const failedMsg = assistant(P, 'print(sum(i**2 for i in range(1, 11))');
  const h1 = promptOf([...base, failedMsg, { role: 'tool', tool_call_id: 'c', content: FORMAT_ERROR }]);
  const regen = step(1, h1, regenP + regenK, false);
  const h2 = promptOf([
    ...base,
    assistant(P, regenCode),
    { role: 'tool', tool_call_id: 'c', content: '385' },
  ]);
  const after = step(2, h2, 'The answer is 385.', false, true);
  return [failed, regen, after];
}

describe('the P/K boundary and the similarity, as the authors compute them', () => {
  it('`<tool_call>` is one added token of Qwen3; the boundary is its first index in the response', () => {
    // The id comes from the tokenizer (Qwen2/Qwen3's added token 151657), not from a constant.
    expect(defaultToolCallTokenId()).toBe(151657);
    const ids = response(P + K);
    const at = toolCallStart(ids)!;
    expect(tok.decode(ids.slice(0, at))).toBe(P);
    expect(tok.decode(ids.slice(at))).toBe(`${K}<|im_end|>`);
    expect(toolCallStart(response('no call here'))).toBeNull();
  });

  it('sim over the decoded segments equals CPython difflib, and the rebuilt segment decodes alike', () => {
    const seg = (text: string) => {
      const ids = response(text);
      return tok.decode(ids.slice(toolCallStart(ids)!));
    };
    for (const [a, b] of [
      [K, K1],
      [K, KFAR],
    ] as const) {
      const turn = (k: string, code: string) => ({
        reasoning: null,
        calls: [{ name: 'code_interpreter', arguments: JSON.stringify({ code }) }],
        callText: seg(k),
      });
      const expected = difflibRatio(seg(a), seg(b));
      expect(callSimilarity(turn(a, ''), turn(b, ''))).toBe(expected);
    }
    // The online agent's rebuilt segment (no ids at hand) is the decoded one for Qwen3-format calls.
    const rebuilt = callSimilarity(
      {
        reasoning: null,
        calls: [
          {
            name: 'code_interpreter',
            arguments: JSON.stringify({ code: 'print(sum(i**2 for i in range(1, 11))' }),
          },
        ],
      },
      {
        reasoning: null,
        calls: [
          {
            name: 'code_interpreter',
            arguments: JSON.stringify({ code: 'print(sum(i**2 for i in range(1, 11)))' }),
          },
        ],
      },
    );
    expect(rebuilt).toBe(difflibRatio(seg(K), seg(K1)));
    expect(difflibRatio(seg(K), seg(K1))).toBeGreaterThanOrEqual(0.5);
  });
});

describe('trainingView: what a lease serves for an online CLEANER trajectory', () => {
  it('shallow (sim >= 0.5): P of the failed attempt + K′ of the regeneration, at the failed prompt', () => {
    const steps = episode(P2, K1, 'print(sum(i**2 for i in range(1, 11)))');
    const view = trainingView(steps, [{ failedStep: 0, retryStep: 1, mode: 'shallow' }]);
    expect(view.steps.map((s) => s.index)).toEqual([0, 2]);
    const graft = view.steps[0]!;
    expect(graft.promptIds).toEqual(steps[0]!.promptIds);
    expect(graft.responseIds).toEqual([...encode(P), ...encode(K1), tok.tokenId('<|im_end|>')!]);
    expect(tok.decode(graft.responseIds)).toBe(`${P}${K1}<|im_end|>`);
    expect(graft.responseLogprobs).toBeNull();
    expect(graft.toolResults).toEqual(steps[1]!.toolResults);
    expect(graft.metadata.cleaner_graft).toEqual({ from: [0, 1], modes: ['shallow'] });
    expect(view.steps[1]).toBe(steps[2]);
    expect(view.removed).toEqual([1]);
    expect(view.grafts[0]!.reasoningTokens).toBe(encode(P).length);
    // Nothing served shows the failed call or its error.
    for (const s of view.steps) {
      const text = tok.decode([...s.promptIds, ...s.responseIds]);
      expect(text).not.toContain('Tool call failure');
      expect(text).not.toContain('range(1, 11))"');
    }
  });

  it('deep (sim < 0.5): the regeneration whole (P′ + K′) at the failed prompt', () => {
    const steps = episode(P2, KFAR, 'import numpy as np\nx = np.arange(1, 11)\nprint(int((x * x).sum()))');
    const view = trainingView(steps, [{ failedStep: 0, retryStep: 1, mode: 'deep' }]);
    expect(view.steps[0]!.promptIds).toEqual(steps[0]!.promptIds);
    expect(view.steps[0]!.responseIds).toEqual(steps[1]!.responseIds);
    expect(tok.decode(view.steps[0]!.responseIds)).toBe(`${P2}${KFAR}<|im_end|>`);
  });

  it('a chain folds rollback by rollback onto the first failed prompt; an unverifiable chain is not served', () => {
    const [s0, s1, s2] = episode(P2, K1, 'x');
    // Step 1 failed again; step 2 regenerated it (a shallow repair of a shallow repair): P + K″.
    const s1f = { ...s1!, toolResults: [{ tool_call_id: 'c', content: FORMAT_ERROR, error: true }] };
    const K2 = call('print(385)');
    const s2r = {
      ...s2!,
      promptIds: [...s0!.promptIds, 1, 2, 3],
      responseIds: response(P2 + K2),
      isLast: false,
    };
    const s3 = { ...s2!, index: 3 };
    const view = trainingView(
      [s0!, s1f, s2r, s3],
      [
        { failedStep: 0, retryStep: 1, mode: 'shallow' },
        { failedStep: 1, retryStep: 2, mode: 'shallow' },
      ],
    );
    expect(view.steps.map((s) => s.index)).toEqual([0, 3]);
    expect(tok.decode(view.steps[0]!.responseIds)).toBe(`${P}${K2}<|im_end|>`);
    expect(view.steps[0]!.metadata.cleaner_graft).toEqual({ from: [0, 1, 2], modes: ['shallow', 'shallow'] });

    // A regeneration not asked from its failed attempt's context: neither is served.
    const forged = { ...s1!, promptIds: [9, 9, 9] };
    const refused = trainingView([s0!, forged, s2!], [{ failedStep: 0, retryStep: 1, mode: 'shallow' }]);
    expect(refused.steps.map((s) => s.index)).toEqual([2]);
    expect(refused.removed).toEqual([0, 1]);
  });

  it('a graft row drops the failed attempt routing (routed_experts) and log-probs; prompt-side fields stay', () => {
    const [s0, s1, s2] = episode(P2, K1, 'print(sum(i**2 for i in range(1, 11)))');
    // Claw-R1's [tokens][layers][top_k] routing of the failed attempt, one entry per prompt+response token.
    const routing = (st: Step) => [...st.promptIds, ...st.responseIds].map((_, i) => [[i % 8, (i + 1) % 8]]);
    const routed = [s0!, s1!, s2!].map((st) => ({ ...st, routedExperts: routing(st) }));
    const multi = { images: ['data:image/png;base64,AAAA'] };
    routed[0] = { ...routed[0]!, multiModalData: multi, trainingPromptIds: routed[0]!.promptIds.slice(1) };
    const view = trainingView(routed, [{ failedStep: 0, retryStep: 1, mode: 'shallow' }]);
    const graft = view.steps[0]!;
    expect(graft.routedExperts).toBeNull();
    expect(graft.responseLogprobs).toBeNull();
    // The prompt is the failed attempt's: what describes the prompt is kept.
    expect(graft.multiModalData).toEqual(multi);
    expect(graft.trainingPromptIds).toEqual(routed[0]!.trainingPromptIds);
    // The row after the graft was sampled from its own prompt: its routing is its own.
    expect(view.steps[1]!.routedExperts).toEqual(routing(s2!));
  });

  it("the P/K boundary is the run's tokenizer's <tool_call> id, recorded with the repairs", () => {
    // A model whose tool-call token is id 42: the graft splits there, not at Qwen's 151657.
    const MARK = 42;
    const mk = (index: number, promptIds: number[], responseIds: number[]): Step =>
      ({ ...step(index, promptIds, '', false), responseIds, responseLogprobs: null }) as Step;
    const steps = [
      mk(0, [1, 2], [5, 6, MARK, 7, 8]),
      mk(1, [1, 2, 3, 4], [9, MARK, 10, 11]),
      mk(2, [1, 2, 7], [12]),
    ];
    const view = trainingView(steps, [{ failedStep: 0, retryStep: 1, mode: 'shallow' }], {
      toolCallTokenId: MARK,
    });
    expect(view.steps[0]!.responseIds).toEqual([5, 6, MARK, 10, 11]);
    // Read from the record `gym run` writes (metadata.cleaner.tool_call_token_id).
    const metadata = {
      cleaner: { repairs: [{ failed_step: 0, retry_step: 1, mode: 'shallow' }], tool_call_token_id: MARK },
    };
    expect(trainingSteps({ metadata, derivedFrom: null }, steps)[0]!.responseIds).toEqual([
      5,
      6,
      MARK,
      10,
      11,
    ]);
  });

  it('a shallow rollback whose responses cannot be split is left out, never served as P′ + K′', () => {
    // The failed attempt has no <tool_call> token (an engine that wrote the call another way): the
    // agent went on from P + K′, which no captured ids hold.
    const [s0, s1, s2] = episode(P2, K1, 'print(sum(i**2 for i in range(1, 11)))');
    const unsplit = { ...s0!, responseIds: encode('I call it: {"code": "print(1)"}') };
    const view = trainingView([unsplit, s1!, s2!], [{ failedStep: 0, retryStep: 1, mode: 'shallow' }]);
    expect(view.steps.map((s) => s.index)).toEqual([2]);
    expect(view.removed).toEqual([0, 1]);
    // Deep takes the regeneration whole: that is what the agent went on from, as the authors fall back.
    const deep = trainingView([unsplit, s1!, s2!], [{ failedStep: 0, retryStep: 1, mode: 'deep' }]);
    expect(deep.steps[0]!.responseIds).toEqual(s1!.responseIds);
  });

  it('a regeneration the run asked for and never received is not served (its prompt holds the error)', () => {
    const [s0, s1] = episode(P2, K1, 'x');
    // The sample timed out while step 1 was owed: no repair, the failed attempt stays as it ran.
    const metadata = { cleaner: { repairs: [], abandoned_steps: [1] } };
    const served = trainingSteps({ metadata, derivedFrom: null }, [s0!, s1!]);
    expect(served.map((s) => s.index)).toEqual([0]);
    expect(served[0]).toBe(s0);
  });

  it('an online record without repairs is still an online run; no record is none', () => {
    expect(onlineCleaner({ metadata: { cleaner: { repairs: [] } }, derivedFrom: null })).toEqual({
      repairs: [],
      abandonedSteps: [],
      toolCallTokenId: null,
    });
    expect(onlineCleaner({ metadata: {}, derivedFrom: null })).toBeNull();
    expect(onlineCleaner({ metadata: { cleaner: { repairs: [] } }, derivedFrom: 'src' })).toBeNull();
  });

  it('reads repairs from runner metadata of originals only', () => {
    const metadata = {
      cleaner: { repairs: [{ failed_step: 0, retry_step: 1, mode: 'deep', similarity: 0.2 }] },
    };
    expect(onlineRepairs({ metadata, derivedFrom: null })).toEqual([
      { failedStep: 0, retryStep: 1, mode: 'deep' },
    ]);
    expect(onlineRepairs({ metadata, derivedFrom: 'src' })).toEqual([]);
    expect(onlineRepairs({ metadata: {}, derivedFrom: null })).toEqual([]);
  });
});
