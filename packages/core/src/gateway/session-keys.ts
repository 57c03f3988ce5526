import { z } from 'zod';
import { parseOrThrow, type Trajectory, ValidationError } from '../domain/index.js';
import { AGENT_HEADERS } from '../domain/wire-headers.js';

// Which online session a call or a stored trajectory belongs to: the session headers and the key derivation.
// Apart from online-sessions.ts (the open-session map, idle close, read-back), which imports it.

export const SESSION_HEADER = AGENT_HEADERS.session;
export const CHANNEL_HEADER = AGENT_HEADERS.channel;
/** Header value meaning "derive the key from the body". */
export const AUTO_SESSION = 'auto';

const SessionKey = z
  .string()
  .min(1, 'must not be empty')
  .max(512, 'must be at most 512 characters')
  .regex(/^[\x20-\x7e]+$/, 'must be printable ASCII');

/** `<id>:<n>` → `<id>`: OpenClaw's prompt_cache_key ends in a counter that may change mid-session. */
export function stripCounter(key: string): string {
  const at = key.lastIndexOf(':');
  if (at <= 0) return key;
  return /^\d+$/.test(key.slice(at + 1)) ? key.slice(0, at) : key;
}

const nonEmpty = (v: unknown): string | null => (typeof v === 'string' && v.trim() !== '' ? v.trim() : null);

/**
 * The session key a request body carries: `prompt_cache_key` (counter suffix removed), else `user`,
 * else `safety_identifier`, else `metadata.session_id`; null when there is none.
 */
export function sessionKeyFromBody(body: Record<string, unknown>): string | null {
  const cacheKey = nonEmpty(body.prompt_cache_key);
  if (cacheKey !== null) return stripCounter(cacheKey);
  const metadata = body.metadata;
  const fromMetadata =
    typeof metadata === 'object' && metadata !== null
      ? nonEmpty((metadata as Record<string, unknown>).session_id)
      : null;
  return nonEmpty(body.user) ?? nonEmpty(body.safety_identifier) ?? fromMetadata;
}

/** The session key a request names: the header's value, or derived from the body. */
export function sessionKeyOf(header: string, body: Record<string, unknown>): string {
  const value = header.trim();
  let key: string | null = value;
  if (value.toLowerCase() === AUTO_SESSION) {
    key = sessionKeyFromBody(body);
    if (key === null) {
      throw new ValidationError(
        'prompt_cache_key: X-Stepwise-Session: auto derives the session from the body, which has none: send prompt_cache_key (OpenClaw: set the model compat flag supportsPromptCacheKey: true), user, safety_identifier or metadata.session_id, or put the session key itself in the header',
        'prompt_cache_key',
      );
    }
  }
  return parseOrThrow(SessionKey, key, 'X-Stepwise-Session');
}

/**
 * The session a stored trajectory is: one the gateway opened (`source: session` with its
 * `session_owner`, which an agent's key cannot write), or null. Before owners were recorded no
 * session was bound to a key: those are left to the pool's idle sweep.
 */
export function sessionOfStored(t: Trajectory): { key: string; owner: string } | null {
  const { source, session_key: key, session_owner: owner } = t.metadata;
  if (source !== 'session' || typeof key !== 'string' || !('session_owner' in t.metadata)) return null;
  if (owner !== null && typeof owner !== 'string') return null;
  return { key, owner: owner ?? '' };
}
