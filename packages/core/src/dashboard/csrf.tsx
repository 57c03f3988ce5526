import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import { createContext, useContext } from 'hono/jsx';
import { StepwiseError } from '../domain/index.js';
import { KEY_COOKIE, requestKey } from '../http/auth.js';

/*
 * CSRF tokens on the dashboard's forms (docs/security.md, "One path rule"): a second layer behind the
 * Origin check. Each form carries a token that is an HMAC of the caller's key under a secret of this
 * server's, so a page on another site, which can neither read the dashboard nor the cookie, cannot
 * make one; a POST without it is a 403 naming `csrf_token`.
 */

declare module 'hono' {
  interface ContextVariableMap {
    /** The token this request's forms carry (set by csrfTokens().middleware). */
    csrfToken: string;
  }
}

/** The form field the token travels in. */
export const CSRF_FIELD = 'csrf_token';

/** The token of the page being rendered, for <CsrfField />. */
export const CsrfContext = createContext('');

/** The hidden field every dashboard POST form holds. */
export function CsrfField() {
  return <input type="hidden" name={CSRF_FIELD} value={useContext(CsrfContext)} />;
}

/** Tokens under one secret (random per server start: a restart invalidates open forms, on purpose). */
export function csrfTokens(secret: Buffer = randomBytes(32)): MiddlewareHandler {
  return async (c, next) => {
    const key = requestKey(c.req.header('authorization'), c.req.header('x-api-key'), () =>
      getCookie(c, KEY_COOKIE),
    );
    c.set(
      'csrfToken',
      createHmac('sha256', secret)
        .update(`dashboard-form\u0000${key ?? ''}`)
        .digest('base64url'),
    );
    return next();
  };
}

/** A 403 naming `csrf_token` unless the form's token is this request's. */
export function checkCsrf(c: Context, given: unknown): void {
  const expected = Buffer.from(c.get('csrfToken') ?? '');
  const got = Buffer.from(typeof given === 'string' ? given : '');
  if (expected.length > 0 && got.length === expected.length && timingSafeEqual(got, expected)) return;
  throw new StepwiseError(
    `${CSRF_FIELD}: ${typeof given === 'string' ? 'not this page' : 'missing'}; submit the form from the dashboard's own page (reload it if the server restarted)`,
    403,
    'forbidden',
    CSRF_FIELD,
  );
}
