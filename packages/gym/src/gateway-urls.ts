/*
 * Where the gym finds things on the gateway. A trajectory's base_url (`<gateway>/<trajectory>/<group>/v1`)
 * is the agent's; what the episode's owner does (complete, score, merge metadata, post refusals) goes
 * to the top-level routes by id, which take the runner scope (docs/security.md), through server-client.ts.
 */

/** The trajectory id in a base_url's path (`/<trajectory>/<group>/v1`); '' when it has none. */
export function trajectoryOfBaseUrl(baseUrl: string): string {
  return new URL(baseUrl).pathname.split('/').filter(Boolean).at(-3) ?? '';
}

/** A base_url's path, `/<trajectory>/<group>/v1`, without a trailing slash. */
export function basePathOf(baseUrl: string): string {
  return new URL(baseUrl).pathname.replace(/\/+$/, '');
}
