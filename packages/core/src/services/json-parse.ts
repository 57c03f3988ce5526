import {
  FREE_FORM_FIELDS,
  jsonBytes,
  MAX_METADATA_BYTES,
  tooBigMessage,
  ValidationError,
} from '../domain/index.js';

/*
 * Parsing a request body's JSON without trusting it: pure functions, run on the event loop for small
 * bodies and on the offload thread for big ones (http/http/json-body.ts reads the body and picks).
 */

/**
 * The deepest nesting of arrays and objects a body may have. Tool schemas in a chat request nest
 * about ten levels; much deeper is an attack on whatever walks the value recursively afterwards
 * (validation, canonical JSON, the dashboard), each of which would overflow the stack.
 */
export const MAX_JSON_DEPTH = 128;

/**
 * Parses a request body's text as readJsonBody does. `refuseNul`: a string (or key) holding U+0000
 * or a lone surrogate is a 400 naming its field. PostgreSQL can store NUL in neither text nor jsonb
 * and refuses a lone surrogate's `\uD800` escape as JSON, so the API refuses both on both stores
 * alike (docs/security.md); an LLM call's body is forwarded as the agent sent it.
 */
export function parseJsonText(
  text: string,
  allowEmpty = true,
  refuseNul = false,
): { text: string; value: unknown } {
  if (allowEmpty && text.trim() === '') return { text, value: {} };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`body: malformed JSON (${(error as Error).message})`, 'body');
  }
  checkValue(value, refuseNul);
  return { text, value };
}

/**
 * A 400 naming the field (its first path segments) under which `value` nests deeper than the limit,
 * or, with `refuseNul`, that holds U+0000 or a lone surrogate.
 */
function checkValue(value: unknown, refuseNul: boolean): void {
  interface Node {
    value: object;
    depth: number;
    parent: Node | null;
    key: string;
  }
  const nul = (v: unknown): boolean =>
    refuseNul && typeof v === 'string' && (v.includes('\u0000') || LONE_SURROGATE.test(v));
  const fieldOf = (node: Node | null, last?: string) => {
    const path: string[] = last === undefined ? [] : [last];
    for (let n: Node | null = node; n?.parent; n = n.parent) path.unshift(n.key);
    return path.slice(0, 4).join('.') || 'body';
  };
  const refuseNulAt = (field: string, text: string): never => {
    throw text.includes('\u0000') ? nulRefused(field) : surrogateRefused(field);
  };
  if (nul(value)) refuseNulAt('body', value as string);
  if (typeof value !== 'object' || value === null) return;
  // Iterative: a recursive walk would itself overflow on the values it is meant to refuse.
  const stack: Node[] = [{ value, depth: 1, parent: null, key: '' }];
  while (stack.length > 0) {
    const node = stack.pop()!;
    if (node.depth > MAX_JSON_DEPTH) {
      const field = fieldOf(node);
      throw new ValidationError(`${field}: JSON nested deeper than ${MAX_JSON_DEPTH} levels`, field);
    }
    // Token arrays hold a million numbers: index them, only containers go on the stack.
    if (Array.isArray(node.value)) {
      const items = node.value as unknown[];
      for (let i = 0; i < items.length; i++) {
        const child = items[i];
        if (nul(child)) refuseNulAt(fieldOf(node, String(i)), child as string);
        if (typeof child === 'object' && child !== null)
          stack.push({ value: child, depth: node.depth + 1, parent: node, key: String(i) });
      }
    } else {
      for (const key in node.value) {
        const child = (node.value as Record<string, unknown>)[key];
        if (nul(key) || nul(child)) refuseNulAt(fieldOf(node, key), nul(key) ? key : (child as string));
        if (typeof child === 'object' && child !== null)
          stack.push({ value: child, depth: node.depth + 1, parent: node, key });
      }
    }
  }
}

/** A UTF-16 surrogate not in a pair: no Unicode character, so no UTF-8 text can hold it. */
const LONE_SURROGATE = /\p{Cs}/u;

/** The 400 for text holding a lone surrogate (a `\uD800` escape in JSON): not Unicode text. */
function surrogateRefused(field: string): ValidationError {
  return new ValidationError(
    `${field}: text holds a lone surrogate (\\uD800-\\uDFFF without its pair), which is not Unicode and cannot be stored`,
    field,
  );
}

/** The 400 for text holding U+0000, which PostgreSQL can neither store nor compare (docs/security.md). */
export function nulRefused(field: string): ValidationError {
  return new ValidationError(`${field}: text holds U+0000 (NUL), which cannot be stored`, field);
}

/**
 * A 400 naming the first query parameter (name or value) that holds U+0000: a filter on it would
 * reach PostgreSQL as text it refuses (a 500), while SQLite would run it. Refused alike on both.
 */
export function refuseNulQuery(url: string, queries: () => Record<string, string[]>): void {
  // Only a percent-encoded NUL can be there: a raw one never gets past the HTTP parser.
  if (!url.includes('%00')) return;
  for (const [name, values] of Object.entries(queries())) {
    if (name.includes('\u0000') || values.some((v) => v.includes('\u0000'))) throw nulRefused(name);
  }
}

/** A body's value parsed and checked as readJsonBody does, free-form fields measured: for the offload thread. */
export function parseJsonBody(text: string, allowEmpty: boolean): unknown {
  const { value } = parseJsonText(text, allowEmpty, true);
  refuseBigFreeForm(value);
  return value;
}

/**
 * A 400 naming the first free-form field (`metadata`, `details`; at most four levels down, as in
 * `steps.0.metadata`) whose JSON is over MAX_METADATA_BYTES.
 */
export function refuseBigFreeForm(value: unknown, path: string[] = []): void {
  if (typeof value !== 'object' || value === null || path.length >= 4) return;
  if (Array.isArray(value)) {
    // By index: an array of a million ids allocates nothing here.
    for (let i = 0; i < value.length; i++)
      if (typeof value[i] === 'object' && value[i] !== null)
        refuseBigFreeForm(value[i], [...path, String(i)]);
    return;
  }
  for (const key in value) {
    const child = (value as Record<string, unknown>)[key];
    if (typeof child !== 'object' || child === null) continue;
    const at = [...path, key];
    if (!FREE_FORM_FIELDS.has(key)) refuseBigFreeForm(child, at);
    else {
      const bytes = jsonBytes(child);
      const field = at.join('.');
      if (bytes > MAX_METADATA_BYTES) throw new ValidationError(`${field}: ${tooBigMessage(bytes)}`, field);
    }
  }
}

/** What an LLM call may carry in bulk: its conversation, prompt and tools. */
const CALL_CONTENT_FIELDS: ReadonlySet<string> = new Set([
  'messages',
  'input',
  'prompt',
  'tools',
  'functions',
  'instructions',
  'system',
  'prompt_ids',
  'input_ids',
]);

/**
 * An LLM call's body parsed as the gateway parses it (forwarded as sent: NUL is not refused), for the
 * offload thread: a field besides the conversation (an extra parameter, `metadata`) holding objects
 * over MAX_METADATA_BYTES as JSON is a 400 naming it, before the value comes back to the event loop.
 */
export function parseCallBody(text: string): unknown {
  const { value } = parseJsonText(text, false);
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return value;
  for (const key in value) {
    const child = (value as Record<string, unknown>)[key];
    if (CALL_CONTENT_FIELDS.has(key) || typeof child !== 'object' || child === null) continue;
    const bytes = jsonBytes(child);
    if (bytes > MAX_METADATA_BYTES) throw new ValidationError(`${key}: ${tooBigMessage(bytes)}`, key);
  }
  return value;
}
