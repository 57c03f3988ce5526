/*
 * Where the gym finds things on the gateway. A trajectory's base_url (`<gateway>/<trajectory>/<group>/v1`)
 * is the agent's; what the episode's owner does (complete, score, merge metadata, post refusals) goes
 * to the top-level routes by id, which take the runner scope (docs/security.md).
 */

/** The gateway's root URL, without a trailing slash: `apiUrl(gateway, '/v1/labels')`. */
export function apiUrl(gatewayUrl: string, path: string): string {
  return `${gatewayUrl.replace(/\/+$/, '')}${path}`;
}

/** The owner's route `route` of one trajectory: `/v1/trajectories/<id>/<route>`. */
export function ownerUrl(gatewayUrl: string, trajectoryUid: string, route: string): string {
  return apiUrl(gatewayUrl, `/v1/trajectories/${encodeURIComponent(trajectoryUid)}/${route}`);
}

/** The trajectory id in a base_url's path (`/<trajectory>/<group>/v1`); '' when it has none. */
export function trajectoryOfBaseUrl(baseUrl: string): string {
  return new URL(baseUrl).pathname.split('/').filter(Boolean).at(-3) ?? '';
}

/** A base_url's path, `/<trajectory>/<group>/v1`, without a trailing slash. */
export function basePathOf(baseUrl: string): string {
  return new URL(baseUrl).pathname.replace(/\/+$/, '');
}
