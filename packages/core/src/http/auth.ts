import { createHash, timingSafeEqual } from 'node:crypto';
import type { MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { AuthError, ValidationError } from '../domain/index.js';

export const SCOPES = ['agent', 'runner', 'trainer', 'admin'] as const;
export type Scope = (typeof SCOPES)[number];

export interface ApiKey {
  name: string;
  scopes: Scope[];
  /** sha256 of the key: the key itself is never kept in memory longer than parsing needs. */
  digest: Buffer;
  /**
   * Who holds the key, as stored where the server binds something to it (an online session's
   * owner): a hash of the digest, so neither the key nor its digest is ever written anywhere.
   */
  fingerprint: string;
}

function digest(key: string): Buffer {
  return createHash('sha256').update(key).digest();
}

function fingerprint(keyDigest: Buffer): string {
  return createHash('sha256')
    .update('stepwise key fingerprint\u0000')
    .update(keyDigest)
    .digest('hex')
    .slice(0, 32);
}

/** Parses `KEY:scope,scope` as given on the command line or in env; scopes are never implied. */
export function parseApiKey(spec: string, index: number): ApiKey {
  const at = spec.lastIndexOf(':');
  const key = at > 0 ? spec.slice(0, at) : spec;
  const scopeList =
    at > 0
      ? spec
          .slice(at + 1)
          .split(',')
          .filter(Boolean)
      : [];
  if (scopeList.length === 0) {
    throw new ValidationError(
      `api key #${index + 1}: name its scopes, e.g. KEY:agent or KEY:trainer,admin (${SCOPES.join(', ')})`,
      'api_key',
    );
  }
  if (key.length < 16)
    throw new ValidationError(`api key #${index + 1}: must be at least 16 characters`, 'api_key');
  for (const scope of scopeList) {
    if (!(SCOPES as readonly string[]).includes(scope)) {
      throw new ValidationError(
        `api key #${index + 1}: unknown scope '${scope}' (use ${SCOPES.join(', ')})`,
        'api_key',
      );
    }
  }
  const keyDigest = digest(key);
  return {
    name: `key${index + 1}`,
    scopes: scopeList as Scope[],
    digest: keyDigest,
    fingerprint: fingerprint(keyDigest),
  };
}

export interface AuthVariables {
  apiKey: ApiKey | null;
}

function presentedKey(header: string | undefined, alt: string | undefined): string | null {
  if (header?.startsWith('Bearer ')) return header.slice('Bearer '.length).trim();
  return alt?.trim() || null;
}

/**
 * The key a request presents: `Authorization: Bearer`, else `X-Api-Key`, else the dashboard's
 * cookie (read from the raw `Cookie` header only when neither header names a key).
 */
export function requestKey(
  authorization: string | undefined,
  apiKeyHeader: string | undefined,
  cookies: () => string | undefined,
): string | null {
  return presentedKey(authorization, apiKeyHeader) ?? cookies() ?? null;
}

/** The configured key a caller presented; 401 when it presented none or an unknown one. */
export function callerKey(keys: readonly ApiKey[], presented: string | null): ApiKey {
  if (!presented) throw new AuthError('missing API key (Authorization: Bearer <key>)', 401);
  const match = findKey(keys, presented);
  if (!match) throw new AuthError('invalid API key', 401);
  return match;
}

/** 403 unless the caller holds one of the scopes (admin holds them all; no key: keys are off). */
export function checkScope(key: ApiKey | null, scopes: readonly Scope[]): void {
  if (key && !key.scopes.includes('admin') && !scopes.some((s) => key.scopes.includes(s))) {
    throw new AuthError(`this key lacks the ${scopes.join(' or ')} scope`, 403);
  }
}

/** Whether the caller holds only the `agent` scope: the policy itself, trusted with nothing of its episode. */
export function agentOnly(key: ApiKey | null): boolean {
  return key?.scopes.every((s) => s === 'agent') ?? false;
}

/** The cookie the dashboard's sign-in sets (HttpOnly, SameSite=Strict): a browser's API key. */
export const KEY_COOKIE = 'stepwise_key';

/** The configured key matching `key`, if any. */
export function findKey(keys: readonly ApiKey[], key: string): ApiKey | null {
  const d = digest(key);
  return keys.find((k) => timingSafeEqual(k.digest, d)) ?? null;
}

/** The dashboard's pages and assets: a caller without a key is sent to its login page. */
export function isDashboardPath(path: string): boolean {
  return path === '/dashboard' || path.startsWith('/dashboard/');
}

/** Paths a browser without a key is sent to sign in from: the dashboard and the server's bare address (its front door). */
export function signsInBrowsers(path: string): boolean {
  return path === '/' || isDashboardPath(path);
}

/** Dashboard paths a browser reaches before signing in. */
export const isPublicDashboardPath = (path: string) =>
  path === '/dashboard/login' || path.startsWith('/dashboard/assets/');

/**
 * The caller a request's key names: null with keys off (loopback only: every caller is trusted), a
 * 401 for no key or an unknown one. How every route identifies its caller: the app's middleware
 * below and the LLM calls' listener (gateway/direct.ts) alike.
 */
export function identifyCaller(
  keys: readonly ApiKey[],
  authorization: string | undefined,
  apiKeyHeader: string | undefined,
  cookies: () => string | undefined,
): ApiKey | null {
  if (keys.length === 0) return null;
  return callerKey(keys, requestKey(authorization, apiKeyHeader, cookies));
}

/**
 * Identifies the caller (identifyCaller). A key comes as `Authorization: Bearer`, `X-Api-Key`, or
 * the dashboard's cookie; a browser without one is sent to the dashboard's sign-in page.
 */
export function authenticate(keys: readonly ApiKey[]): MiddlewareHandler<{ Variables: AuthVariables }> {
  return async (c, next) => {
    const cookies = () => getCookie(c, KEY_COOKIE);
    if (keys.length > 0 && signsInBrowsers(c.req.path)) {
      const key = requestKey(c.req.header('authorization'), c.req.header('x-api-key'), cookies);
      const match = key ? findKey(keys, key) : null;
      if (!match && !isPublicDashboardPath(c.req.path))
        return c.redirect(`/dashboard/login?next=${encodeURIComponent(c.req.path)}`, 303);
      c.set('apiKey', match);
      return next();
    }
    c.set('apiKey', identifyCaller(keys, c.req.header('authorization'), c.req.header('x-api-key'), cookies));
    return next();
  };
}

/** Allows the request when the caller holds any of the scopes (admin holds them all). */
export function requireScope(...scopes: Scope[]): MiddlewareHandler<{ Variables: AuthVariables }> {
  return async (c, next) => {
    checkScope(c.get('apiKey'), scopes);
    return next();
  };
}

export function isLoopback(host: string): boolean {
  return host === 'localhost' || host === '::1' || host === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(host);
}
