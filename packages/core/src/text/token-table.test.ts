import { describe, expect, it } from 'vitest';
import { decodeWithTable, loadQwen3TokenTable } from './token-table.js';
import { loadQwen3Tokenizer } from './tokenizer.js';

describe('the decoding table', () => {
  const table = loadQwen3TokenTable();
  const tokenizer = loadQwen3Tokenizer();

  it("decodes every sequence as Qwen3's tokenizer does, added tokens and partial characters included", () => {
    let seed = 12_345;
    const next = (n: number) => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    // 151,643 vocabulary tokens and 26 added ones.
    expect(table.offsets.length - 1).toBe(151_669);
    for (let k = 0; k < 5_000; k++) {
      const ids = Array.from({ length: 1 + next(24) }, () =>
        next(20) === 0 ? 151_643 + next(26) : next(151_643),
      );
      expect(decodeWithTable(table, ids)).toBe(tokenizer.decode(ids));
    }
    // A token that is U+FEFF's bytes keeps it (a UTF-8 decoder would drop a leading BOM).
    expect(decodeWithTable(table, [42_272])).toBe(tokenizer.decode([42_272]));
    expect(decodeWithTable(table, [42_272]).codePointAt(0)).toBe(0xfeff);
    const text = 'Héllo wörld 你好 🎉\n\t  `x = 1`  <|im_start|>user\nok<|im_end|>';
    expect(decodeWithTable(table, tokenizer.encode(text, { addSpecialTokens: false }))).toBe(text);
    expect(decodeWithTable(table, [])).toBe('');
  });

  it('refuses an id outside the vocabulary', () => {
    expect(() => decodeWithTable(table, [1, 151_669])).toThrow(RangeError);
    expect(() => decodeWithTable(table, [-1])).toThrow(RangeError);
  });
});
