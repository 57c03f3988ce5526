/*
 * JSON helpers the tool parsers share: find where a JSON object written by a model ends (Python's
 * `raw_decode`, which vLLM's parsers use), and write JSON the way Python's json.dumps does.
 */

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * The end (exclusive) of the balanced `{...}` or `[...]` that starts at `start`, skipping brackets
 * inside strings; -1 when the text ends first. Whether the slice is valid JSON is JSON.parse's call.
 */
export function balancedJsonEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let i = start; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
      continue;
    }
    if (c === '"') inString = true;
    else if (c === '{' || c === '[') depth++;
    else if (c === '}' || c === ']') {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

/** The object at `start` and where it ends; undefined when the text there is not a JSON object. */
export function decodeJsonObjectAt(
  text: string,
  start: number,
): { value: Record<string, unknown>; end: number } | undefined {
  const end = balancedJsonEnd(text, start);
  if (end === -1) return undefined;
  try {
    const value: unknown = JSON.parse(text.slice(start, end));
    return isPlainObject(value) ? { value, end } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Python's `json.dumps(value, ensure_ascii=...)` with its default separators (", " and ": "), key order
 * kept: the arguments string vLLM's parsers return. Numbers print as JavaScript prints them.
 */
export function pythonJsonDumps(value: unknown, options: { ensureAscii: boolean }): string {
  const text = dumps(value);
  if (!options.ensureAscii) return text;
  // Escaping after the fact is safe: non-ASCII only ever appears inside string literals.
  return text.replace(/[\u0080-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function dumps(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(dumps).join(', ')}]`;
  if (isPlainObject(value)) {
    const entries = Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${dumps(v)}`);
    return `{${entries.join(', ')}}`;
  }
  return value === undefined ? 'null' : JSON.stringify(value);
}
