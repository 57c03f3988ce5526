/*
 * ActGuide-RL's action hint: the first k actions of a known solution, one numbered line each, placed
 * in the task's user message. The line format follows the paper's code (`{i}. {name}: {json args}`,
 * args as Python's `json.dumps` writes them with `ensure_ascii=False`), so a model trained on hints
 * rendered there reads ours the same way.
 */

/** One action of a plan: a tool call by name with its arguments. */
export interface PlanAction {
  name: string;
  arguments: unknown;
}

/** What a hint with no actions says (the paper's `build_hint_from_actions` with k = 0). */
export const EMPTY_HINT = 'None';

/**
 * JSON as Python's `json.dumps(value, ensure_ascii=False)` writes it: `", "` between items, `": "`
 * after keys, non-ASCII characters as themselves. Strings are escaped as `JSON.stringify` does, which
 * matches Python for `"`, `\\` and control characters (lone surrogates aside: JavaScript escapes
 * them, Python would write them raw). Numbers are written as JavaScript prints them (a parsed `1.0`
 * is `1`); `undefined` values and functions inside objects are left out, as in JSON.
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
  return shown.map((a, i) => `${i + 1}. ${a.name}: ${pythonJson(a.arguments)}`).join('\n');
}

/**
 * The heading of the hint section in the user message. Our wording: it says what the lines are (the
 * start of a known solution), that they may stop short, and that the rest is the agent's job.
 */
export const HINT_HEADING =
  'Reference plan: the first actions of a known solution. It may stop before the task is done; follow it, then finish the remaining work yourself.';

/** The text appended to the task prompt: a blank line, the heading, then the hint's lines. */
export function hintSection(hint: string): string {
  return `\n\n${HINT_HEADING}\n${hint}`;
}

/** The task prompt with the hint section after it: the user message of a guided rollout. */
export function guidedPrompt(prompt: string, hint: string): string {
  return `${prompt}${hintSection(hint)}`;
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
