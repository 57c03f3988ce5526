import type { Context, Hono } from 'hono';
import { tryDecodeURIComponent } from 'hono/utils/url';
import { StepwiseError } from '../domain/index.js';
import { type ApiKey, type AuthVariables, checkScope, isDashboardPath, type Scope } from '../http/auth.js';
import { type Answer, isStreamSource, JSON_HEADERS } from './answer.js';
import { epochNow } from './call-trace.js';
import { fixedCall, generateCall, type HeaderOf, type LlmCall, modelsCall, trajectoryCall } from './calls.js';
import type { Gateway } from './gateway.js';
import { anthropicErrorAnswer } from './messages-answer.js';
import { errorAnswer } from './openai-errors.js';

/*
 * The LLM calls' routes, declared once: the table below is what the fast listener (direct.ts) matches
 * on node:http and what the Hono app registers (mountLlmRoutes), each taking a route to the same
 * answer (answerOf). The listener serves them on a socket ahead of the app, without a fetch Request
 * and Response around each call (docs/gateway.md#one-http-stack); the app serves them where no
 * socket is (`app.request()`), with the same routing, key check and answers.
 */

/** A `/v1/<tail>` call, served at the fixed base_url and under `/<trajectory>/<group>`. */
interface V1Route {
  method: 'POST' | 'GET';
  tail: string;
  kind: 'call' | 'models';
  call?: LlmCall;
}

export const V1_ROUTES: readonly V1Route[] = [
  { method: 'POST', tail: 'chat/completions', kind: 'call', call: 'chat' },
  { method: 'POST', tail: 'completions', kind: 'call', call: 'text' },
  { method: 'POST', tail: 'responses', kind: 'call', call: 'responses' },
  { method: 'POST', tail: 'messages', kind: 'call', call: 'messages' },
  // GET routes answer HEAD too, as Hono's do.
  { method: 'GET', tail: 'models', kind: 'models' },
];
/** SGLang's native call, at the server's root only. */
export const GENERATE_PATH = '/generate';

export type Route =
  | { kind: 'call'; call: LlmCall; trajectory: string | undefined; group: string | undefined }
  | { kind: 'generate' }
  | { kind: 'models'; trajectory: string | undefined; group: string | undefined };

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
/** `/<trajectory>/<group>/v1/<tail>` or `/v1/<tail>`, the query cut off: the table as one pattern. */
const V1_PATH = new RegExp(
  `^\\/(?:([^/]+)\\/([^/]+)\\/)?v1\\/(${V1_ROUTES.map((r) => escapeRegExp(r.tail)).join('|')})$`,
);
const BY_TAIL = new Map(V1_ROUTES.map((r) => [r.tail, r]));

/** The LLM call a request is, or null when it is another route's. `path` is routedPath's form. */
export function routeOf(method: string, path: string, encoded: boolean): Route | null {
  if (method === 'POST' && path === GENERATE_PATH) return { kind: 'generate' };
  const match = V1_PATH.exec(path);
  // The dashboard's paths are the app's (its login redirect, its admin scope), whatever follows.
  if (match === null || isDashboardPath(path)) return null;
  const [, trajectory, group, tail] = match;
  const route = BY_TAIL.get(tail!)!;
  if (method !== route.method && !(route.method === 'GET' && method === 'HEAD')) return null;
  // A percent-encoded path is decoded as Hono decodes it; ids never need encoding, so this is rare.
  const id = (segment: string | undefined) =>
    encoded && segment !== undefined ? tryDecodeURIComponent(segment) : segment;
  if (route.kind === 'models') return { kind: 'models', trajectory: id(trajectory), group: id(group) };
  return { kind: 'call', call: route.call!, trajectory: id(trajectory), group: id(group) };
}

/** What answerOf reads of a request, whichever stack carried it. */
export interface CallInput {
  header: HeaderOf;
  /** The body as text (UTF-8, a leading BOM dropped, as a fetch Request's `text()` reads it). */
  text(): string | Promise<string>;
  /** The body's bytes: a big `/generate` body moves to the offload thread in them, unread here. */
  bytes(): Buffer | undefined | Promise<Buffer | undefined>;
  /** The caller's key; null with keys off. */
  caller: ApiKey | null;
  /** Aborted when the agent goes away. */
  signal: AbortSignal;
}

const AGENT: readonly Scope[] = ['agent'];

/** Whether a route answers in Anthropic's error shape (its SDKs read no other). */
export const anthropicShaped = (route: Route) => route.kind === 'call' && route.call === 'messages';

/**
 * The caller's scope checked, as the app checks any route's: null when it may call, else its
 * refusal in the app's error shape (Anthropic's for a Messages API call).
 */
export function scopeRefusal(route: Route, caller: ApiKey | null): Answer | null {
  try {
    checkScope(caller, AGENT);
    return null;
  } catch (error) {
    return refusalAnswer(route, error);
  }
}

/** The answer to an LLM call, its errors in the shape of the call's API. */
export async function answerOf(gateway: Gateway, route: Route, input: CallInput): Promise<Answer> {
  try {
    return await callAnswer(gateway, route, input);
  } catch (error) {
    if (input.signal.aborted) throw error;
    return anthropicShaped(route) ? anthropicErrorAnswer(error) : errorAnswer(error);
  }
}

async function callAnswer(gateway: Gateway, route: Route, input: CallInput): Promise<Answer> {
  if (route.kind === 'models') {
    const { trajectory, group } = route;
    return modelsCall(gateway, trajectory === undefined ? null : { trajectory, group: group! });
  }
  const origin = { receivedAt: epochNow(), traceparent: input.header('traceparent') ?? null };
  if (route.kind === 'generate') return generateCall(gateway, await input.bytes(), input.signal);
  const text = await input.text();
  if (route.trajectory === undefined) {
    const request = { header: input.header, caller: input.caller };
    return fixedCall(gateway, route.call, request, text, input.signal, origin);
  }
  const ids = { trajectory: route.trajectory, group: route.group };
  return trajectoryCall(gateway, route.call, ids, text, input.signal, origin);
}

/**
 * The table's routes on the Hono app, for requests that reach it without the listener (the app
 * alone, `app.request()`): the same routing and answers. The app's own middleware has identified
 * the caller (http/auth.ts's identifyCaller, which the listener calls too).
 */
export function mountLlmRoutes(app: Hono<{ Variables: AuthVariables }>, gateway: Gateway): void {
  const handler = async (c: Context<{ Variables: AuthVariables }>) => {
    const path = c.req.path;
    const route = routeOf(c.req.method, path, false);
    if (route === null) return c.notFound();
    const refused = scopeRefusal(route, c.get('apiKey'));
    if (refused !== null) return responseOf(refused);
    const answer = await answerOf(gateway, withIds(route, c), {
      header: (name) => c.req.header(name),
      text: () => c.req.text(),
      bytes: async () => Buffer.from(await c.req.arrayBuffer()),
      caller: c.get('apiKey'),
      signal: c.req.raw.signal,
    });
    return responseOf(answer);
  };
  app.post(GENERATE_PATH, handler);
  for (const { method, tail } of V1_ROUTES) {
    app.on(method, `/v1/${tail}`, handler);
    app.on(method, `/:trajectory/:group/v1/${tail}`, handler);
  }
}

/** The route with its ids as Hono decoded them. */
function withIds(route: Route, c: Context): Route {
  if (route.kind === 'generate' || route.trajectory === undefined) return route;
  return { ...route, trajectory: c.req.param('trajectory'), group: c.req.param('group') };
}

/** An answer as a fetch Response; a streamed one pulled as its reader reads. */
export function responseOf(answer: Answer): Response {
  const { status, headers, body } = answer;
  if (!isStreamSource(body))
    return new Response(body as string | Uint8Array<ArrayBuffer> | null, { status, headers });
  const utf8 = new TextEncoder();
  const stream = new ReadableStream<Uint8Array>({
    pull: (controller) =>
      body.pull({
        enqueue: (text) => controller.enqueue(utf8.encode(text)),
        close: () => controller.close(),
        error: (error) => controller.error(error),
      }),
    cancel: () => body.cancel(),
  });
  return new Response(stream, { status, headers });
}

/** A refusal before the call is read, in the app's error shape (Anthropic's for a Messages call). */
export function refusalAnswer(route: Route, error: unknown): Answer {
  if (anthropicShaped(route)) return anthropicErrorAnswer(error);
  if (!(error instanceof StepwiseError)) return errorAnswer(error);
  return { status: error.status, headers: JSON_HEADERS, body: JSON.stringify(error.toJSON()) };
}
