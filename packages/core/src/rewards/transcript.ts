import type { Step } from '../domain/index.js';
import { contentText } from '../text/content.js';

// What reward functions read from a trajectory's stored steps (final answer, tool results, conversation):
// docs/rewards.md#plugins

export interface ChatMessage {
  role: string;
  content: string;
  name?: string;
  tool_call_id?: string;
  tool_calls?: unknown[];
}

function lastStep(steps: readonly Step[]): Step | null {
  let last: Step | null = null;
  for (const s of steps) if (!last || s.index > last.index) last = s;
  return last;
}

/** The last step's response text; null when there are no steps or the last one carries no text. */
export function finalAnswer(steps: readonly Step[]): string | null {
  return lastStep(steps)?.responseText ?? null;
}

/** Every tool output of the trajectory, in step order. */
export function toolResultTexts(steps: readonly Step[]): string[] {
  return [...steps]
    .sort((a, b) => a.index - b.index)
    .flatMap((s) => (s.toolResults ?? []).map((r) => r.content));
}

function toMessage(raw: Record<string, unknown>): ChatMessage {
  const message: ChatMessage = {
    role: typeof raw.role === 'string' ? raw.role : 'user',
    content: contentText(raw.content),
  };
  if (typeof raw.name === 'string') message.name = raw.name;
  if (typeof raw.tool_call_id === 'string') message.tool_call_id = raw.tool_call_id;
  if (Array.isArray(raw.tool_calls) && raw.tool_calls.length > 0) message.tool_calls = raw.tool_calls;
  return message;
}

/** The whole conversation as the agent last saw it, plus its last answer; [] for token-only steps. */
export function conversation(steps: readonly Step[]): ChatMessage[] {
  const last = lastStep(steps);
  if (!last) return [];
  const messages = (last.messages ?? []).map(toMessage);
  if (last.responseText !== null || (last.toolCalls?.length ?? 0) > 0) {
    const answer: ChatMessage = { role: 'assistant', content: last.responseText ?? '' };
    if (last.toolCalls && last.toolCalls.length > 0) answer.tool_calls = last.toolCalls;
    messages.push(answer);
  }
  for (const r of last.toolResults ?? []) {
    messages.push({
      role: 'tool',
      content: r.content,
      ...(r.tool_call_id ? { tool_call_id: r.tool_call_id } : {}),
    });
  }
  return messages;
}

/** The first user message: what the agent was asked. */
export function taskPrompt(messages: readonly ChatMessage[]): string | null {
  return messages.find((m) => m.role === 'user')?.content ?? null;
}

/** Keeps the head and the tail of a long text, saying how much was left out. */
export function clip(text: string, max: number): string {
  if (text.length <= max) return text;
  const head = Math.floor(max * 0.3);
  const tail = max - head;
  return `${text.slice(0, head)}\n… (${text.length - max} characters omitted) …\n${text.slice(-tail)}`;
}

/** The conversation as plain text for a judge prompt, `max` characters at most (head and tail kept). */
export function renderTranscript(messages: readonly ChatMessage[], max: number): string {
  const text = messages
    .map((m) => {
      const calls = m.tool_calls ? `\n(tool calls: ${JSON.stringify(m.tool_calls)})` : '';
      return `[${m.role}${m.name ? ` ${m.name}` : ''}]\n${m.content}${calls}`;
    })
    .join('\n\n');
  return clip(text, max);
}
