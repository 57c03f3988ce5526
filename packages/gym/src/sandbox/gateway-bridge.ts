import { chmod } from 'node:fs/promises';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import { KEEP_ALIVE_MS } from '@stepwise/core';
import type { BridgeScope, RunResult } from './types.js';

/** The host end of the gateway bridge: a listener whose connections reach one gateway. */
export interface Bridge {
  /** Requests refused because they were not the trajectory's LLM routes (method and path). */
  readonly refused: readonly string[];
  close(): Promise<void>;
}

export interface BridgeTarget {
  host: string;
  port: number;
  /** https targets are reached over TLS by the bridge; the agent inside speaks plain HTTP to it. */
  tls?: boolean;
}

/** The bridge's refusals, on a sandbox run's result when there were any. */
export function withRefusals(result: RunResult, bridge: Bridge | undefined): RunResult {
  return bridge && bridge.refused.length > 0 ? { ...result, gatewayRefused: [...bridge.refused] } : result;
}

/** host:port of a gateway URL (http or https), with the scheme's default port. */
export function gatewayTarget(url: string): BridgeTarget {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`sandbox gateway.url is not a URL: ${JSON.stringify(url)}`);
  }
  if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
    throw new TypeError(`sandbox gateway.url must be http(s), got ${parsed.protocol}`);
  }
  const host = parsed.hostname.replace(/^\[(.*)\]$/, '$1');
  const tls = parsed.protocol === 'https:';
  const port = parsed.port === '' ? (tls ? 443 : 80) : Number(parsed.port);
  return { host, port, ...(tls ? { tls } : {}) };
}

/** The routes an agent's LLM client uses, relative to its base_url, with their methods. */
const LLM_ROUTES: Record<string, string> = {
  '/chat/completions': 'POST',
  '/completions': 'POST',
  // The Responses API (Codex CLI): a stateless call with `store: false`; a stored response is this
  // trajectory's own (an id from another is a 404, docs/gateway.md).
  '/responses': 'POST',
  // Anthropic's Messages API (Claude Code), `?beta=true` and all.
  '/messages': 'POST',
  '/models': 'GET',
};

/** Whether `method path` is one of the trajectory's LLM routes (the path exactly, query aside). */
export function allowedByScope(scope: BridgeScope, method: string, rawPath: string): boolean {
  const path = rawPath.split('?')[0]!;
  const base = scope.basePath.replace(/\/+$/, '');
  if (!path.startsWith(`${base}/`)) return false;
  const route = path.slice(base.length);
  return LLM_ROUTES[route] === method;
}

/**
 * Forwards `listen` (a unix socket, or a 127.0.0.1 port) to `target`: with a `scope` only the trajectory's
 * LLM routes (else 403), without one piped as is (a trusted command). A unix socket is connectable by
 * anyone who reaches it: it lives in a private directory, seen only by the sandbox it is mounted into.
 */
export async function startBridge(
  listen: string | number,
  target: BridgeTarget,
  scope?: BridgeScope,
): Promise<Bridge> {
  const sockets = new Set<net.Socket>();
  const track = (socket: net.Socket) => {
    sockets.add(socket);
    socket.once('close', () => sockets.delete(socket));
  };
  const refused: string[] = [];
  const server = scope
    ? scopedProxy(target, scope, refused)
    : net.createServer((client) => pipe(client, target, track));
  server.on('connection', track);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (typeof listen === 'string') server.listen(listen, resolve);
    else server.listen({ host: '127.0.0.1', port: listen, exclusive: true }, resolve);
  });
  if (typeof listen === 'string') await chmod(listen, 0o666);
  return {
    refused,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}

function pipe(client: net.Socket, target: BridgeTarget, track: (socket: net.Socket) => void): void {
  const upstream = net.connect(target);
  track(upstream);
  const destroy = () => {
    client.destroy();
    upstream.destroy();
  };
  client.on('error', destroy);
  upstream.on('error', destroy);
  client.pipe(upstream);
  upstream.pipe(client);
}

/** Hop-by-hop headers (RFC 9110) and the ones the bridge sets itself. */
const DROPPED = new Set([
  'connection',
  'keep-alive',
  'proxy-authorization',
  'proxy-connection',
  'te',
  'trailer',
  'transfer-encoding',
  'upgrade',
  'host',
  'authorization',
  // Claude Code's placeholder key: the bridge's Authorization is the only credential that goes on.
  'x-api-key',
]);

function scopedProxy(target: BridgeTarget, scope: BridgeScope, refused: string[]): http.Server {
  const transport = target.tls ? https : http;
  const agent = new transport.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    const method = req.method ?? 'GET';
    const path = req.url ?? '/';
    if (!allowedByScope(scope, method, path)) {
      const attempt = `${method} ${path.split('?')[0]}`;
      refused.push(attempt);
      req.resume();
      const message =
        `the sandbox's gateway bridge forwards only this trajectory's LLM routes ` +
        `(POST chat/completions, POST completions, POST responses, POST messages, GET models under ${scope.basePath}), not ${attempt}`;
      res.writeHead(403, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({ error: { message, type: 'permission_error', param: null, code: 'forbidden' } }),
      );
      return;
    }
    const headers: http.OutgoingHttpHeaders = {};
    for (const [name, value] of Object.entries(req.headers)) if (!DROPPED.has(name)) headers[name] = value;
    headers.host = `${target.host.includes(':') ? `[${target.host}]` : target.host}:${target.port}`;
    if (scope.apiKey) headers.authorization = `Bearer ${scope.apiKey}`;
    const upstream = transport.request(
      { host: target.host, port: target.port, method, path, headers, agent },
      (answer) => {
        const out: http.OutgoingHttpHeaders = {};
        for (const [name, value] of Object.entries(answer.headers)) if (!DROPPED.has(name)) out[name] = value;
        res.writeHead(answer.statusCode ?? 502, out);
        answer.pipe(res);
      },
    );
    upstream.on('error', (error) => {
      if (res.headersSent) return void res.destroy();
      res.writeHead(502, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          error: {
            message: `the gateway is unreachable: ${error.message}`,
            type: 'api_error',
            param: null,
            code: null,
          },
        }),
      );
    });
    // The agent hung up (e.g. cancelled a stream): stop the call upstream too.
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  });
  // As the gateway's own listener (util/http-server.ts): node's 5 s default closed the agent's idle
  // connection while its tool ran, and the call it then sent on it failed before reaching the gateway.
  server.keepAliveTimeout = KEEP_ALIVE_MS;
  server.headersTimeout = Math.max(server.headersTimeout, KEEP_ALIVE_MS + 1_000);
  return server;
}
