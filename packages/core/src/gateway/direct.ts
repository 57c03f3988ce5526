import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseCookies } from 'hono/utils/cookie';
import { getQueryParams } from 'hono/utils/url';
import { StepwiseError } from '../domain/index.js';
import { type ApiKey, identifyCaller, KEY_COOKIE } from '../http/auth.js';
import { refuseNulQuery } from '../http/json-body.js';
import type { DirectListener, Refusal } from '../util/http-server.js';
import { normalTarget, routedPath } from '../util/request-path.js';
import { type Answer, isStreamSource, type StreamSource } from './answer.js';
import { bodyText } from './calls.js';
import type { Gateway } from './gateway.js';
import { answerOf, type Route, refusalAnswer, routeOf, scopeRefusal } from './llm-routes.js';
import { anthropicErrorAnswer } from './messages-answer.js';

/*
 * The fast listener of the LLM calls (their routes: llm-routes.ts, the table the app registers too):
 * `POST .../v1/chat/completions`, `.../v1/completions`, `.../v1/responses` and `.../v1/messages`
 * under a trajectory's base_url or at the fixed one, `POST /generate`, and `GET .../v1/models`. They
 * are served straight from node:http, ahead of the Hono app and without a fetch Request and Response
 * built around each call: the gateway's answer is written to the socket as it comes. Paths are read
 * as the app reads them (percent-decoding included); every other request goes on to the app.
 */

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
    const route = target === null ? null : routeOf(req.method, routedPath(target), target.includes('%'));
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
  // Refused before the call is read, in the app's error shape as the app refuses any route (a
  // Messages API call in Anthropic's).
  const admitted = admission(keys, target, req, route);
  if ('refused' in admitted) return write(admitted.refused, req, res);
  let answer: Answer;
  try {
    answer = await answerOf(gateway, route, {
      header: (name) => header(req, name),
      text: () => bodyText(req.rawBody),
      bytes: () => req.rawBody,
      caller: admitted.caller,
      signal: gone.signal,
    });
  } catch {
    // Only when the agent went away: there is no one to answer.
    return;
  }
  write(answer, req, res);
}

/**
 * The caller's key (401, 403) and the query (a NUL in it is a 400), checked in the app's order
 * (http/app.ts's middleware, then the route's scope); refused in the app's shape, or Anthropic's
 * for a Messages API call. `caller` is null with keys off.
 */
function admission(
  keys: readonly ApiKey[],
  target: string,
  req: IncomingMessage,
  route: Route,
): { caller: ApiKey | null } | { refused: Answer } {
  let key: ApiKey | null;
  try {
    key = identifyCaller(keys, req.headers.authorization, header(req, 'x-api-key'), () => {
      const { cookie } = req.headers;
      return cookie === undefined ? undefined : parseCookies(cookie, KEY_COOKIE)[KEY_COOKIE];
    });
    const url = `http://host${target}`;
    refuseNulQuery(url, () => getQueryParams(url) as Record<string, string[]>);
  } catch (error) {
    return { refused: refusalAnswer(route, error) };
  }
  const refused = scopeRefusal(route, key);
  return refused === null ? { caller: key } : { refused };
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
