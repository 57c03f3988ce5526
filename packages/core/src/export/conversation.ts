import type { JsonObject, Step } from '../domain/index.js';

/*
 * A trajectory as one OpenAI-style conversation: the last step's request (the conversation as the
 * agent sent it) plus the last step's answer as an assistant message, with tool outputs the
 * messages do not hold yet (tool results of steps, e.g. the observation after the final action, or
 * a white-box agent's steps whose messages leave them out) placed after the assistant turn that
 * made the call.
 */

export type Message = JsonObject;

export interface Conversation {
  messages: Message[];
  tools: JsonObject[];
  /** Tool results that were placed into the messages from the steps. */
  addedToolResults: number;
  /** Tool results with no call to answer in the messages (no id, or the call is not there). */
  unplacedToolResults: number;
}

/** Why a trajectory yields no conversation; exports count these in their manifest. */
export type ConversationSkip = 'no_steps' | 'no_messages' | 'no_answer';

export interface OpenAiToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * A step's tool calls in the OpenAI shape: arguments as a JSON string, an id for every call (steps
 * from white-box agents may lack one: `call_<step>_<n>`). Calls without a function name are dropped.
 */
export function stepToolCalls(step: Pick<Step, 'index' | 'toolCalls'>): OpenAiToolCall[] {
  const calls: OpenAiToolCall[] = [];
  (step.toolCalls ?? []).forEach((raw, i) => {
    const fn = isObject(raw.function) ? raw.function : null;
    if (!fn || typeof fn.name !== 'string' || fn.name === '') return;
    const args = typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {});
    const id = typeof raw.id === 'string' && raw.id !== '' ? raw.id : `call_${step.index}_${i}`;
    calls.push({ id, type: 'function', function: { name: fn.name, arguments: args } });
  });
  return calls;
}

/** The assistant message of a step's answer; null when it said nothing and called nothing. */
export function assistantMessage(step: Step): Message | null {
  const calls = stepToolCalls(step);
  const text = step.responseText ?? '';
  if (text === '' && calls.length === 0) return null;
  const message: Message = { role: 'assistant', content: text === '' ? null : text };
  if (calls.length > 0) message.tool_calls = calls as unknown as JsonObject[];
  return message;
}

function callIdsOf(message: Message): string[] {
  if (message.role !== 'assistant' || !Array.isArray(message.tool_calls)) return [];
  return message.tool_calls.flatMap((c) => (isObject(c) && typeof c.id === 'string' ? [c.id] : []));
}

/** Builds the conversation of a trajectory from its steps (in index order). */
export function buildConversation(steps: readonly Step[]): Conversation | ConversationSkip {
  const last = steps.at(-1);
  if (!last) return 'no_steps';
  if (!last.messages || last.messages.length === 0) return 'no_messages';
  const answer = assistantMessage(last);
  if (!answer) return 'no_answer';
  const messages: Message[] = [...last.messages, answer];

  const answered = new Set<string>();
  for (const m of messages) {
    if (m.role === 'tool' && typeof m.tool_call_id === 'string') answered.add(m.tool_call_id);
  }
  let added = 0;
  let unplaced = 0;
  for (const step of steps) {
    const calls = stepToolCalls(step);
    (step.toolResults ?? []).forEach((result, i) => {
      const id = result.tool_call_id ?? calls[i]?.id;
      if (id === undefined) {
        unplaced++;
        return;
      }
      if (answered.has(id)) return;
      let at = -1;
      for (let m = messages.length - 1; m >= 0 && at < 0; m--) {
        if (callIdsOf(messages[m]!).includes(id)) at = m;
      }
      if (at < 0) {
        unplaced++;
        return;
      }
      // After the calling turn and the tool outputs already answering it, in call order.
      let insert = at + 1;
      while (messages[insert]?.role === 'tool') insert++;
      messages.splice(insert, 0, { role: 'tool', tool_call_id: id, content: result.content });
      answered.add(id);
      added++;
    });
  }
  return { messages, tools: last.tools ?? [], addedToolResults: added, unplacedToolResults: unplaced };
}

/** Index of the first assistant message (what precedes it is the prompt). */
export function firstAssistantIndex(messages: readonly Message[]): number {
  return messages.findIndex((m) => m.role === 'assistant');
}
