/*
 * A small JSON path: `$` (the whole value), `.name`, `['any name']` / `["any name"]` and `[index]`,
 * chained: `$.answer.values[0]`, `$['final answer']`. A leading `$` may be left out (`answer.value`).
 * No wildcards, filters or slices: a path names one value.
 */

import { StepwiseError } from '../domain/errors.js';

export type PathSegment = string | number;

/** A path that does not parse: the fault of whoever wrote it (a config, a request). */
export class JsonPathError extends StepwiseError {
  override readonly name = 'JsonPathError';
  constructor(message: string) {
    super(message, 400, 'invalid_json_path');
  }
}

export function parseJsonPath(path: string): PathSegment[] {
  const segments: PathSegment[] = [];
  let i = 0;
  const fail = (why: string): never => {
    throw new JsonPathError(`${why} at character ${i + 1} of ${JSON.stringify(path)}`);
  };
  if (path.startsWith('$')) i = 1;
  else if (path.length > 0 && path[0] !== '.' && path[0] !== '[') {
    path = `.${path}`; // `answer.value` reads as `$.answer.value`
  }
  while (i < path.length) {
    const c = path[i];
    if (c === '.') {
      const m = /^[A-Za-z_$][\w$-]*/.exec(path.slice(i + 1));
      if (!m) fail('expected a name after "."');
      segments.push(m![0]);
      i += 1 + m![0].length;
    } else if (c === '[') {
      const rest = path.slice(i + 1);
      const index = /^(\d+)\]/.exec(rest);
      if (index) {
        segments.push(Number(index[1]));
        i += 1 + index[0].length;
        continue;
      }
      const quote = rest[0];
      if (quote !== "'" && quote !== '"') fail('expected an index or a quoted name after "["');
      const end = rest.indexOf(`${quote}]`, 1);
      if (end < 0) fail('unterminated quoted name');
      segments.push(rest.slice(1, end));
      i += 1 + end + 2;
    } else {
      fail(`unexpected ${JSON.stringify(c)}`);
    }
  }
  return segments;
}

/** The value at a path, or undefined when any segment is absent. Own properties only. */
export function readJsonPath(value: unknown, segments: readonly PathSegment[]): unknown {
  let at: unknown = value;
  for (const segment of segments) {
    if (typeof segment === 'number') {
      if (!Array.isArray(at) || segment >= at.length) return undefined;
      at = at[segment];
    } else {
      if (typeof at !== 'object' || at === null || Array.isArray(at) || !Object.hasOwn(at, segment)) {
        return undefined;
      }
      at = (at as Record<string, unknown>)[segment];
    }
  }
  return at;
}

/** Structural equality of JSON values (object key order does not matter). */
export function jsonEqual(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== 'object') return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  if (Array.isArray(a)) {
    const bb = b as unknown[];
    return a.length === bb.length && a.every((x, i) => jsonEqual(x, bb[i]));
  }
  const ka = Object.keys(a as object);
  const kb = Object.keys(b as object);
  if (ka.length !== kb.length) return false;
  return ka.every(
    (k) =>
      Object.hasOwn(b as object, k) &&
      jsonEqual((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

/** JSON.parse that answers undefined instead of throwing. */
export function safeJsonParse(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (error) {
    return { ok: false, error: (error as Error).message };
  }
}

/**
 * The JSON value in a model's text: the whole text, else the content of a ``` fence, else the span
 * from the first `{` or `[` to the last matching bracket kind. `<think>` blocks are ignored.
 */
export function extractJson(text: string): { ok: true; value: unknown } | { ok: false; error: string } {
  const t = text.replace(/<think>[\s\S]*?<\/think>/g, '').trim();
  const whole = safeJsonParse(t);
  if (whole.ok) return whole;
  const fence = /```(?:json)?\s*\n([\s\S]*?)```/i.exec(t);
  if (fence) {
    const fenced = safeJsonParse(fence[1]!.trim());
    if (fenced.ok) return fenced;
  }
  for (const [open, close] of [
    ['{', '}'],
    ['[', ']'],
  ] as const) {
    const start = t.indexOf(open);
    const end = t.lastIndexOf(close);
    if (start >= 0 && end > start) {
      const span = safeJsonParse(t.slice(start, end + 1));
      if (span.ok) return span;
    }
  }
  return { ok: false, error: 'no JSON value in the text' };
}
