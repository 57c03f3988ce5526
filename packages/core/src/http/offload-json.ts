import { offload } from '../services/offload.js';
import { typedArraysIn, typedJsonText } from '../util/typed-json.js';
import { Transfer } from '../util/worker-rpc.js';
import { OFFLOAD_JSON_BYTES } from './json-body.js';

/*
 * Big JSON in and out of the gateway without the event loop walking it (docs/security.md): an
 * engine's answer echoing a 262,144-id prompt, the body sent to the engine, the answer written back.
 * Token ids cross the threads as moved Uint32Arrays; small values cost less than the hop, and stay.
 */

/** From this many numbers in typed arrays on, a value is serialised on the offload thread. */
export const OFFLOAD_IDS = 16_384;

/**
 * A value as JSON, its typed arrays written as arrays: text when small, UTF-8 bytes built on the
 * offload thread when its typed arrays are big. `move`: their buffers go there (unusable here after).
 */
export async function jsonOf(value: unknown, move = false): Promise<string | Uint8Array<ArrayBuffer>> {
  const { count, buffers } = typedArraysIn(value);
  if (count < OFFLOAD_IDS) return typedJsonText(value);
  return offload.call('encodeJson', move ? new Transfer(value, buffers) : value) as Promise<
    Uint8Array<ArrayBuffer>
  >;
}

export type ParsedJson = { ok: true; value: unknown } | { ok: false };

/**
 * An engine's answer parsed (`ok: false`: not JSON). A big one is parsed on the offload thread, and
 * its id arrays come back as Uint32Arrays (engines/capture.ts's packAnswerIds). `keep`: the caller
 * still needs `bytes` (they are copied there, not moved).
 */
export async function parseEngineJson(bytes: Uint8Array, keep: boolean): Promise<ParsedJson> {
  if (bytes.length < OFFLOAD_JSON_BYTES) {
    try {
      return { ok: true, value: JSON.parse(new TextDecoder().decode(bytes)) };
    } catch {
      return { ok: false };
    }
  }
  const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength;
  // A copy where the caller keeps its bytes (`new Uint8Array`: a Buffer's slice() would share them).
  const buffer = (whole && !keep ? bytes.buffer : new Uint8Array(bytes).buffer) as ArrayBuffer;
  return offload.call('parseEngineAnswer', new Transfer(buffer, [buffer]));
}
