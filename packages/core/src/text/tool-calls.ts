import { randomBytes } from 'node:crypto';
import { ValidationError } from '../domain/errors.js';

/** An OpenAI tool call: `arguments` is a JSON string, as the chat completions API sends it. */
export interface ToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** An assistant completion split into what an OpenAI client sees. */
export interface ParsedCompletion {
  /** Text outside reasoning and tool calls; null when there is none. */
  content: string | null;
  /** The text inside `<think>...</think>`; absent when the completion has no reasoning block. */
  reasoning?: string;
  toolCalls: ToolCall[];
}

export interface ParseToolCallsOptions {
  /** Makes each tool call's id; pass `sequentialToolCallIds()` in tests, `randomToolCallId` in service. */
  newToolCallId: () => string;
}

const THINK_OPEN = '<think>';
const THINK_CLOSE = '</think>';
const CALL_OPEN = '<tool_call>';
const CALL_CLOSE = '</tool_call>';

/** `call_` + 96 random bits, the shape OpenAI's own ids have. */
export function randomToolCallId(): string {
  return `call_${randomBytes(12).toString('hex')}`;
}

/** How a family's parser names calls: OpenAI's `call_` + hex, or Mistral's 9 letters and digits. */
export type ToolCallIdStyle = 'openai' | 'mistral';

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

/**
 * A new call id in the family's style; `random` (values in [0, 1)) makes it reproducible, else it
 * is drawn from the system's CSPRNG. Mistral's ids are 9 alphanumerics as vLLM's `mistral` parser
 * makes them: mistral-common refuses any other id when the call comes back in the history.
 */
export function newToolCallId(style: ToolCallIdStyle, random?: () => number): string {
  if (style === 'mistral') {
    const bytes = random ? null : randomBytes(9);
    let id = '';
    for (let i = 0; i < 9; i++)
      id += ALNUM[bytes ? bytes[i]! % ALNUM.length : Math.floor(random!() * ALNUM.length)];
    return id;
  }
  if (!random) return randomToolCallId();
  const hex = () =>
    Math.floor(random() * 2 ** 32)
      .toString(16)
      .padStart(8, '0');
  return `call_${hex()}${hex()}`;
}

/** Deterministic ids (`call_0`, `call_1`, ...); each generator counts on its own. */
export function sequentialToolCallIds(prefix = 'call_'): () => string {
  let next = 0;
  return () => `${prefix}${next++}`;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Python's str.strip('\n'), which the Qwen3 template applies to reasoning. */
function stripNewlines(s: string): string {
  return s.replace(/^\n+|\n+$/g, '');
}

/** Splits off reasoning: a leading `<think>` block, or text before a `</think>` the prompt opened. */
function splitReasoning(text: string): { reasoning?: string; rest: string } {
  const open = /^\s*<think>/.exec(text);
  const close = text.indexOf(THINK_CLOSE);
  if (open) {
    const start = open[0].length;
    // A completion cut off mid-thought (length limit) is all reasoning.
    if (close === -1) return { reasoning: stripNewlines(text.slice(start)), rest: '' };
    return {
      reasoning: stripNewlines(text.slice(start, close)),
      rest: text.slice(close + THINK_CLOSE.length).replace(/^\n+/, ''),
    };
  }
  // Templates that end the generation prompt with `<think>\n` leave only the closing tag in the output;
  // one that comes after a tool call is text inside the call, not the end of reasoning.
  const firstCall = text.indexOf(CALL_OPEN);
  if (close !== -1 && (firstCall === -1 || close < firstCall)) {
    return {
      reasoning: stripNewlines(text.slice(0, close)),
      rest: text.slice(close + THINK_CLOSE.length).replace(/^\n+/, ''),
    };
  }
  return { rest: text };
}

/** The name and JSON-string arguments of a tool-call body, or undefined when it is not a valid call. */
function parseCallBody(body: string): { name: string; arguments: string } | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (!isPlainObject(value) || typeof value.name !== 'string' || value.name === '') return undefined;
  const args = value.arguments === undefined ? {} : value.arguments;
  if (!isPlainObject(args)) return undefined;
  // vLLM's hermes parser re-serializes the arguments with json.dumps (", " and ": "): so does this.
  return { name: value.name, arguments: toTemplateJson(args) };
}

/**
 * Parses an assistant completion in Qwen3/Hermes format: optional `<think>` reasoning, text, then
 * `<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>` blocks. A block whose body is not a
 * valid call stays in `content`, verbatim, so nothing the model wrote is lost. Never throws.
 */
export function parseToolCalls(text: string, options: ParseToolCallsOptions): ParsedCompletion {
  const { reasoning, rest } = splitReasoning(text);
  const pieces: string[] = [];
  const calls: { name: string; arguments: string }[] = [];
  let pieceStart = 0;
  let searchFrom = 0;
  for (;;) {
    const open = rest.indexOf(CALL_OPEN, searchFrom);
    if (open === -1) break;
    const bodyStart = open + CALL_OPEN.length;
    // Try each closing tag in turn: an argument string may itself contain `</tool_call>`, and only the
    // right one closes a body that parses (a prefix cut inside a string literal never does).
    let close = rest.indexOf(CALL_CLOSE, bodyStart);
    let call: { name: string; arguments: string } | undefined;
    while (close !== -1) {
      call = parseCallBody(rest.slice(bodyStart, close));
      if (call) break;
      close = rest.indexOf(CALL_CLOSE, close + 1);
    }
    if (!call) {
      searchFrom = bodyStart;
      continue;
    }
    pieces.push(rest.slice(pieceStart, open));
    calls.push(call);
    pieceStart = close + CALL_CLOSE.length;
    searchFrom = pieceStart;
  }
  pieces.push(rest.slice(pieceStart));

  let content: string | null;
  if (calls.length === 0) {
    content = rest === '' ? null : rest;
  } else {
    // The template writes content, then "\n" before each call: drop exactly those separators.
    const [first = '', ...later] = pieces;
    const kept = [first.endsWith('\n') ? first.slice(0, -1) : first, ...later.map(stripNewlines)].filter(
      (s) => s.trim() !== '',
    );
    content = kept.length > 0 ? kept.join('\n') : null;
  }

  const toolCalls: ToolCall[] = calls.map((fn) => ({
    id: options.newToolCallId(),
    type: 'function',
    function: fn,
  }));
  return reasoning === undefined ? { content, toolCalls } : { content, reasoning, toolCalls };
}

/**
 * JSON the way Jinja's `tojson` (and Python's json.dumps) writes it: ", " and ": " separators, key
 * order kept, non-ASCII unescaped. Tool calls rendered here must match the chat template byte for byte.
 */
export function toTemplateJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(toTemplateJson).join(', ')}]`;
  if (isPlainObject(value)) {
    const entries = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${toTemplateJson(v)}`);
    return `{${entries.join(', ')}}`;
  }
  return value === undefined ? 'null' : JSON.stringify(value);
}

/** The Qwen3 template pastes the name between quotes unescaped, so it must need no JSON escaping. */
function checkName(name: string, index: number): void {
  if (name === '' || JSON.stringify(name) !== `"${name}"`) {
    throw new ValidationError(
      `tool call name ${JSON.stringify(name)} must be non-empty and need no JSON escaping`,
      `tool_calls.${index}.function.name`,
    );
  }
}

/** Arguments as the template writes them: an object via `tojson`, anything else verbatim. */
function renderArguments(args: string): string {
  try {
    const parsed: unknown = JSON.parse(args);
    if (isPlainObject(parsed)) return toTemplateJson(parsed);
  } catch {
    // Not JSON: the template pastes such a string as it is.
  }
  return args;
}

/** Tool calls as the Qwen3 template renders them in an assistant turn, joined by "\n". */
export function renderToolCalls(toolCalls: readonly Pick<ToolCall, 'function'>[]): string {
  return toolCalls
    .map((call, i) => {
      checkName(call.function.name, i);
      return `${CALL_OPEN}\n{"name": "${call.function.name}", "arguments": ${renderArguments(call.function.arguments)}}\n${CALL_CLOSE}`;
    })
    .join('\n');
}

/**
 * The completion text a Qwen3 model produces for this message (what follows `<|im_start|>assistant\n`,
 * without `<|im_end|>`); the inverse of `parseToolCalls` for content without leading/trailing newlines.
 */
export function renderCompletion(completion: {
  content?: string | null;
  reasoning?: string;
  toolCalls?: readonly Pick<ToolCall, 'function'>[];
}): string {
  let content = completion.content ?? '';
  let out = '';
  if (completion.reasoning !== undefined) {
    out += `${THINK_OPEN}\n${stripNewlines(completion.reasoning)}\n${THINK_CLOSE}\n\n`;
    content = content.replace(/^\n+/, '');
  }
  out += content;
  const calls = completion.toolCalls ?? [];
  if (calls.length > 0) out += (content ? '\n' : '') + renderToolCalls(calls);
  return out;
}
