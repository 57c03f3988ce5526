/*
 * JSON Pointer (RFC 6901): `""` is the whole document, `/a/0/b` walks keys and array indexes, `~1` is
 * `/` and `~0` is `~` inside a token.
 */

import { StepwiseError } from '@stepwise/core';

export class JsonPointerError extends StepwiseError {
  override readonly name = 'JsonPointerError';
  constructor(message: string) {
    super(message, 400, 'invalid_json_pointer');
  }
}

/** The unescaped reference tokens of a pointer. */
export function parsePointer(pointer: string): string[] {
  if (pointer === '') return [];
  if (!pointer.startsWith('/'))
    throw new JsonPointerError(`${JSON.stringify(pointer)} must be empty or start with /`);
  return pointer
    .slice(1)
    .split('/')
    .map((token) => {
      if (/~[^01]|~$/.test(token)) {
        throw new JsonPointerError(`${JSON.stringify(pointer)}: "~" must be followed by 0 or 1`);
      }
      // ~1 first, then ~0: "~01" is the token "~1", not "/".
      return token.replaceAll('~1', '/').replaceAll('~0', '~');
    });
}

export type PointerLookup = { found: true; value: unknown } | { found: false; reason: string };

export function resolvePointer(document: unknown, pointer: string): PointerLookup {
  let value = document;
  let at = '';
  for (const token of parsePointer(pointer)) {
    if (Array.isArray(value)) {
      if (!/^(0|[1-9]\d*)$/.test(token) || Number(token) >= value.length) {
        return { found: false, reason: `no index ${JSON.stringify(token)} in the array at ${at || '/'}` };
      }
      value = value[Number(token)];
    } else if (typeof value === 'object' && value !== null && Object.hasOwn(value, token)) {
      value = (value as Record<string, unknown>)[token];
    } else {
      return { found: false, reason: `no key ${JSON.stringify(token)} at ${at || '/'}` };
    }
    at += `/${token.replaceAll('~', '~0').replaceAll('/', '~1')}`;
  }
  return { found: true, value };
}

/** Deep equality where numbers may differ by up to `tolerance`; objects need the same keys. */
export function jsonEquals(actual: unknown, expected: unknown, tolerance: number): boolean {
  if (typeof actual === 'number' && typeof expected === 'number') {
    return actual === expected || Math.abs(actual - expected) <= tolerance;
  }
  if (Array.isArray(expected)) {
    return (
      Array.isArray(actual) &&
      actual.length === expected.length &&
      expected.every((e, i) => jsonEquals(actual[i], e, tolerance))
    );
  }
  if (typeof expected === 'object' && expected !== null) {
    if (typeof actual !== 'object' || actual === null || Array.isArray(actual)) return false;
    const a = actual as Record<string, unknown>;
    const e = expected as Record<string, unknown>;
    const keys = Object.keys(e);
    return (
      keys.length === Object.keys(a).length &&
      keys.every((k) => Object.hasOwn(a, k) && jsonEquals(a[k], e[k], tolerance))
    );
  }
  return actual === expected;
}
