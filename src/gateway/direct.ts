import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseCookies } from 'hono/utils/cookie';
import { getQueryParams, tryDecodeURIComponent } from 'hono/utils/url';
import { StepwiseError } from '../domain/index.js';
import {
  type ApiKey,
  callerKey,
  checkScope,
  isDashboardPath,
  KEY_COOKIE,
  requestKey,
  type Scope,
} from '../http/auth.js';
import { refuseNulQuery } from '../http/json-body.js';
import type { DirectListener, Refusal } from '../util/http-server.js';
import { normalTarget, routedPath } from '../util/request-path.js';
import { type Answer, isStreamSource, JSON_HEADERS, type StreamSource } from './answer.js';
import { epochNow } from './call-trace.js';
import { bodyText, fixedCall, generateCall, type LlmCall, modelsCall, trajectoryCall } from './calls.js';
import type { Gateway } from './gateway.js';
import { anthropicErrorAnswer } from './messages-answer.js';
import { errorAnswer } from './openai-errors.js';

/*
 * The one HTTP path of the LLM calls: `POST .../v1/chat/completions`, `.../v1/completions`,
 * `.../v1/responses` and `.../v1/messages` (Anthropic's) under a trajectory's base_url or at the fixed one, `POST /generate`,
 * and `GET .../v1/models`. They are served straight from node:http, ahead of the Hono app and without
 * a fetch Request and Response built around each call: the gateway's answer is written to the socket
 * as it comes. Paths are read as the app reads them (percent-decoding included); every other request
 * goes on to the app.
 */

/** `/<trajectory>/<group>/v1/<call>` or `/v1/<call>`, the query cut off. */
const CALL_PATH = /^\/(?:([^/]+)\/([^/]+)\/)?v1\/(chat\/completions|completions|responses|messages|models)$/;
const AGENT: readonly Scope[] = ['agent'];

type Route =
  | { kind: 'call'; call: LlmCall; trajectory: string | undefined; group: string | undefined }
  | { kind: 'generate' }
  | { kind: 'models'; trajectory: string | undefined; group: string | undefined };

/** The LLM call a request is, or null when it is the app's. */
function routeOf(method: string, url: string): Route | null {
  // A percent-encoded path is decoded as Hono decodes it; ids never need encoding, so this is rare.
  const encoded = url.includes('%');
  const path = routedPath(url);
  if (method === 'POST' && path === '/generate') return { kind: 'generate' };
  const match = CALL_PATH.exec(path);
  // The dashboard's paths are the app's (its login redirect, its admin scope), whatever follows.
  if (match === null || isDashboardPath(path)) return null;
  const id = (segment: string | undefined) =>
    encoded && segment !== undefined ? tryDecodeURIComponent(segment) : segment;
  const [, trajectory, group, call] = match;
  if (call === 'models') {
    if (method !== 'GET' && method !== 'HEAD') return null;
    return { kind: 'models', trajectory: id(trajectory), group: id(group) };
  }
  if (method !== 'POST') return null;
  return {
    kind: 'call',
    call: call === 'completions' ? 'text' : call === 'responses' || call === 'messages' ? call : 'chat',
    trajectory: id(trajectory),
    group: id(group),
  };
}

/**
 * A refusal the request guard answers before the body is read (a key, a rate), in the shape the
 * call's API reads: Anthropic's for a Messages API call, as admission() answers it; else as given.
 */
export function inCallShape(path: string, refusal: Refusal): Refusal {
  if (!/\/v1\/messages$/.test(path) || refusal.status === 303) return refusal;
  const answer = anthropicErrorAnswer(new StepwiseError(refusal.message, refusal.status, refusal.code));
  return typeof answer.body === 'string' ? { ...refusal, body: answer.body } : refusal;
}

export function llmCallListener(gateway: Gateway, keys: readonly ApiKey[]): DirectListener {
  return (req, res) => {
    if (req.method === undefined || req.url === undefined) return false;
    // listen() has normalised the target already (request-path.ts): this is the same form, at no cost.
    const target = normalTarget(req.url);
    const route = target === null ? null : routeOf(req.method, target);
    if (route === null) return false;
    void serve(gateway, keys, route, target!, req, res);
    return true;
  };
}

async function serve(
  gateway: Gateway,
  keys: readonly ApiKey[],
  route: Route,
  target: string,
  req: IncomingMessage & { rawBody?: Buffer },
  res: ServerResponse,
): Promise<void> {
  // The agent hanging up before its answer ends stops the generation (see Gateway.call).
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort(new Error('the agent went away'));
  });
  // Anthropic's SDKs read errors in Anthropic's shape, OpenAI's in OpenAI's.
  const anthropic = route.kind === 'call' && route.call === 'messages';
  // Refused before the call is read, in the app's error shape as the app refuses any route (a
  // Messages API call in Anthropic's).
  const admitted = admission(keys, target, req, anthropic);
  if ('refused' in admitted) return write(admitted.refused, req, res);
  let answer: Answer;
  try {
    answer = await answerOf(gateway, route, req, admitted.caller, gone.signal);
  } catch (error) {
    if (gone.signal.aborted) return;
    answer = anthropic ? anthropicErrorAnswer(error) : errorAnswer(error);
  }
  write(answer, req, res);
}

/**
 * The caller's key (401, 403) and the query (a NUL in it is a 400), checked in the app's order;
 * refused in the app's shape, or Anthropic's for a Messages API call. `caller` is null with keys off.
 */
function admission(
  keys: readonly ApiKey[],
  target: string,
  req: IncomingMessage,
  anthropic: boolean,
): { caller: ApiKey | null } | { refused: Answer } {
  try {
    const key =
      keys.length === 0
        ? null
        : callerKey(
            keys,
            requestKey(req.headers.authorization, header(req, 'x-api-key'), () => {
              const { cookie } = req.headers;
              return cookie === undefined ? undefined : parseCookies(cookie, KEY_COOKIE)[KEY_COOKIE];
            }),
          );
    const url = `http://host${target}`;
    refuseNulQuery(url, () => getQueryParams(url) as Record<string, string[]>);
    checkScope(key, AGENT);
    return { caller: key };
  } catch (error) {
    if (anthropic || !(error instanceof StepwiseError))
      return { refused: anthropic ? anthropicErrorAnswer(error) : errorAnswer(error) };
    return {
      refused: { status: error.status, headers: JSON_HEADERS, body: JSON.stringify(error.toJSON()) },
    };
  }
}

function answerOf(
  gateway: Gateway,
  route: Route,
  req: IncomingMessage & { rawBody?: Buffer },
  caller: ApiKey | null,
  signal: AbortSignal,
): Promise<Answer> {
  if (route.kind === 'models') {
    const { trajectory, group } = route;
    return modelsCall(gateway, trajectory === undefined ? null : { trajectory, group: group! });
  }
  const origin = { receivedAt: epochNow(), traceparent: header(req, 'traceparent') ?? null };
  if (route.kind === 'generate') return generateCall(gateway, req.rawBody, signal);
  const text = bodyText(req.rawBody);
  return route.trajectory === undefined
    ? fixedCall(gateway, route.call, { header: (name) => header(req, name), caller }, text, signal, origin)
    : trajectoryCall(
        gateway,
        route.call,
        { trajectory: route.trajectory, group: route.group },
        text,
        signal,
        origin,
      );
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function write(answer: Answer, req: IncomingMessage, res: ServerResponse): void {
  const { status, headers, body } = answer;
  if (isStreamSource(body)) {
    if (res.destroyed) return void body.cancel().catch(() => {});
    res.writeHead(status, headers);
    void stream(body, res);
    return;
  }
  if (res.destroyed) return;
  // A HEAD is answered as the app answers it: the GET's status and headers, no body and no length.
  if (req.method === 'HEAD') return void res.writeHead(status, headers).end();
  const length = body === null ? 0 : typeof body === 'string' ? Buffer.byteLength(body) : body.byteLength;
  res.writeHead(status, { ...headers, 'content-length': length });
  res.end(body ?? undefined);
}

/** Settles true if `work` settled within a few microtask turns, else false. */
const settlesSoon = (work: Promise<void>): Promise<boolean> =>
  Promise.race([work.then(() => true), Promise.resolve(false).then((v) => v)]);

/**
 * Pulls a streamed answer onto the socket as it comes, at the pace the agent reads it; the agent
 * going away cancels it.
 */
async function stream(source: StreamSource, res: ServerResponse): Promise<void> {
  let state: 'open' | 'closed' | 'failed' | 'cancelled' = 'open';
  const sink = {
    enqueue: (text: string) => {
      if (state === 'open' && !res.destroyed) res.write(text);
    },
    close: () => {
      if (state === 'open') state = 'closed';
    },
    error: () => {
      if (state === 'open') state = 'failed';
    },
  };
  const cancel = () => {
    if (state !== 'open') return;
    state = 'cancelled';
    void source.cancel().catch(() => {});
  };
  res.once('close', cancel);
  try {
    let pulling = source.pull(sink);
    // The agent sees the answer begin (status and headers) before the engine's first token; with
    // that token already here, both go out in one write.
    if (!(await settlesSoon(pulling))) res.flushHeaders();
    for (;;) {
      await pulling;
      if (state !== 'open') break;
      if (res.writableNeedDrain) await drained(res);
      pulling = source.pull(sink);
    }
  } catch {
    state = 'failed';
  } finally {
    res.off('close', cancel);
  }
  // (The sink's callbacks set the state: read it afresh.)
  const ended = state as typeof state | 'closed' | 'cancelled';
  if (ended === 'closed') res.end();
  // The gateway recorded why the stream broke off; the agent sees its connection cut.
  else if (ended === 'failed') res.destroy();
}

function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
