import type { Context } from 'hono';
import { parseJsonText } from '../services/json-parse.js';
import { offload } from '../services/offload.js';
import { Transfer } from '../util/worker-rpc.js';

export {
  MAX_JSON_DEPTH,
  nulRefused,
  parseJsonBody,
  parseJsonText,
  refuseBigFreeForm,
  refuseNulQuery,
} from '../services/json-parse.js';

/** Bodies from this size on are parsed off the event loop (steps-body.ts for step batches). */
export const OFFLOAD_JSON_BYTES = 256 * 1024;

/**
 * Reads a request's JSON body without trusting it: malformed JSON is a 400 naming `body`. An empty
 * body reads as `{}` when `allowEmpty` (routes whose fields are all optional). A big one is parsed,
 * and its free-form fields measured, on the offload thread: 31.5 MB of metadata is refused there
 * without the event loop parsing it (docs/security.md).
 */
export async function readJsonBody(c: Context, allowEmpty = true): Promise<unknown> {
  const length = Number(c.req.header('content-length') ?? Number.NaN);
  if (!(length >= OFFLOAD_JSON_BYTES)) return (await readJsonText(c, allowEmpty)).value;
  return offload.call('parseJsonBody', await ownedBytes(c), allowEmpty);
}

/**
 * The body's bytes as an ArrayBuffer to move to the offload thread: the buffer util/http-server.ts
 * read the body into when it is whole and its own (no copy on the event loop), else a copy.
 */
export async function ownedBytes(c: Context): Promise<Transfer<ArrayBuffer>> {
  const raw = (c.env as { incoming?: { rawBody?: Buffer } } | undefined)?.incoming?.rawBody;
  if (raw && raw.byteOffset === 0 && raw.byteLength === raw.buffer.byteLength) {
    const buffer = raw.buffer as ArrayBuffer;
    return new Transfer(buffer, [buffer]);
  }
  const bytes = await c.req.arrayBuffer();
  return new Transfer(bytes, [bytes]);
}

/** readJsonBody that also returns the text the value was parsed from. */
export async function readJsonText(c: Context, allowEmpty = true): Promise<{ text: string; value: unknown }> {
  return parseJsonText(await c.req.text(), allowEmpty, true);
}
