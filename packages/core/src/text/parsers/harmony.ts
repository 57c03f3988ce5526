import type { ParsedCompletion, ParseToolCallsOptions, ToolCall } from '../tool-calls.js';
import { pythonJsonDumps } from './json-text.js';

/*
 * gpt-oss's harmony format: messages `<|start|>ROLE<|channel|>CHANNEL [to=RECIPIENT] [<|constrain|>TYPE]
 * <|message|>TEXT` ended by `<|end|>`, `<|call|>` (a tool call) or `<|return|>` (the final answer).
 * A completion starts after the prompt's `<|start|>assistant`, so its first message has no role.
 */

export const HARMONY_START = '<|start|>';
export const HARMONY_MESSAGE = '<|message|>';
export const HARMONY_CALL = '<|call|>';
const HARMONY_ENDS = ['<|end|>', HARMONY_CALL, '<|return|>'];

/** One message of a harmony completion. */
export interface HarmonyMessage {
  role: string;
  channel?: string;
  recipient?: string;
  contentType?: string;
  text: string;
}

function parseHeader(header: string, role: string): Omit<HarmonyMessage, 'text'> {
  const out: Omit<HarmonyMessage, 'text'> = { role };
  let rest = header;
  // The role (absent in the completion's first message) runs up to the first marker or space.
  const roleMatch = /^([^\s<]+)/.exec(rest);
  if (roleMatch && !roleMatch[1]!.startsWith('to=')) {
    out.role = roleMatch[1]!;
    rest = rest.slice(roleMatch[0].length);
  }
  const recipient = /(?:^|\s)to=([^\s<]+)/.exec(rest);
  if (recipient) {
    out.recipient = recipient[1]!;
    rest = rest.replace(recipient[0], ' ');
  }
  const channel = /<\|channel\|>([^\s<]+)/.exec(rest);
  if (channel) {
    out.channel = channel[1]!;
    rest = rest.replace(channel[0], ' ');
  }
  // The content type: `<|constrain|>json` as the model writes it, or a bare `json` as templates do.
  const type = /(?:<\|constrain\|>)?\s*([^\s<]+)/.exec(rest.trim());
  if (type) out.contentType = type[1]!;
  return out;
}

/** Splits a completion into harmony messages; a message cut off at the end keeps what it has. */
export function parseHarmonyMessages(text: string): HarmonyMessage[] {
  const messages: HarmonyMessage[] = [];
  let at = 0;
  let role = 'assistant';
  while (at < text.length) {
    if (text.startsWith(HARMONY_START, at)) at += HARMONY_START.length;
    const bodyAt = text.indexOf(HARMONY_MESSAGE, at);
    if (bodyAt === -1) break;
    const header = parseHeader(text.slice(at, bodyAt), role);
    const start = bodyAt + HARMONY_MESSAGE.length;
    let end = text.length;
    let next = text.length;
    for (const marker of HARMONY_ENDS) {
      const i = text.indexOf(marker, start);
      if (i !== -1 && i < end) {
        end = i;
        next = i + marker.length;
      }
    }
    messages.push({ ...header, text: text.slice(start, end) });
    role = 'assistant';
    at = next;
  }
  return messages;
}

/** Arguments as vLLM's `openai` parser returns them: JSON re-dumped when it is JSON, else as written. */
function callArguments(message: HarmonyMessage): string {
  if (message.contentType && !message.contentType.includes('json')) return message.text;
  try {
    return pythonJsonDumps(JSON.parse(message.text), { ensureAscii: true });
  } catch {
    return message.text;
  }
}

/**
 * A gpt-oss completion as vLLM's `openai` tool parser (and its harmony reasoning parser) read it:
 * messages to `functions.NAME` are tool calls, the last `final` message is the content, `analysis`
 * is the reasoning. Commentary without a recipient (a preamble) is neither, as in vLLM. Never throws.
 */
export function parseHarmonyCompletion(text: string, options: ParseToolCallsOptions): ParsedCompletion {
  const toolCalls: ToolCall[] = [];
  let content: string | null = null;
  const reasoning: string[] = [];
  for (const m of parseHarmonyMessages(text)) {
    if (m.recipient?.startsWith('functions.')) {
      const name = m.recipient.slice('functions.'.length);
      toolCalls.push({
        id: options.newToolCallId(),
        type: 'function',
        function: { name, arguments: callArguments(m) },
      });
    } else if (m.channel === 'final') content = m.text;
    else if (m.channel === 'analysis') reasoning.push(m.text);
  }
  return reasoning.length > 0
    ? { content, reasoning: reasoning.join('\n'), toolCalls }
    : { content, toolCalls };
}
