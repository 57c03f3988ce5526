import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeWithTable, loadTokenTable } from '../packages/core/src/text/token-table.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { makeModelFolder } from './support/model-folders.js';

/*
 * The dashboard's decoding tables against the tokenizers library (the Rust decoder transformers
 * runs): random id sequences, rich in SentencePiece byte tokens (whole and broken UTF-8) and added
 * tokens, decoded both ways. Gemma 3 and Mistral have SentencePiece decoders (Mistral's strips the
 * leading space), Llama 3 and DeepSeek-V3 byte-level ones. CI sets STEPWISE_TRAIN_PYTHON, so a
 * missing reference fails there instead of skipping.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);

const DECODE = `
import json, sys
from tokenizers import Tokenizer
request = json.load(open(sys.argv[1], encoding="utf-8"))
out = [Tokenizer.from_file(c["file"]).decode_batch(c["seqs"], skip_special_tokens=False) for c in request]
json.dump(out, sys.stdout)
`;

interface Vocab {
  size: number;
  byteIds: number[];
  addedIds: number[];
}

/** What the sequences draw from, read from the file itself (the reference, not the table). */
function vocabOf(file: string): Vocab {
  const json = JSON.parse(readFileSync(file, 'utf8')) as {
    model: { vocab: Record<string, number> };
    added_tokens: { id: number }[];
  };
  const ids = Object.values(json.model.vocab);
  // byteIds[b] is the id of the token for byte b (`<0xNN>`), where the vocabulary has them.
  const byteIds: number[] = [];
  for (const [t, id] of Object.entries(json.model.vocab)) {
    const m = /^<0x([0-9A-F]{2})>$/.exec(t);
    if (m) byteIds[Number.parseInt(m[1]!, 16)] = id;
  }
  const addedIds = json.added_tokens.map((a) => a.id);
  const size = [...ids, ...addedIds].reduce((a, b) => Math.max(a, b), 0) + 1;
  return { size, byteIds, addedIds };
}

function sequences(vocab: Vocab, count: number, seed: number): number[][] {
  let state = seed;
  const next = (n: number) => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state % n;
  };
  const out: number[][] = [];
  for (let k = 0; k < count; k++) {
    const ids: number[] = [];
    for (let n = 1 + next(16); n > 0; n--) {
      const r = next(100);
      if (vocab.byteIds.length > 0 && r < 35) {
        // A whole character's bytes (é, 你, 🎉) or one stray byte.
        const chars = ['é', '你', '🎉', 'ß'];
        const bytes = next(3) === 0 ? [next(256)] : [...Buffer.from(chars[next(chars.length)]!)];
        for (const b of bytes) ids.push(vocab.byteIds[b]!);
      } else if (r < 42) ids.push(vocab.addedIds[next(vocab.addedIds.length)]!);
      else ids.push(next(vocab.size));
    }
    out.push(ids);
  }
  return out;
}

const FOLDERS = ['gemma3', 'mistral', 'llama3_1', 'deepseek_v3'] as const;
const folders = new Map<string, { dir: string; remove(): void }>();

beforeAll(async () => {
  for (const f of FOLDERS) if (f !== 'mistral') folders.set(f, makeModelFolder(f));
  if (python) {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-model-mistral-'));
    const script = new URL('./support/mistral_reference.py', import.meta.url).pathname;
    await runPython(python, [script, 'folder', dir, 'v3'], { timeoutMs: 120_000 });
    writeFileSync(join(dir, 'config.json'), '{"model_type": "mistral"}');
    folders.set('mistral', { dir, remove: () => rmSync(dir, { recursive: true, force: true }) });
  }
}, 150_000);
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

describe("each family's decoding table decodes as the tokenizers library does", () => {
  it('2,000 random sequences per folder, byte tokens and added tokens included', async () => {
    if (!python) {
      if (required) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no tokenizers');
      return;
    }
    const cases = FOLDERS.map((f, i) => {
      const file = join(folders.get(f)!.dir, 'tokenizer.json');
      return { folder: f, file, seqs: sequences(vocabOf(file), 2_000, 7 + i) };
    });
    const work = mkdtempSync(join(tmpdir(), 'stepwise-decode-ref-'));
    let reference: string[][];
    try {
      const file = join(work, 'cases.json');
      writeFileSync(file, JSON.stringify(cases.map(({ file, seqs }) => ({ file, seqs }))));
      reference = JSON.parse(await runPython(python, ['-c', DECODE, file], { timeoutMs: 120_000 }));
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
    for (const [i, c] of cases.entries()) {
      const table = loadTokenTable({ dir: folders.get(c.folder)!.dir });
      // SentencePiece folders mark their byte tokens; byte-level ones need none.
      expect(Boolean(table.byteTokens), c.folder).toBe(c.folder === 'gemma3' || c.folder === 'mistral');
      const ours = c.seqs.map((ids) => decodeWithTable(table, ids));
      if (c.folder === 'mistral') {
        // One token of a longer text keeps its space; a text that starts with it loses it (Strip).
        const vocab = (
          JSON.parse(readFileSync(c.file, 'utf8')) as { model: { vocab: Record<string, number> } }
        ).model.vocab;
        const word = vocab['\u2581the']!;
        expect(decodeWithTable(table, [word])).toBe('the');
        expect(decodeWithTable(table, [word], { piece: true })).toBe(' the');
      }
      for (const [k, ids] of c.seqs.entries())
        expect(ours[k], `${c.folder} ${JSON.stringify(ids)}`).toBe(reference[i]![k]);
    }
  }, 300_000);
});
