/** A JSON answer as tests read it: field by field. */
// biome-ignore lint/suspicious/noExplicitAny: answers are checked field by field
export type Json = any;

/**
 * One request with a JSON body (a string is sent as it is) and an optional bearer key; the answer's
 * status and parsed JSON (null when it has no body).
 */
export async function callJson(
  method: string,
  url: string,
  body?: unknown,
  key?: string,
): Promise<{ status: number; json: Json }> {
  const res = await fetch(url, {
    method,
    headers: {
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
      ...(key ? { authorization: `Bearer ${key}` } : {}),
    },
    body: body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, json: text ? JSON.parse(text) : null };
}

/** What `POST /init_trajectory` answers, as tests read it. */
export interface OpenedTrajectory {
  trajectory_uid: string;
  base_url: string;
}

/** A new trajectory on a keyless server: its id and base_url. */
export async function openTrajectory(serverUrl: string): Promise<OpenedTrajectory> {
  const { status, json } = await callJson('POST', `${serverUrl}/init_trajectory`, {});
  if (status !== 200) throw new Error(`init_trajectory answered ${status}: ${JSON.stringify(json)}`);
  return json as OpenedTrajectory;
}
