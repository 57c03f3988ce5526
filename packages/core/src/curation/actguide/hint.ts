/*
 * ActGuide-RL's action hint: the first k actions of a known solution, one numbered line each, placed
 * in the task's user message. The line format follows the paper's code (`{i}. {name}: {json args}`,
 * args as Python's `json.dumps` writes them with `ensure_ascii=False`), so a model trained on hints
 * rendered there reads ours the same way.
 */

import { ValidationError } from '../../domain/errors.js';
import { pythonJsonOfText } from './python-json.js';

/**
 * One action of a plan: a tool call by name with its arguments, under `arguments` (OpenAI's name, our
 * tasks') or `args` (the paper's action data, `{"name": "search", "args": {...}}`).
 */
export type PlanAction = { name: string; argumentsJson?: string } & (
  | { arguments: unknown }
  | { args: unknown }
);

/** What a hint with no actions says (the paper's `build_hint_from_actions` with k = 0). */
export const EMPTY_HINT = 'None';

/** The action's arguments, whichever key holds them; a missing or null one is refused, naming it. */
export function actionArguments(action: PlanAction, index = 0): unknown {
  const a = action as { name?: unknown; arguments?: unknown; args?: unknown };
  if (typeof a.name !== 'string' || a.name === '')
    throw new ValidationError(`actions.${index}.name: must be a non-empty string`, `actions.${index}.name`);
  const value = a.arguments !== undefined ? a.arguments : a.args;
  // A rendered `null` would teach the model a call without arguments: refuse instead.
  if (value === undefined || value === null)
    throw new ValidationError(
      `actions.${index}: has neither "arguments" nor "args" (the action ${a.name} needs its arguments)`,
      `actions.${index}.arguments`,
    );
  return value;
}

/**
 * JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it (`", "`, `": "`, non-ASCII raw).
 * A parsed object has lost its key order and big integers: render from the text (`pythonJsonOfText`)
 * when it is at hand. Numbers, surrogates: docs/actguide.md#what-still-differs-from-the-paper
 */
export function pythonJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'number') {
    if (Number.isNaN(value)) return 'NaN';
    if (!Number.isFinite(value)) return value > 0 ? 'Infinity' : '-Infinity';
    return String(value);
  }
  if (typeof value === 'bigint') return value.toString();
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map((v) => pythonJson(v)).join(', ')}]`;
  if (typeof value === 'object') {
    const entries = Object.entries(value as Record<string, unknown>).filter(
      ([, v]) => v !== undefined && typeof v !== 'function',
    );
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`).join(', ')}}`;
  }
  return 'null';
}

/** The first `k` actions as numbered lines (`1. search: {"query": ["x"]}`); k = 0 gives `None`. */
export function renderHint(actions: readonly PlanAction[], k: number): string {
  const shown = actions.slice(0, Math.max(0, Math.floor(k)));
  if (shown.length === 0) return EMPTY_HINT;
  return shown
    .map((a, i) => {
      const args = actionArguments(a, i);
      // The source text when at hand: its key order and big integers are what the paper's Python reads.
      return `${i + 1}. ${a.name}: ${a.argumentsJson !== undefined ? pythonJsonOfText(a.argumentsJson) : pythonJson(args)}`;
    })
    .join('\n');
}

/*
 * The paper's wording, word for word (its `adaptive_guidance.py`, typo "acttions" included): a model
 * trained with ActGuide-RL's hints reads ours the same way. Two injection modes, as there:
 * `user_prompt` appends the section to the task's user message (their `append_hint_only` style: the
 * task prompt stays as it is), `assistant_prefix` opens the assistant's side with the hint.
 */
export const HINT_INSTRUCTION =
  'Follow the partial action trajectory hint to take acttions, note that the trajectory may not complete and you still need do some extra tool calls to finish the task.';
export const HINT_LABEL = 'Reference action trajectory hint:';
/** The two lines before the hint in the user message. */
export const HINT_HEADING = `${HINT_INSTRUCTION}\n${HINT_LABEL}`;

export const INJECTION_MODES = ['user_prompt', 'assistant_prefix'] as const;
export type InjectionMode = (typeof INJECTION_MODES)[number];

/** The text appended to the task prompt: a newline, the two heading lines, then the hint's lines. */
export function hintSection(hint: string): string {
  return `\n${HINT_HEADING}\n${hint}`;
}

/** The task prompt with the hint section after it: the user message of a guided rollout. */
export function guidedPrompt(prompt: string, hint: string): string {
  return `${prompt}${hintSection(hint)}`;
}

/** The assistant message that opens a guided rollout in `assistant_prefix` mode. */
export function assistantPrefix(hint: string): string {
  return `I have a partial action plan trajectory hint:\n${hint}\n\nI will solve the task by following this hint when useful.\n`;
}

/** Text of a message's content: a string, or its text parts joined as the chat template joins them. */
function contentText(content: unknown): string | null {
  if (typeof content === 'string') return content;
  if (content == null) return '';
  if (!Array.isArray(content)) return null;
  const texts = content.map((p) => (p as { text?: unknown })?.text);
  return texts.every((t) => typeof t === 'string') ? texts.join('\n') : null;
}

/**
 * The conversation for `assistant_prefix` mode, and whether the engine must continue its last message
 * (vLLM's `continue_final_message`): the prefix and the first reply are one assistant turn, as in the
 * paper's code. The hint `None` adds nothing. docs/actguide.md#where-it-goes
 */
export function withAssistantPrefix<M extends { role: string; content?: unknown }>(
  messages: readonly M[],
  hint: string,
): { messages: M[]; continueFinal: boolean } {
  if (hint === EMPTY_HINT) return { messages: [...messages], continueFinal: false };
  const user = messages.findIndex((m) => m.role === 'user');
  if (user < 0) return { messages: [...messages], continueFinal: false };
  const prefix = assistantPrefix(hint);
  const reply = messages.findIndex((m, i) => i > user && m.role === 'assistant');
  if (reply < 0)
    return { messages: [...messages, { role: 'assistant', content: prefix } as M], continueFinal: true };
  const last = reply === messages.length - 1;
  const m = messages[reply]!;
  const text = contentText(m.content);
  if (text?.startsWith(prefix)) return { messages: [...messages], continueFinal: last };
  // Text parts are flattened as the template joins them, so the prefix and the reply stay adjacent.
  if (text === null) return { messages: [...messages], continueFinal: false };
  const content = `${prefix}${text}`;
  return {
    messages: messages.map((x, i) => (i === reply ? ({ ...x, content } as M) : x)),
    continueFinal: false,
  };
}

/**
 * The text with its hint section removed (the last occurrence: a prompt that quotes the heading
 * keeps its own text); `removed` is false when the section is not there.
 */
export function stripHint(text: string, hint: string): { text: string; removed: boolean } {
  const section = hintSection(hint);
  const at = text.lastIndexOf(section);
  if (at < 0) return { text, removed: false };
  return { text: text.slice(0, at) + text.slice(at + section.length), removed: true };
}
