import type { Context } from 'hono';
import { ValidationError } from '../domain/index.js';

/**
 * Reads a request's JSON body without trusting it: malformed JSON is a 400 naming `body`. An empty
 * body reads as `{}` when `allowEmpty` (routes whose fields are all optional).
 */
export async function readJsonBody(c: Context, allowEmpty = true): Promise<unknown> {
  const text = await c.req.text();
  if (allowEmpty && text.trim() === '') return {};
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new ValidationError(`body: malformed JSON (${(error as Error).message})`, 'body');
  }
}
