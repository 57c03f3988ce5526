import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { StepwiseError } from '../domain/errors.js';
import { normalTarget, routedPath } from './request-path.js';

export interface Listening {
  url: string;
  port: number;
  /**
   * Stops accepting, runs `drain` (which should answer whatever is waiting), closes each connection
   * as soon as it is idle, and cuts those still busy after `graceMs`. Safe to call more than once.
   */
  close(drain?: () => Promise<void>, graceMs?: number): Promise<void>;
}

/**
 * Takes a request (its body read whole into `rawBody`) before the fetch handler sees it, and
 * answers it on `res` itself; returns false to leave it to the fetch handler.
 */
export type DirectListener = (req: IncomingMessage & { rawBody?: Buffer }, res: ServerResponse) => boolean;

export interface ListenOptions {
  /** Largest request body accepted (default 64 MiB); a larger one is answered 413 unread. */
  maxBodyBytes?: number;
  /** Requests served without the fetch handler (the gateway's LLM calls: gateway/direct.ts). */
  direct?: DirectListener;
  /**
   * Runs first on every request, given its normalised path: a refusal is answered at once, the body
   * unread (http/request-guard.ts).
   */
  guard?: (req: IncomingMessage, path: string) => Refusal | null;
  /** Connections open at once (default 4,096); past it a new one is closed as it is accepted. */
  maxConnections?: number;
  /** Request bytes buffered at once over all requests (default 256 MiB); past it a 503, the body unread. */
  maxBodiesInFlightBytes?: number;
}

/** A request refused before its body is read. */
export interface Refusal {
  status: number;
  code: string;
  message: string;
  field?: string;
  headers?: Record<string, string>;
  /** The JSON answered instead of the API's error shape (a Messages API call's is Anthropic's). */
  body?: string;
}

export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;
export const DEFAULT_MAX_CONNECTIONS = 4_096;
export const DEFAULT_MAX_BODIES_IN_FLIGHT_BYTES = 256 * 1024 * 1024;

/**
 * Agents pause between LLM calls while their tools run, often longer than node's default 5 s: a
 * server that closes the idle connection just as the agent reuses it makes that call fail before it
 * arrives (the agent sees a reset; nothing is recorded). Clients close idle connections well before
 * this (undici after 4 s), so the close comes from the side that knows the connection is unused.
 */
export const KEEP_ALIVE_MS = 65_000;

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

/** Answers a refusal at once; the rest of the body is not read, so the connection cannot carry another request. */
function refuse(req: IncomingMessage, res: ServerResponse, refusal: Refusal): void {
  req.resume();
  const error = new StepwiseError(refusal.message, refusal.status, refusal.code, refusal.field);
  res.writeHead(refusal.status, {
    'content-type': 'application/json',
    connection: 'close',
    ...refusal.headers,
  });
  res.end(refusal.body ?? JSON.stringify(error.toJSON()));
}

const tooLarge = (maxBodyBytes: number): Refusal => ({
  status: 413,
  code: 'payload_too_large',
  message: `body: larger than ${maxBodyBytes} bytes`,
  field: 'body',
});

/** What a request not parsed as a target the app can route gets (one path rule: request-path.ts). */
const BAD_TARGET: Refusal = {
  status: 400,
  code: 'invalid_request',
  message: 'path: not a request target this server can read (a backslash, or no path)',
  field: 'path',
};

/**
 * The bytes of request bodies being read, over all requests: a body is admitted when its declared
 * length (or, chunked, each chunk) fits what is left, so that many clients at once cannot make the
 * server hold more than the budget.
 */
class BodyBudget {
  private used = 0;
  constructor(readonly limit: number) {}
  take(bytes: number): boolean {
    if (this.used + bytes > this.limit) return false;
    this.used += bytes;
    return true;
  }
  give(bytes: number): void {
    this.used -= bytes;
  }
}

const busy = (limit: number): Refusal => ({
  status: 503,
  code: 'busy',
  message: `the server is reading ${limit} bytes of request bodies already; retry shortly`,
  headers: { 'retry-after': '1' },
});

/**
 * Reads each request body whole, up to the limit, before the handler runs: the handler gets it as
 * `rawBody` (which the Hono adapter reads without a stream), and no handler sees an oversized body.
 * A declared length over the limit, or over what the budget has left, is refused before a byte is
 * read; a chunked body when it crosses either.
 */
function readBodiesFirst(maxBodyBytes: number, budget: BodyBudget, handle: Listener): Listener {
  return (req, res) => {
    if (req.method === 'GET' || req.method === 'HEAD') return handle(req, res);
    const declared = req.headers['content-length'];
    const length = declared === undefined ? null : Number(declared);
    if (length !== null && length > maxBodyBytes) return refuse(req, res, tooLarge(maxBodyBytes));
    let held = length ?? 0;
    if (!budget.take(held)) return refuse(req, res, busy(budget.limit));
    let released = false;
    const release = () => {
      if (!released) budget.give(held);
      released = true;
    };
    const chunks: Buffer[] = [];
    // A declared length is read into one buffer as it comes: no pile of chunks to copy at the end
    // (37 MB of them took the event loop 150 ms in one Buffer.concat).
    const whole = length !== null && length > 0 ? Buffer.allocUnsafeSlow(length) : null;
    let size = 0;
    const stop = (refusal: Refusal) => {
      req.off('data', onData);
      req.off('end', onEnd);
      chunks.length = 0;
      release();
      refuse(req, res, refusal);
    };
    const onData = (chunk: Buffer) => {
      if (whole !== null && size + chunk.length <= whole.length) {
        chunk.copy(whole, size);
        size += chunk.length;
        return;
      }
      size += chunk.length;
      if (size > maxBodyBytes) return stop(tooLarge(maxBodyBytes));
      if (size > held) {
        if (!budget.take(size - held)) return stop(busy(budget.limit));
        held = size;
      }
      chunks.push(chunk);
    };
    const onEnd = () => {
      (req as IncomingMessage & { rawBody: Buffer }).rawBody =
        whole !== null
          ? whole.subarray(0, size)
          : chunks.length === 1
            ? chunks[0]!
            : Buffer.concat(chunks, size);
      chunks.length = 0;
      // Held until the answer is written: the handler works on the body until then.
      res.once('close', release);
      handle(req, res);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    // A client that goes away mid-body gets no answer; the socket is already gone.
    req.on('error', release);
    req.once('close', () => {
      if (!req.complete) release();
    });
  };
}

/** Serves a fetch handler on host:port (0: any free port); rejects if it cannot listen. */
export async function listen(
  fetch: (request: Request) => Response | Promise<Response>,
  host: string,
  port: number,
  options: ListenOptions = {},
): Promise<Listening> {
  const viaFetch = getRequestListener(fetch, { hostname: host }) as Listener;
  const { direct } = options;
  const handle: Listener = direct ? (req, res) => void (direct(req, res) || viaFetch(req, res)) : viaFetch;
  const budget = new BodyBudget(options.maxBodiesInFlightBytes ?? DEFAULT_MAX_BODIES_IN_FLIGHT_BYTES);
  const read = readBodiesFirst(options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, budget, handle);
  const { guard } = options;
  const server: Server = createServer((req, res) => {
    // One path rule: the target is normalised once, here; the guard, the direct route and the app
    // all read this one form (http/request-path.ts).
    const target = req.url === undefined ? null : normalTarget(req.url);
    if (target === null) return refuse(req, res, BAD_TARGET);
    req.url = target;
    const refused = guard?.(req, routedPath(target)) ?? null;
    if (refused === null) return read(req, res);
    refuse(req, res, refused);
  });
  server.maxConnections = options.maxConnections ?? DEFAULT_MAX_CONNECTIONS;
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  // Node measures the time to receive a request's headers on the same connection timer.
  server.headersTimeout = Math.max(server.headersTimeout, server.keepAliveTimeout + 1_000);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const bound = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${shownHost}:${bound}`,
    port: bound,
    close(drain, graceMs = 2_000) {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await drain?.();
        // Answered connections linger as keep-alive: close each as soon as it is idle.
        const http = server as unknown as { closeIdleConnections(): void; closeAllConnections(): void };
        http.closeIdleConnections();
        const idle = setInterval(() => http.closeIdleConnections(), 25);
        const grace = setTimeout(() => http.closeAllConnections(), graceMs);
        await stopped;
        clearInterval(idle);
        clearTimeout(grace);
      })();
      return closing;
    },
  };
}
