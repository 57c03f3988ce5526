import type { Context } from 'hono';
import { ValidationError } from '../domain/index.js';

/**
 * Reads a request's JSON body without trusting it: malformed JSON is a 400 naming `body`. An empty
 * body reads as `{}` when `allowEmpty` (routes whose fields are all optional).
 */
export async function readJsonBody(c: Context, allowEmpty = true): Promise<unknown> {
  return (await readJsonText(c, allowEmpty)).value;
}

/** readJsonBody that also returns the text the value was parsed from. */
export async function readJsonText(c: Context, allowEmpty = true): Promise<{ text: string; value: unknown }> {
  return parseJsonText(await c.req.text(), allowEmpty);
}

/** Parses a request body's text as readJsonBody does. */
export function parseJsonText(text: string, allowEmpty = true): { text: string; value: unknown } {
  if (allowEmpty && text.trim() === '') return { text, value: {} };
  try {
    return { text, value: JSON.parse(text) };
  } catch (error) {
    throw new ValidationError(`body: malformed JSON (${(error as Error).message})`, 'body');
  }
}
