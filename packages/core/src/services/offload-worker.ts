/**
 * The thread CPU-heavy request work goes to (offload.ts): the tokenising a gateway's capture may
 * need, the parsing of big step batches, and the dashboard's decoding table.
 */
import { packAnswerIds } from '../engines/capture.js';
import type { ModelRef } from '../text/model-ref.js';
import { loadTokenTable } from '../text/token-table.js';
import { loadQwen3Tokenizer } from '../text/tokenizer.js';
import { packIdFields, typedJsonText } from '../util/typed-json.js';
import { serveWorkerRpc, Transfer } from '../util/worker-rpc.js';
import { inThreadTokenizer } from './capture-tokenizer.js';
import { parseCallBody, parseJsonBody, parseJsonText } from './json-parse.js';
import { parseStepsBody } from './steps-body.js';

export const offloadHandlers = {
  ...inThreadTokenizer(loadQwen3Tokenizer),
  /** A model's decoding table (text/token-table.ts; null: Qwen3's), built here and moved to the caller. */
  tokenTable(model?: ModelRef | null) {
    const table = loadTokenTable(model);
    const buffers = [table.offsets, table.bytes, ...(table.byteTokens ? [table.byteTokens] : [])];
    return new Transfer(
      table,
      buffers.map((b) => b.buffer as ArrayBuffer),
    );
  },
  /** A big JSON body (http/json-body.ts), parsed and checked here; a free-form field past its cap is a 400 here. */
  parseJsonBody(bytes: ArrayBuffer, allowEmpty: boolean) {
    return parseJsonBody(new TextDecoder().decode(bytes), allowEmpty);
  },
  /** A big LLM call's body (gateway/calls.ts), parsed and its extra fields measured here. */
  parseCallBody(text: string) {
    return parseCallBody(text);
  },
  /**
   * A big `/generate` body (gateway/calls.ts), parsed and checked as parseJsonText does; the token
   * id arrays named by `fields` come back as Uint32Arrays, moved rather than cloned.
   */
  parseIdsBody(body: string | ArrayBuffer, fields: readonly string[]) {
    const { value } = parseJsonText(typeof body === 'string' ? body : bodyText(body), false, true);
    const buffers: ArrayBuffer[] = [];
    // Anything but plain ids stays as parsed, for the schema on the caller's side to name.
    packIdFields(value, fields, buffers);
    return new Transfer(value, buffers);
  },
  /**
   * An engine's big answer (a completion echoing its prompt's ids), parsed here; its id arrays come
   * back as moved Uint32Arrays (engines/capture.ts checks what stays plain). `ok: false`: not JSON.
   */
  parseEngineAnswer(bytes: ArrayBuffer) {
    let value: unknown;
    try {
      value = JSON.parse(new TextDecoder().decode(bytes));
    } catch {
      return { ok: false as const };
    }
    return new Transfer({ ok: true as const, value }, packAnswerIds(value));
  },
  /** A value as JSON bytes, its typed arrays written as arrays (util/typed-json.ts); the bytes move. */
  encodeJson(value: unknown) {
    const bytes = new TextEncoder().encode(typedJsonText(value));
    return new Transfer(bytes, [bytes.buffer as ArrayBuffer]);
  },
  /** A step batch's body, parsed and checked, its token ids moved back as Uint32Arrays. */
  parseSteps(bytes: ArrayBuffer) {
    const parsed = parseStepsBody(new TextDecoder().decode(bytes));
    const buffers: ArrayBuffer[] = [];
    const typed = (ids: readonly number[]) => {
      const out = Uint32Array.from(ids);
      buffers.push(out.buffer);
      return out as unknown as number[];
    };
    // The ids the stores read as ArrayLike (as WorkerStore sends them); a guided step's training
    // prompt stays an array, as the store edits and serialises it.
    for (const step of parsed.steps) {
      step.promptIds = typed(step.promptIds);
      step.responseIds = typed(step.responseIds);
    }
    return new Transfer(parsed, buffers);
  },
};

/** A body's bytes as text, as a fetch Request's `text()` reads it (UTF-8, a leading BOM dropped). */
function bodyText(bytes: ArrayBuffer): string {
  const text = new TextDecoder().decode(bytes);
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text;
}

serveWorkerRpc(offloadHandlers);
