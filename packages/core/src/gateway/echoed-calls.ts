import { isObject } from './call-request.js';

/*
 * An agent sends its history back with each call, the model's own tool calls included. Some harnesses
 * echo a call with the defaults of the tool's schema filled in (Claude Code adds Edit's
 * `replace_all: false`), so the history renders to other tokens than the model generated and every
 * later prompt breaks the prefix. A call echoed that way, and only that way, is put back as the
 * engine generated it: the same call, and the same tokens.
 */

/** The generated arguments of a trajectory's calls, by call id; this many at most (oldest dropped). */
export const MAX_REMEMBERED_CALLS = 4096;

/** Remembers the arguments the engine generated for each call (the session's cache, bounded). */
export function rememberCalls(
  remembered: Map<string, string>,
  calls: readonly { id: string; function: { arguments: string } }[],
): void {
  for (const call of calls) {
    if (call.id === '') continue;
    remembered.delete(call.id);
    remembered.set(call.id, call.function.arguments);
    if (remembered.size > MAX_REMEMBERED_CALLS) remembered.delete(remembered.keys().next().value!);
  }
}

const parseObject = (text: unknown): Record<string, unknown> | null => {
  if (typeof text !== 'string') return null;
  try {
    const value: unknown = JSON.parse(text);
    return isObject(value) ? value : null;
  } catch {
    return null;
  }
};

/** The `default` of each property of the offered tool `name`, by property. */
function defaultsOf(tools: unknown, name: string): Map<string, string> {
  const out = new Map<string, string>();
  if (!Array.isArray(tools)) return out;
  for (const tool of tools) {
    const fn = isObject(tool) && isObject(tool.function) ? tool.function : null;
    if (!fn || fn.name !== name || !isObject(fn.parameters) || !isObject(fn.parameters.properties)) continue;
    for (const [key, schema] of Object.entries(fn.parameters.properties))
      if (isObject(schema) && Object.hasOwn(schema, 'default')) out.set(key, JSON.stringify(schema.default));
  }
  return out;
}

/**
 * Puts back, in the request's assistant turns, the generated arguments of each remembered call the
 * agent echoed with only schema defaults added (or its keys reordered): every generated key there
 * with its value, every other key at its tool's default. Returns whether anything changed.
 */
export function restoreEchoedCalls(
  request: Record<string, unknown>,
  remembered: ReadonlyMap<string, string>,
) {
  if (remembered.size === 0 || !Array.isArray(request.messages)) return false;
  let changed = false;
  for (const message of request.messages) {
    if (!isObject(message) || message.role !== 'assistant' || !Array.isArray(message.tool_calls)) continue;
    for (const call of message.tool_calls) {
      if (!isObject(call) || typeof call.id !== 'string' || !isObject(call.function)) continue;
      const generatedText = remembered.get(call.id);
      if (generatedText === undefined || call.function.arguments === generatedText) continue;
      const echoed = parseObject(call.function.arguments);
      const generated = parseObject(generatedText);
      if (!echoed || !generated || typeof call.function.name !== 'string') continue;
      const defaults = defaultsOf(request.tools, call.function.name);
      const same = Object.entries(echoed).every(([key, value]) =>
        Object.hasOwn(generated, key)
          ? JSON.stringify(value) === JSON.stringify(generated[key])
          : defaults.get(key) === JSON.stringify(value),
      );
      if (!same || !Object.keys(generated).every((key) => Object.hasOwn(echoed, key))) continue;
      call.function = { ...call.function, arguments: generatedText };
      changed = true;
    }
  }
  return changed;
}
