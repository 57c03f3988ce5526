import type { IncomingMessage } from 'node:http';
import { parse as parseCookies } from 'hono/utils/cookie';
import {
  type ApiKey,
  findKey,
  isDashboardPath,
  isLoopback,
  isPublicDashboardPath,
  KEY_COOKIE,
  requestKey,
  signsInBrowsers,
} from './auth.js';
import type { KeyRates } from './key-rates.js';

// Browsers (docs/security.md#what-every-request-may-cost): a page the operator opens must not drive a server
// on their machine, so Host, Origin and content type are checked before a body is read or a route runs;
// so are the caller's key and its rates, so that no keyless client makes the server buffer a body.

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/** `host[:port]` as URL parses it (IPv6 in brackets), lower-cased; null when it does not parse. */
function parseHost(value: string): { hostname: string; host: string } | null {
  try {
    const url = new URL(`http://${value}`);
    if (url.username || url.password || url.pathname !== '/' || url.search || url.hash) return null;
    return { hostname: url.hostname, host: url.host };
  } catch {
    return null;
  }
}

/** Why the guard refused a request: answered with `status` before the body is read. */
export interface Refused {
  status: 303 | 401 | 403 | 413 | 415 | 429;
  code:
    | 'forbidden'
    | 'unauthorized'
    | 'payload_too_large'
    | 'unsupported_media_type'
    | 'rate_limited'
    | 'see_other';
  message: string;
  field?: string;
  headers?: Record<string, string>;
}

const JSON_TYPE = /^application\/(?:[\w.-]+\+)?json$/;

/** Whether a request carries a body (a length above 0, or a chunked one). */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/** The largest body a route open without a key takes (the dashboard's sign-in form). */
export const PUBLIC_BODY_BYTES = 64 * 1024;

export interface GuardOptions {
  /** The origin written into base_urls; its Host and Origin are the server's own too. */
  publicUrl?: string;
  /** The configured keys: a request without one of them is refused before its body is read. */
  keys?: readonly ApiKey[];
  /** Per-key rates (key-rates.ts); none: unlimited. */
  rates?: KeyRates;
}

/**
 * The check for a server bound to `boundHost`; it returns why a request is refused, or null. `path`
 * is the request's normalised path (request-path.ts), the one the routes see.
 */
export function requestGuard(
  boundHost: string,
  options: GuardOptions = {},
): (req: IncomingMessage, path: string) => Refused | null {
  const pub = options.publicUrl ? new URL(options.publicUrl) : null;
  const checksHost = isLoopback(boundHost) || pub !== null;
  const namesServer = (hostname: string) => isLoopback(hostname) || hostname === pub?.hostname;
  const keys = options.keys ?? [];
  return (req, path) => {
    const hostHeader = req.headers.host ?? '';
    const host = parseHost(hostHeader);
    if (checksHost && (!host || !namesServer(host.hostname)))
      return forbidden(
        `Host: ${JSON.stringify(hostHeader)} does not name this server (use ${pub ? pub.host : 'its loopback address'}${pub ? '' : ', or start it with --public-url'})`,
      );
    if (!SAFE_METHODS.has(req.method ?? 'GET')) {
      const refused = foreignOrigin(req.headers.origin, host, pub) ?? nonJson(req, path);
      if (refused) return refused;
    }
    return keys.length === 0 ? null : keyed(req, path, keys, options.rates);
  };
}

/**
 * A state-changing request from another site: its `Origin`, scheme included, is neither this
 * server's plain-HTTP origin under the checked Host nor --public-url's.
 */
function foreignOrigin(
  origin: string | undefined,
  host: { host: string } | null,
  pub: URL | null,
): Refused | null {
  if (origin === undefined) return null;
  let from: URL | null = null;
  try {
    from = new URL(origin);
  } catch {
    // "null" (a sandboxed frame, a file: page) and garbage alike are foreign.
  }
  // This server speaks plain HTTP: https://its-host is another origin (a TLS proxy in front names
  // itself with --public-url).
  const own = from !== null && host !== null && from.protocol === 'http:' && from.host === host.host;
  const published = from !== null && pub !== null && from.origin === pub.origin;
  if (own || published) return null;
  return forbidden(
    `Origin: ${JSON.stringify(origin)} is another site; this server takes state-changing requests from its own pages and from API clients only`,
  );
}

/** A state-changing body that is not JSON, outside the dashboard's forms (which carry CSRF tokens). */
function nonJson(req: IncomingMessage, path: string): Refused | null {
  const type = req.headers['content-type'];
  const media = (type ?? '').split(';')[0]!.trim().toLowerCase();
  if (!hasBody(req) || isDashboardPath(path) || JSON_TYPE.test(media)) return null;
  // Evidence blobs are raw bytes; like JSON, that type needs a CORS preflight, so no page can forge it.
  if (media === 'application/octet-stream' && path.startsWith('/v1/evidence/blobs/')) return null;
  return {
    status: 415,
    code: 'unsupported_media_type',
    field: 'content-type',
    message: `content-type: ${type === undefined ? 'none given' : JSON.stringify(type)}; send the JSON body with Content-Type: application/json`,
  };
}

/**
 * With keys configured: the caller's key (401, or the dashboard's sign-in page) and its rates (429),
 * checked before a byte of the body is read, so a keyless client cannot make the server buffer it.
 */
function keyed(
  req: IncomingMessage,
  path: string,
  keys: readonly ApiKey[],
  rates?: KeyRates,
): Refused | null {
  if (path === '/ready') return null;
  const dashboard = signsInBrowsers(path);
  if (dashboard && isPublicDashboardPath(path)) {
    const length = Number(req.headers['content-length'] ?? 0);
    if (req.headers['transfer-encoding'] !== undefined || !(length <= PUBLIC_BODY_BYTES))
      return {
        status: 413,
        code: 'payload_too_large',
        field: 'body',
        message: `body: a route open without a key takes at most ${PUBLIC_BODY_BYTES} bytes, with a declared length`,
      };
    return null;
  }
  const presented = requestKey(req.headers.authorization, header(req, 'x-api-key'), () => {
    const { cookie } = req.headers;
    return cookie === undefined ? undefined : parseCookies(cookie, KEY_COOKIE)[KEY_COOKIE];
  });
  const key = presented ? findKey(keys, presented) : null;
  if (!key) {
    if (dashboard)
      return {
        status: 303,
        code: 'see_other',
        message: 'sign in first',
        headers: { location: `/dashboard/login?next=${encodeURIComponent(path)}` },
      };
    return {
      status: 401,
      code: 'unauthorized',
      message: presented ? 'invalid API key' : 'missing API key (Authorization: Bearer <key>)',
    };
  }
  const limited = rates?.take(key.name, req.method === 'POST' && path === '/init_trajectory');
  if (!limited) return null;
  return {
    status: 429,
    code: 'rate_limited',
    field: 'api_key',
    message:
      limited.refused === 'requests'
        ? `this key sent more requests than --rate-limit allows; retry in ${limited.retryAfterS} s`
        : `this key opened more trajectories than --trajectory-rate-limit allows; retry in ${limited.retryAfterS} s`,
    headers: { 'retry-after': String(limited.retryAfterS) },
  };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

const forbidden = (message: string): Refused => ({ status: 403, code: 'forbidden', message });
