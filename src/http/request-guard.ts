import type { IncomingMessage } from 'node:http';
import { isDashboardPath, isLoopback } from './auth.js';

// Browsers (docs/security.md#what-every-request-may-cost): a page the operator opens must not drive a server
// on their machine, so Host, Origin and content type are checked before a body is read or a route runs.

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
  status: 403 | 415;
  code: 'forbidden' | 'unsupported_media_type';
  message: string;
}

const JSON_TYPE = /^application\/(?:[\w.-]+\+)?json$/;

/** Whether a request carries a body (a length above 0, or a chunked one). */
function hasBody(req: IncomingMessage): boolean {
  const length = req.headers['content-length'];
  return (length !== undefined && length !== '0') || req.headers['transfer-encoding'] !== undefined;
}

/** The check for a server bound to `boundHost`; it returns why a request is refused, or null. */
export function requestGuard(
  boundHost: string,
  publicUrl?: string,
): (req: IncomingMessage) => Refused | null {
  const pub = publicUrl ? new URL(publicUrl) : null;
  const checksHost = isLoopback(boundHost) || pub !== null;
  const namesServer = (hostname: string) => isLoopback(hostname) || hostname === pub?.hostname;
  return (req) => {
    const hostHeader = req.headers.host ?? '';
    const host = parseHost(hostHeader);
    if (checksHost && (!host || !namesServer(host.hostname)))
      return forbidden(
        `Host: ${JSON.stringify(hostHeader)} does not name this server (use ${pub ? pub.host : 'its loopback address'}${pub ? '' : ', or start it with --public-url'})`,
      );
    if (SAFE_METHODS.has(req.method ?? 'GET')) return null;
    const origin = req.headers.origin;
    if (origin !== undefined) {
      let from: URL | null = null;
      try {
        from = new URL(origin);
      } catch {
        // "null" (a sandboxed frame, a file: page) and garbage alike are foreign.
      }
      const own = from !== null && host !== null && from.host === host.host;
      const published = from !== null && pub !== null && from.origin === pub.origin;
      if (!own && !published)
        return forbidden(
          `Origin: ${JSON.stringify(origin)} is another site; this server takes state-changing requests from its own pages and from API clients only`,
        );
    }
    const type = req.headers['content-type'];
    const path = (req.url ?? '/').split('?')[0]!;
    if (
      hasBody(req) &&
      !isDashboardPath(path) &&
      !JSON_TYPE.test((type ?? '').split(';')[0]!.trim().toLowerCase())
    )
      return {
        status: 415,
        code: 'unsupported_media_type',
        message: `content-type: ${type === undefined ? 'none given' : JSON.stringify(type)}; send the JSON body with Content-Type: application/json`,
      };
    return null;
  };
}

const forbidden = (message: string): Refused => ({ status: 403, code: 'forbidden', message });
