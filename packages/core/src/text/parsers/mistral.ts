import type { ParsedCompletion, ParseToolCallsOptions, ToolCall } from '../tool-calls.js';
import { balancedJsonEnd, pythonJsonDumps } from './json-text.js';

/** The control token every Mistral tool call starts with. */
export const MISTRAL_TOOL_CALLS = '[TOOL_CALLS]';
/** Only tokenizers of version 11 and later have it: it tells the two call formats apart, as in vLLM. */
export const MISTRAL_ARGS = '[ARGS]';

/**
 * How a Mistral model writes its calls: `json-list` (tokenizers before v11: `[TOOL_CALLS][{"name": ...,
 * "arguments": {...}}, ...]`) or `name-args` (v11 and later: `[TOOL_CALLS]name[ARGS]{...}` per call).
 */
export type MistralCallFormat = 'json-list' | 'name-args';

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

const orNull = (s: string): string | null => (s === '' ? null : s);

/** v11+: each `[TOOL_CALLS]` piece is a name up to the first `{`, then the arguments as written. */
function parseNameArgs(pieces: string[]): { name: string; arguments: string }[] {
  const calls: { name: string; arguments: string }[] = [];
  for (const piece of pieces) {
    const brace = piece.indexOf('{');
    // A piece with no arguments is dropped, as vLLM drops it (it still counts the turn as a call).
    if (brace === -1) continue;
    // Arguments stay verbatim, even when not valid JSON: the model should see the call it tried to make.
    calls.push({ name: piece.slice(0, brace).replaceAll(MISTRAL_ARGS, ''), arguments: piece.slice(brace) });
  }
  return calls;
}

/** A decoded `[{"name": ..., "arguments": ...}, ...]` as calls; undefined when it is not that shape. */
function callsFromList(value: unknown): { name: string; arguments: string }[] | undefined {
  if (!Array.isArray(value)) return undefined;
  const calls: { name: string; arguments: string }[] = [];
  for (const item of value) {
    if (!isPlainObject(item) || typeof item.name !== 'string') return undefined;
    // vLLM re-serializes with json.dumps(ensure_ascii=False).
    const args = item.arguments === undefined ? {} : item.arguments;
    calls.push({ name: item.name, arguments: pythonJsonDumps(args, { ensureAscii: false }) });
  }
  return calls;
}

/** The JSON value the text starts with (Python's raw_decode, for arrays and objects). */
function decodeLeadingJson(text: string): { ok: true; value: unknown } | { ok: false } {
  if (text[0] !== '[' && text[0] !== '{') return { ok: false };
  const end = balancedJsonEnd(text, 0);
  if (end === -1) return { ok: false };
  try {
    return { ok: true, value: JSON.parse(text.slice(0, end)) };
  } catch {
    return { ok: false };
  }
}

/** Before v11: one `[TOOL_CALLS]`, then a JSON list of calls (trailing text ignored). */
function parseJsonList(
  content: string,
  after: string,
): { content: string | null; calls: { name: string; arguments: string }[] } | undefined {
  const listText = after.trim();
  const leading = decodeLeadingJson(listText);
  if (leading.ok) {
    const calls = callsFromList(leading.value);
    return calls ? { content: orNull(content), calls } : undefined;
  }
  // vLLM's fallback: the widest `[{...}]` in the text; when that fails too, the text after the marker is content.
  const match = /\[\{[\s\S]*\}\]/.exec(listText);
  if (match) {
    try {
      const calls = callsFromList(JSON.parse(match[0]));
      if (calls) return { content: orNull(content), calls };
      return undefined;
    } catch {
      // falls through: not JSON either
    }
  }
  return { content: orNull(listText), calls: [] };
}

/**
 * Mistral tool calls, as vLLM's `mistral` parser reads a whole completion: content is the text before
 * the first `[TOOL_CALLS]`; the calls follow in the model's format (`format`, chosen by the vocabulary).
 * Where vLLM raises (two `[TOOL_CALLS]` in the list format, or a list that is not of calls), the
 * completion's text stays content instead. Never throws.
 */
export function parseMistralToolCalls(
  text: string,
  options: ParseToolCallsOptions,
  format: MistralCallFormat,
): ParsedCompletion {
  const asText: ParsedCompletion = { content: orNull(text), toolCalls: [] };
  if (!text.includes(MISTRAL_TOOL_CALLS)) return asText;
  const [content = '', ...pieces] = text.split(MISTRAL_TOOL_CALLS);
  let parsed: { content: string | null; calls: { name: string; arguments: string }[] } | undefined;
  if (format === 'name-args') parsed = { content: orNull(content), calls: parseNameArgs(pieces) };
  else if (pieces.length === 1) parsed = parseJsonList(content, pieces[0]!);
  if (!parsed) return asText;
  const toolCalls: ToolCall[] = parsed.calls.map((fn) => ({
    id: options.newToolCallId(),
    type: 'function',
    function: fn,
  }));
  return { content: parsed.content, toolCalls };
}
