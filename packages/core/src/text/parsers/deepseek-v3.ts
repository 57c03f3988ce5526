import type { ParsedCompletion, ParseToolCallsOptions, ToolCall } from '../tool-calls.js';

export const DEEPSEEK_CALLS_BEGIN = '<｜tool▁calls▁begin｜>';
export const DEEPSEEK_CALLS_END = '<｜tool▁calls▁end｜>';
// One call: its type, the name, then the arguments in a ```json fence (one line, as vLLM's regex reads).
const CALL = /<｜tool▁call▁begin｜>(.*)<｜tool▁sep｜>(.*)\n```json\n(.*)\n```<｜tool▁call▁end｜>/g;

function isJsonObject(text: string): boolean {
  try {
    const v: unknown = JSON.parse(text);
    return typeof v === 'object' && v !== null && !Array.isArray(v);
  } catch {
    return false;
  }
}

/**
 * DeepSeek-V3 tool calls, as vLLM's `deepseek_v3` parser reads them: content is the text before
 * `<｜tool▁calls▁begin｜>`, each call a `function<｜tool▁sep｜>NAME\n```json\nARGS\n```` block, the
 * arguments returned as written. Unlike vLLM (whose own tests mark this xfail), a block whose
 * arguments are not a JSON object is no call, and a completion without a valid call keeps its text.
 */
export function parseDeepSeekV3ToolCalls(text: string, options: ParseToolCallsOptions): ParsedCompletion {
  const begin = text.indexOf(DEEPSEEK_CALLS_BEGIN);
  if (begin === -1) return { content: text === '' ? null : text, toolCalls: [] };
  const toolCalls: ToolCall[] = [];
  for (const m of text.slice(begin).matchAll(CALL)) {
    const [, , name = '', args = ''] = m;
    if (name === '' || !isJsonObject(args)) continue;
    toolCalls.push({ id: options.newToolCallId(), type: 'function', function: { name, arguments: args } });
  }
  if (toolCalls.length === 0) return { content: text === '' ? null : text, toolCalls };
  const before = text.slice(0, begin);
  return { content: before === '' ? null : before, toolCalls };
}
