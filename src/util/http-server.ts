import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { StepwiseError } from '../domain/errors.js';

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
  /** Runs first on every request: a refusal is answered at once, the body unread (http/request-guard.ts). */
  guard?: (req: IncomingMessage) => { status: number; code: string; message: string } | null;
}

export const DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024;

/**
 * Agents pause between LLM calls while their tools run, often longer than node's default 5 s: a
 * server that closes the idle connection just as the agent reuses it makes that call fail before it
 * arrives (the agent sees a reset; nothing is recorded). Clients close idle connections well before
 * this (undici after 4 s), so the close comes from the side that knows the connection is unused.
 */
export const KEEP_ALIVE_MS = 65_000;

type Listener = (req: IncomingMessage, res: ServerResponse) => void;

function tooLarge(res: ServerResponse, maxBodyBytes: number): void {
  const error = new StepwiseError(
    `body: larger than ${maxBodyBytes} bytes`,
    413,
    'payload_too_large',
    'body',
  );
  // The rest of the body is not read: the connection cannot carry another request.
  res.writeHead(413, { 'content-type': 'application/json', connection: 'close' });
  res.end(JSON.stringify(error.toJSON()));
}

/**
 * Reads each request body whole, up to the limit, before the handler runs: the handler gets it as
 * `rawBody` (which the Hono adapter reads without a stream), and no handler sees an oversized body.
 * A declared length over the limit is refused before a byte is read; a chunked body when it crosses
 * the limit.
 */
function readBodiesFirst(maxBodyBytes: number, handle: Listener): Listener {
  return (req, res) => {
    if (req.method === 'GET' || req.method === 'HEAD') return handle(req, res);
    const declared = req.headers['content-length'];
    if (declared !== undefined && Number(declared) > maxBodyBytes) {
      req.resume();
      return tooLarge(res, maxBodyBytes);
    }
    const chunks: Buffer[] = [];
    let size = 0;
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size <= maxBodyBytes) return void chunks.push(chunk);
      req.off('data', onData);
      req.off('end', onEnd);
      chunks.length = 0;
      req.resume();
      tooLarge(res, maxBodyBytes);
    };
    const onEnd = () => {
      (req as IncomingMessage & { rawBody: Buffer }).rawBody =
        chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size);
      handle(req, res);
    };
    req.on('data', onData);
    req.on('end', onEnd);
    // A client that goes away mid-body gets no answer; the socket is already gone.
    req.on('error', () => {});
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
  const read = readBodiesFirst(options.maxBodyBytes ?? DEFAULT_MAX_BODY_BYTES, handle);
  const { guard } = options;
  const server: Server = createServer(
    guard
      ? (req, res) => {
          const refused = guard(req);
          if (refused === null) return read(req, res);
          req.resume();
          const field = refused.status === 415 ? 'content-type' : undefined;
          const error = new StepwiseError(refused.message, refused.status, refused.code, field);
          res.writeHead(refused.status, { 'content-type': 'application/json', connection: 'close' });
          res.end(JSON.stringify(error.toJSON()));
        }
      : read,
  );
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
