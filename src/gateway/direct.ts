import type { IncomingMessage, ServerResponse } from 'node:http';
import { parse as parseCookies } from 'hono/utils/cookie';
import { AuthError } from '../domain/index.js';
import {
  type ApiKey,
  callerKey,
  checkScope,
  isDashboardPath,
  KEY_COOKIE,
  requestKey,
  type Scope,
} from '../http/auth.js';
import type { DirectListener } from '../util/http-server.js';
import { type Answer, isStreamSource, JSON_HEADERS, type StreamSource } from './answer.js';
import { fixedCall, trajectoryCall } from './calls.js';
import type { CallKind, Gateway } from './gateway.js';
import { errorAnswer } from './openai-errors.js';

/*
 * The LLM calls (`POST .../v1/chat/completions` and `.../v1/completions` under a trajectory's
 * base_url or at the fixed one: nearly every request an agent makes) served straight from
 * node:http, by the same handlers as their Hono routes (calls.ts), without a fetch Request and
 * Response built around each call: the gateway's answer is written to the socket as it comes.
 * Every other request, and these paths in any other form, goes on to the Hono app.
 */

/** `/<trajectory>/<group>/v1/<call>` or `/v1/<call>`, with or without a query. */
const CALL_PATH = /^\/(?:([^/?]+)\/([^/?]+)\/)?v1\/(chat\/completions|completions)(?:\?|$)/;
const AGENT: readonly Scope[] = ['agent'];

export function llmCallListener(gateway: Gateway, keys: readonly ApiKey[]): DirectListener {
  return (req, res) => {
    if (req.method !== 'POST' || req.url === undefined) return false;
    const path = CALL_PATH.exec(req.url);
    if (path === null) return false;
    const kind: CallKind = path[3] === 'completions' ? 'text' : 'chat';
    // Percent-encoded ids are for the Hono route (it decodes them); ids never need encoding. The
    // dashboard's paths are the app's (its login redirect), whatever follows.
    if (path[1]?.includes('%') || path[2]?.includes('%') || isDashboardPath(req.url)) return false;
    void serve(gateway, keys, kind, path[1], path[2], req, res);
    return true;
  };
}

async function serve(
  gateway: Gateway,
  keys: readonly ApiKey[],
  kind: CallKind,
  trajectory: string | undefined,
  group: string | undefined,
  req: IncomingMessage & { rawBody?: Buffer },
  res: ServerResponse,
): Promise<void> {
  // The agent hanging up before its answer ends stops the generation (see Gateway.call).
  const gone = new AbortController();
  res.once('close', () => {
    if (!res.writableFinished) gone.abort(new Error('the agent went away'));
  });
  let answer: Answer;
  try {
    if (keys.length > 0) {
      const { authorization, cookie } = req.headers;
      const presented = requestKey(authorization, header(req, 'x-api-key'), () =>
        cookie === undefined ? undefined : parseCookies(cookie, KEY_COOKIE)[KEY_COOKIE],
      );
      checkScope(callerKey(keys, presented), AGENT);
    }
    const text = bodyText(req.rawBody);
    answer =
      trajectory === undefined
        ? await fixedCall(gateway, kind, (name) => header(req, name), text, gone.signal)
        : await trajectoryCall(gateway, kind, { trajectory, group }, text, gone.signal);
  } catch (error) {
    if (gone.signal.aborted) return;
    // A missing or refused key is answered as on every route (the app's error shape).
    answer =
      error instanceof AuthError
        ? { status: error.status, headers: JSON_HEADERS, body: JSON.stringify(error.toJSON()) }
        : errorAnswer(error);
  }
  write(answer, res);
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

/** The body as text, as a fetch Request's `text()` reads it (UTF-8, a leading BOM dropped). */
function bodyText(raw: Buffer | undefined): string {
  if (raw === undefined || raw.length === 0) return '';
  const text = raw.toString('utf8');
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

function write(answer: Answer, res: ServerResponse): void {
  const { status, headers, body } = answer;
  if (isStreamSource(body)) {
    if (res.destroyed) return void body.cancel().catch(() => {});
    res.writeHead(status, headers);
    void stream(body, res);
    return;
  }
  if (res.destroyed) return;
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
