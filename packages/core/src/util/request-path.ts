import { getPath } from 'hono/utils/url';

/*
 * One path rule (docs/security.md, "One path rule"): a request target is normalised once, as it arrives,
 * and every guard, the direct LLM route and the app then read that one form. Before this, the guard
 * read the raw target (`/dashboard/%2e%2e/v1/labels`, a dashboard path) while the URL parser resolved
 * `%2e%2e` and the app ran `/v1/labels`.
 */

/** A request target the URL parser leaves as it is (@hono/node-server's test of the same). */
const PLAIN_TARGET = /^\/[!#$&-;=?-[\]_a-z~]*$/;
const DOT_SEGMENT = /\/\.\.?(?:[/?#]|$)/;

/**
 * The path and query the app sees for a request target: dot segments (`..`, `%2e%2e`, `.%2E`)
 * resolved and odd characters encoded as the WHATWG URL parser does, an absolute-form target reduced
 * to its path. Idempotent. Null for a target the app could not parse (a 400).
 */
export function normalTarget(url: string): string | null {
  if (PLAIN_TARGET.test(url) && !DOT_SEGMENT.test(url)) return url;
  if (url[0] !== '/' && !url.startsWith('http://') && !url.startsWith('https://')) return null;
  const query = url.indexOf('?');
  // The parser reads `\` as `/` in a path: one more way to spell a dot segment, refused.
  if (url.lastIndexOf('\\', query === -1 ? undefined : query) !== -1) return null;
  try {
    const parsed = new URL(url, 'http://host');
    return parsed.pathname + parsed.search;
  } catch {
    return null;
  }
}

/** The path a normalised target routes as: the query cut off, percent-decoded as the app decodes it. */
export function routedPath(target: string): string {
  const end = target.search(/[?#]/);
  const path = end === -1 ? target : target.slice(0, end);
  return path.includes('%') ? getPath({ url: `http://host${path}` } as Request) : path;
}
