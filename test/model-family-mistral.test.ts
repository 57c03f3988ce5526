import { spawnSync } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ChatMessageInput } from '../packages/core/src/text/chat-template.js';
import { createModelAdapter, type ModelAdapter } from '../packages/core/src/text/model-adapter.js';
import { sequentialToolCallIds } from '../packages/core/src/text/tool-calls.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { READ_FILE_TOOLS, toolLoop } from './support/tool-loop.js';

/*
 * Mistral's adapter against Mistral's own references: mistral-common (Mistral's official chat encoder)
 * gives the ids of every prompt of a multi-turn tool loop, and the parser returns what vLLM's
 * `mistral` parser returns on the cases of vLLM's tests, in both call formats. The model folder is
 * mistral-common's bundled v3 tokenizer (Mistral-7B-Instruct-v0.3's), converted to tokenizer.json by
 * test/support/mistral_reference.py, plus test/fixtures/models/mistral/. CI sets STEPWISE_TRAIN_PYTHON:
 * there a Python without mistral-common fails instead of skipping.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);
const REFERENCE_MODULES = ['mistral_common', 'sentencepiece', 'google.protobuf', 'tiktoken', 'transformers'];
const hasReference =
  python !== null &&
  spawnSync(python, [
    '-c',
    `import importlib.util as u, sys; sys.exit(0 if all(u.find_spec(m) for m in ${JSON.stringify(REFERENCE_MODULES)}) else 1)`,
  ]).status === 0;
if (!hasReference && !required)
  console.warn('Mistral reference encodes skipped: no Python with mistral-common');

const FIXTURE = new URL('./fixtures/models/mistral/', import.meta.url).pathname;
const SCRIPT = new URL('./support/mistral_reference.py', import.meta.url).pathname;

/** A folder with only the added tokens a parse looks at: the call format follows the vocabulary. */
function vocabularyOnlyFolder(tokens: string[]): string {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-mistral-vocab-'));
  const added = tokens.map((content, id) => ({ id, content, special: true, normalized: false }));
  writeFileSync(
    join(dir, 'tokenizer.json'),
    JSON.stringify({ added_tokens: added, model: { type: 'BPE', vocab: {}, merges: [] } }),
  );
  writeFileSync(join(dir, 'tokenizer_config.json'), '{}');
  copyFileSync(join(FIXTURE, 'config.json'), join(dir, 'config.json'));
  return dir;
}

interface ParserCase {
  parser: string;
  format?: 'json-list' | 'name-args';
  name: string;
  text: string;
  expected: { content: string | null; tool_calls: { name: string; arguments: string }[] };
}

const PARSER_CASES = (
  JSON.parse(readFileSync(new URL('./fixtures/models/vllm-parser-cases.json', import.meta.url), 'utf8')) as {
    cases: ParserCase[];
  }
).cases.filter((c) => c.parser === 'mistral');

describe("parsing equals vLLM's mistral parser on vLLM's test cases", () => {
  // Tokenizers before v11 (no `[ARGS]`) write a JSON list; v11 and later `name[ARGS]{...}`.
  const dirs = {
    'json-list': vocabularyOnlyFolder(['<unk>', '<s>', '</s>', '[TOOL_CALLS]']),
    'name-args': vocabularyOnlyFolder(['<unk>', '<s>', '</s>', '[TOOL_CALLS]', '[ARGS]']),
  };
  afterAll(() => {
    for (const dir of Object.values(dirs)) rmSync(dir, { recursive: true, force: true });
  });

  it('the folder is detected as Mistral, parsed as vLLM mistral', () => {
    const adapter = createModelAdapter(dirs['json-list']);
    expect(adapter.family).toBe('mistral');
    expect(adapter.toolParser).toBe('mistral');
    expect(adapter.toolCallOpen).toBe('[TOOL_CALLS]');
    expect(adapter.thinking).toBeNull();
  });

  it.each(PARSER_CASES.map((c) => [`${c.format}: ${c.name}`, c] as const))('%s', (_, c) => {
    const adapter = createModelAdapter(dirs[c.format!]);
    const parsed = adapter.parse(c.text, { newToolCallId: sequentialToolCallIds() });
    expect(parsed.toolCalls.map((t) => t.function)).toEqual(c.expected.tool_calls);
    expect(parsed.content).toBe(c.expected.content);
  });
});

const TOOLS = READ_FILE_TOOLS;

const call = (id: string, path: string) => ({
  id,
  type: 'function' as const,
  function: { name: 'read_file', arguments: JSON.stringify({ path }) },
});

// mistral-common takes only 9 alphanumeric characters as a call id.
const LOOP = toolLoop((n) => `call0000${n}`);

/** Every prompt of the loop (each point where the assistant speaks next), and the whole of it. */
function loopCases(): ChatMessageInput[][] {
  const cases = LOOP.flatMap((m, i) =>
    m.role === 'user' || m.role === 'tool' ? [LOOP.slice(0, i + 1)] : [],
  );
  // mistral-common strips trailing spaces from assistant text, and only spaces.
  const spaces: ChatMessageInput[] = [
    { role: 'user', content: 'Say hi.' },
    { role: 'assistant', content: 'Hi there.  ' },
    { role: 'user', content: 'Once more, on two lines.' },
    { role: 'assistant', content: 'Hi\nthere \n  ' },
    { role: 'user', content: 'Thanks.' },
  ];
  return [...cases, LOOP.slice(0, 7), spaces];
}

/** v7 takes text and calls in one assistant message (v3 refuses that), and tool results as text. */
const TEXT_AND_CALL: ChatMessageInput[] = [
  { role: 'system', content: 'Answer briefly.' },
  { role: 'user', content: 'How many lines has a.txt?' },
  { role: 'assistant', content: 'Reading it now. ', tool_calls: [call('call00003', 'a.txt')] },
  { role: 'tool', tool_call_id: 'call00003', content: '{"lines": 1}' },
];

/** The formats checked: mistral-common's bundled SentencePiece tokenizers and the fixture template of each. */
const VERSIONS = [
  { version: 'v3', fixture: 'mistral', extra: [] as ChatMessageInput[][] },
  { version: 'v7', fixture: 'mistral-v7', extra: [TEXT_AND_CALL] },
];

describe.skipIf(!hasReference && !required).each(VERSIONS)(
  '$version: rendering equals mistral-common',
  ({ version, fixture, extra }) => {
    let dir = '';
    let adapter: ModelAdapter;
    beforeAll(async () => {
      if (!python || !hasReference)
        throw new Error(`STEPWISE_TRAIN_PYTHON is set but cannot import ${REFERENCE_MODULES.join(', ')}`);
      dir = mkdtempSync(join(tmpdir(), 'stepwise-model-mistral-'));
      await runPython(python, [SCRIPT, 'folder', dir, version], { timeoutMs: 120_000 });
      const files = new URL(`./fixtures/models/${fixture}/`, import.meta.url).pathname;
      for (const file of readdirSync(files).filter((f) => f !== 'README.md'))
        copyFileSync(join(files, file), join(dir, file));
      adapter = createModelAdapter(dir);
    }, 150_000);
    afterAll(() => {
      if (dir) rmSync(dir, { recursive: true, force: true });
    });

    it('every prompt of a multi-turn tool loop gives mistral-common ids', async () => {
      expect(adapter.family).toBe('mistral');
      const conversations = [...loopCases(), ...extra];
      const ours = conversations.map((messages) => {
        const input = { messages, tools: TOOLS, addGenerationPrompt: messages.at(-1)!.role !== 'assistant' };
        return { ids: adapter.tokenize(input), text: adapter.render(input) };
      });
      // These formats have no reasoning: the reference gets the messages without it.
      const cases = conversations.map((messages) => ({
        messages: messages.map(({ reasoning_content: _, ...m }) => m),
        tools: TOOLS,
      }));
      const work = mkdtempSync(join(tmpdir(), 'stepwise-mistral-ref-'));
      try {
        const file = join(work, 'cases.json');
        writeFileSync(file, JSON.stringify({ cases }));
        const out = await runPython(python!, [SCRIPT, 'encode', file, version], { timeoutMs: 120_000 });
        const { results } = JSON.parse(out) as { results: { ids?: number[]; error?: string }[] };
        expect(results).toHaveLength(ours.length);
        results.forEach((ref, i) => {
          expect(ref.error, `case ${i}`).toBeUndefined();
          expect(ours[i]!.ids, `case ${i}: ${ours[i]!.text}`).toEqual(ref.ids);
        });
      } finally {
        rmSync(work, { recursive: true, force: true });
      }
    }, 150_000);

    it('a call the template rendered parses back to the same call', () => {
      const text = adapter.render({ messages: LOOP.slice(0, 3), tools: TOOLS });
      const completion = text.slice(text.lastIndexOf('[/INST]') + '[/INST]'.length, -'</s>'.length);
      const parsed = adapter.parse(completion, { newToolCallId: sequentialToolCallIds() });
      expect(parsed.content).toBeNull();
      expect(parsed.toolCalls.map((t) => t.function)).toEqual([
        { name: 'read_file', arguments: '{"path": "a.txt"}' },
      ]);
      expect(adapter.endOfTurnTokens).toEqual(['</s>']);
    });
  },
);
