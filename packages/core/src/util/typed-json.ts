/*
 * JSON of values whose token-id arrays are Uint32Arrays: ids move between threads as typed arrays
 * (a transfer, no per-number copy), and are written as the JSON arrays they stand for.
 */

/** A plain array of a typed array's numbers (a loop: Array.from's iterator is several times slower). */
export function idArray(ids: ArrayLike<number>): number[] {
  if (Array.isArray(ids)) return ids;
  const out = new Array<number>(ids.length);
  for (let i = 0; i < ids.length; i++) out[i] = ids[i]!;
  return out;
}

const isTyped = (value: unknown): value is Uint32Array | Float64Array | Float32Array =>
  value instanceof Uint32Array || value instanceof Float64Array || value instanceof Float32Array;

/** JSON.stringify, with each Uint32Array (or Float32/64Array) written as a JSON array. */
export function typedJsonText(value: unknown): string {
  return JSON.stringify(value, (_key, v) => (isTyped(v) ? idArray(v) : v));
}

/**
 * The numbers held in typed arrays within `value` (objects and arrays of objects, as a parsed or
 * built body nests them), and their buffers: what a caller weighs before serialising off the loop.
 */
export function typedArraysIn(value: unknown): { count: number; buffers: ArrayBuffer[] } {
  const out = { count: 0, buffers: [] as ArrayBuffer[] };
  const walk = (v: unknown, depth: number) => {
    if (typeof v !== 'object' || v === null || depth > 8) return;
    if (isTyped(v)) {
      out.count += v.length;
      if (!out.buffers.includes(v.buffer as ArrayBuffer)) out.buffers.push(v.buffer as ArrayBuffer);
      return;
    }
    if (Array.isArray(v)) {
      // By index, objects only: a million plain ids allocate nothing here.
      for (let i = 0; i < v.length; i++) if (typeof v[i] === 'object') walk(v[i], depth + 1);
      return;
    }
    for (const key in v) walk((v as Record<string, unknown>)[key], depth + 1);
  };
  walk(value, 0);
  return out;
}

/**
 * Each array under `fields` of `value` (when an object) that holds only token ids (integers
 * 0..2^32-1), replaced by a Uint32Array; anything else stays as it is, for the caller's checks to
 * name. The new arrays' buffers (to move) are added to `buffers`.
 */
export function packIdFields(value: unknown, fields: readonly string[], buffers: ArrayBuffer[]): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return;
  const record = value as Record<string, unknown>;
  for (const field of fields) {
    const ids = record[field];
    if (!Array.isArray(ids) || !allIds(ids)) continue;
    const typed = Uint32Array.from(ids);
    buffers.push(typed.buffer);
    record[field] = typed;
  }
}

function allIds(ids: unknown[]): boolean {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i];
    if (typeof id !== 'number' || !Number.isInteger(id) || id < 0 || id > 0xffff_ffff) return false;
  }
  return true;
}
