import { existsSync, readFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { z } from 'zod';
import { StepwiseError, ValidationError } from '../domain/errors.js';
import {
  type ChatTokenizer,
  type CompiledChatTemplate,
  compileChatTemplate,
  createChatTokenizer,
} from './tokenizer.js';

/*
 * A model is a folder: the Hugging Face files a checkpoint ships (tokenizer.json,
 * tokenizer_config.json, generation_config.json, config.json, chat_template.jinja), read the way
 * transformers reads them and never fetched: nothing here touches the network.
 */

/** A folder that cannot serve as a model: says which file and why. */
export class ModelFolderError extends StepwiseError {
  override readonly name = 'ModelFolderError';
  constructor(dir: string, detail: string) {
    super(`model folder ${dir}: ${detail}`, 400, 'invalid_model_folder', 'model_dir');
  }
}

/** A special token as tokenizer_config.json writes it: a string, or an AddedToken object. */
const SpecialToken = z
  .union([z.string(), z.looseObject({ content: z.string() })])
  .nullable()
  .optional()
  .transform((t) => (t == null ? undefined : typeof t === 'string' ? t : t.content));

/** transformers accepts a template string, or a list of named templates (`default`, `tool_use`, ...). */
const ChatTemplateField = z
  .union([z.string(), z.array(z.object({ name: z.string(), template: z.string() }))])
  .nullable()
  .optional();
type ChatTemplateField = z.infer<typeof ChatTemplateField>;

const TokenizerConfigFile = z.looseObject({
  chat_template: ChatTemplateField,
  bos_token: SpecialToken,
  eos_token: SpecialToken,
  pad_token: SpecialToken,
  unk_token: SpecialToken,
});

const TokenIds = z
  .union([z.number().int().min(0), z.array(z.number().int().min(0))])
  .nullable()
  .optional()
  .transform((v) => (v == null ? [] : Array.isArray(v) ? v : [v]));

const GenerationConfigFile = z.looseObject({ eos_token_id: TokenIds, bos_token_id: TokenIds });
const ModelConfigFile = z.looseObject({
  model_type: z.string().optional(),
  architectures: z.array(z.string()).optional(),
});

/** The special tokens a template and a tokenizer need, as plain strings. */
export interface SpecialTokens {
  bos?: string;
  eos?: string;
  pad?: string;
  unk?: string;
}

/** Chat templates by name, as transformers keeps them (`default` is the one used without tools). */
export type NamedTemplates = ReadonlyMap<string, string>;

/** A model folder, read and checked; the tokenizer and adapter are built from it. */
export interface ModelFolder {
  /** The folder's absolute path. */
  readonly dir: string;
  /** A name for errors and logs: config.json's `_name_or_path`, else the folder's name. */
  readonly name: string;
  /** tokenizer.json, parsed (what @huggingface/tokenizers loads). */
  readonly tokenizerJson: unknown;
  /** tokenizer_config.json with special tokens flattened to strings and no chat_template. */
  readonly tokenizerConfig: Record<string, unknown>;
  readonly specialTokens: SpecialTokens;
  /** The named templates (`default`, `tool_use`, ...); empty when the folder ships none. */
  readonly chatTemplates: NamedTemplates;
  /** generation_config.json's eos_token_id (an engine stops on any of them); empty when absent. */
  readonly generationEosTokenIds: readonly number[];
  /** config.json's model_type (`qwen3`, `llama`, `gpt_oss`, ...), when the folder has one. */
  readonly modelType?: string;
}

function readJson(dir: string, file: string, required: boolean): unknown {
  const path = join(dir, file);
  if (!existsSync(path)) {
    if (required) throw new ModelFolderError(dir, `${file} is missing`);
    return undefined;
  }
  try {
    return JSON.parse(readFileSync(path, 'utf8'));
  } catch (err) {
    throw new ModelFolderError(dir, `${file} is not valid JSON (${(err as Error).message})`);
  }
}

function parseFile<T extends z.ZodType>(dir: string, file: string, schema: T, value: unknown): z.output<T> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issue = result.error.issues[0]!;
  const where = issue.path.length > 0 ? issue.path.join('.') : '(top level)';
  throw new ModelFolderError(dir, `${file}: ${where}: ${issue.message}`);
}

/**
 * The templates transformers would use: chat_template.jinja wins over tokenizer_config.json's field
 * (transformers >= 4.43 saves it there); a bare string is the `default` template.
 */
function chatTemplates(dir: string, field: ChatTemplateField): Map<string, string> {
  const jinja = join(dir, 'chat_template.jinja');
  if (existsSync(jinja)) return new Map([['default', readFileSync(jinja, 'utf8')]]);
  if (field == null) return new Map();
  if (typeof field === 'string') return new Map([['default', field]]);
  return new Map(field.map((t) => [t.name, t.template]));
}

/** Reads a model folder; throws ModelFolderError naming the file that is missing or malformed. */
export function loadModelFolder(dirArg: string): ModelFolder {
  const dir = resolve(dirArg);
  if (!existsSync(dir)) throw new ModelFolderError(dir, 'does not exist');
  const tokenizerJson = readJson(dir, 'tokenizer.json', true);
  const rawConfig = readJson(dir, 'tokenizer_config.json', true);
  const config = parseFile(dir, 'tokenizer_config.json', TokenizerConfigFile, rawConfig);
  const generation = parseFile(
    dir,
    'generation_config.json',
    GenerationConfigFile,
    readJson(dir, 'generation_config.json', false) ?? {},
  );
  const rawModelConfig = readJson(dir, 'config.json', false) ?? {};
  const modelConfig = parseFile(dir, 'config.json', ModelConfigFile, rawModelConfig);
  const specialTokens: SpecialTokens = {
    bos: config.bos_token,
    eos: config.eos_token,
    pad: config.pad_token,
    unk: config.unk_token,
  };
  const { chat_template: _template, ...rest } = config;
  const nameOrPath = (rawModelConfig as { _name_or_path?: unknown })._name_or_path;
  return {
    dir,
    name: typeof nameOrPath === 'string' && nameOrPath !== '' ? nameOrPath : basename(dir),
    tokenizerJson,
    // The tokenizer library reads the special tokens as strings; hand it the flattened ones.
    tokenizerConfig: {
      ...rest,
      bos_token: specialTokens.bos ?? null,
      eos_token: specialTokens.eos ?? null,
      pad_token: specialTokens.pad ?? null,
      unk_token: specialTokens.unk ?? null,
    },
    specialTokens,
    chatTemplates: chatTemplates(dir, config.chat_template),
    generationEosTokenIds: generation.eos_token_id,
    ...(modelConfig.model_type ? { modelType: modelConfig.model_type } : {}),
  };
}

/**
 * The template transformers picks: a named one when asked for, else `tool_use` when tools are given
 * and the folder has one, else `default`; the only template when there is exactly one.
 */
export function selectChatTemplate(
  folder: Pick<ModelFolder, 'dir' | 'chatTemplates'>,
  options: { name?: string; hasTools?: boolean } = {},
): string {
  const templates = folder.chatTemplates;
  if (options.name !== undefined) {
    const named = templates.get(options.name);
    if (named === undefined)
      throw new ValidationError(
        `model folder ${folder.dir} has no chat template named ${JSON.stringify(options.name)} (has: ${[...templates.keys()].join(', ') || 'none'})`,
        'chat_template',
      );
    return named;
  }
  if (options.hasTools && templates.has('tool_use')) return templates.get('tool_use')!;
  const fallback =
    templates.get('default') ?? (templates.size === 1 ? [...templates.values()][0] : undefined);
  if (fallback === undefined)
    throw new ValidationError(
      templates.size === 0
        ? `model folder ${folder.dir} has no chat template (add chat_template.jinja)`
        : `model folder ${folder.dir} has several chat templates and none named "default"`,
      'chat_template',
    );
  return fallback;
}

/**
 * The folder's tokenizer: its vocabulary, special tokens, the stop ids of tokenizer_config and
 * generation_config, and its default chat template (or one that refuses, naming the folder, when it
 * ships none).
 */
export function createFolderTokenizer(folder: ModelFolder): ChatTokenizer {
  const hasDefault =
    folder.chatTemplates.size > 0 && (folder.chatTemplates.has('default') || folder.chatTemplates.size === 1);
  const base = createChatTokenizer(
    folder.tokenizerJson,
    { ...folder.tokenizerConfig, chat_template: hasDefault ? selectChatTemplate(folder) : '' },
    { extraEosTokenIds: folder.generationEosTokenIds },
  );
  const special = {
    bos_token: folder.specialTokens.bos ?? '',
    eos_token: folder.specialTokens.eos ?? '',
    pad_token: folder.specialTokens.pad ?? '',
    unk_token: folder.specialTokens.unk ?? '',
  };
  const compiled = new Map<string, CompiledChatTemplate>();
  const named = (name: string): CompiledChatTemplate | undefined => {
    const source = folder.chatTemplates.get(name);
    if (source === undefined) return undefined;
    if (!compiled.has(name)) compiled.set(name, compileChatTemplate(source, special));
    return compiled.get(name);
  };
  const chatTemplate: CompiledChatTemplate = hasDefault
    ? base.chatTemplate
    : {
        source: '',
        render() {
          return selectChatTemplate(folder); // throws: the folder has no template to render with
        },
      };
  return { ...base, chatTemplate, namedChatTemplate: named };
}
