import type { ParsedCompletion, ParseToolCallsOptions } from '../tool-calls.js';
import { decodeJsonObjectAt, pythonJsonDumps } from './json-text.js';

/** What Llama 3.1+ writes before a tool call when its prompt asks for it (`Environment: ipython`). */
export const LLAMA_PYTHON_TAG = '<|python_tag|>';

interface LlamaCall {
  name: string;
  arguments: string;
}

/** A decoded object as a call: `name` plus `parameters` (the model card's key) or `arguments`. */
function asCall(value: Record<string, unknown>): LlamaCall | undefined {
  if (typeof value.name !== 'string') return undefined;
  const args = 'arguments' in value ? value.arguments : value.parameters;
  if (args === undefined) return undefined;
  // vLLM's llama3_json returns json.dumps(args): ASCII-escaped, ", " and ": " separators.
  return { name: value.name, arguments: pythonJsonDumps(args, { ensureAscii: true }) };
}

/** The calls of a `{...}; {...}` chain starting at `start`; stops at the first link that is not a call. */
function callChain(text: string, start: number): LlamaCall[] {
  const calls: LlamaCall[] = [];
  let at = start;
  for (;;) {
    const decoded = decodeJsonObjectAt(text, at);
    const call = decoded && asCall(decoded.value);
    if (!decoded || !call) return calls;
    calls.push(call);
    const next = /^\s*;\s*/.exec(text.slice(decoded.end));
    if (!next || text[decoded.end + next[0].length] !== '{') return calls;
    at = decoded.end + next[0].length;
  }
}

/**
 * Llama 3.x JSON tool calls, as vLLM's `llama3_json` parser reads them: the first JSON object in the
 * text that has a `name` and `parameters` (or `arguments`), and any more chained after it with `;`.
 * As in vLLM, text around the calls is dropped (content is null) once a call is found; text with no
 * call is all content. Never throws.
 */
export function parseLlama3JsonToolCalls(text: string, options: ParseToolCallsOptions): ParsedCompletion {
  let from = text.indexOf('{');
  while (from !== -1) {
    const calls = callChain(text, from);
    if (calls.length > 0) {
      return {
        content: null,
        toolCalls: calls.map((fn) => ({ id: options.newToolCallId(), type: 'function', function: fn })),
      };
    }
    from = text.indexOf('{', from + 1);
  }
  return { content: text === '' ? null : text, toolCalls: [] };
}
