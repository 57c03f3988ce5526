import { crc32 } from 'node:zlib';
import { StepwiseError } from '../domain/index.js';

/*
 * `.npz` without a dependency: an uncompressed ZIP whose members are `.npy` files. Each member's
 * array data starts on a 64-byte boundary of the whole archive (the local header's extra field pads
 * it), so a reader holding the bytes can view every array in place: `numpy.frombuffer(body, dtype,
 * count, offset)`. `numpy.load` reads the same bytes as a normal `.npz`.
 */

const ALIGN = 64;

export type NpyArray =
  | { dtype: '<i4'; shape: number[]; data: Int32Array }
  | { dtype: '<f4'; shape: number[]; data: Float32Array }
  | { dtype: '|u1'; shape: number[]; data: Uint8Array }
  | { dtype: '<U'; shape: [number]; data: string[] };

/** The `.npy` (format 1.0) header, padded so header + magic is a multiple of 64 bytes. */
function npyHeader(descr: string, shape: number[]): Buffer {
  const dims = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(', ')})`;
  const dict = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${dims}, }`;
  const unpadded = 10 + dict.length + 1; // magic(6) + version(2) + length(2) + dict + '\n'
  const total = Math.ceil(unpadded / ALIGN) * ALIGN;
  if (total - 10 > 0xffff) throw new Error(`npy header too long for ${descr} ${dims}`);
  const header = Buffer.alloc(total, 0x20);
  header.write('\x93NUMPY', 0, 'latin1');
  header[6] = 1;
  header[7] = 0;
  header.writeUInt16LE(total - 10, 8);
  header.write(dict, 10, 'latin1');
  header[total - 1] = 0x0a;
  return header;
}

/** An array's bytes in little-endian order (every platform Node runs on is little-endian). */
function arrayBytes(array: NpyArray): { descr: string; bytes: Buffer } {
  if (array.dtype !== '<U') {
    const d = array.data;
    return { descr: array.dtype, bytes: Buffer.from(d.buffer, d.byteOffset, d.byteLength) };
  }
  // Fixed-width UTF-32 strings, as wide as the longest one (at least 1).
  let width = 1;
  const points = array.data.map((s) => {
    const cps = Array.from(s, (ch) => ch.codePointAt(0)!);
    width = Math.max(width, cps.length);
    return cps;
  });
  const bytes = Buffer.alloc(points.length * width * 4);
  points.forEach((cps, i) => {
    for (const [j, cp] of cps.entries()) bytes.writeUInt32LE(cp, (i * width + j) * 4);
  });
  return { descr: `<U${width}`, bytes };
}

const DOS_DATE = (1 << 5) | 1; // 1980-01-01: archives are reproducible

/** Builds the archive; returns its parts (concatenate or stream them) and total size. */
export function npzParts(arrays: Record<string, NpyArray>): { parts: Buffer[]; size: number } {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  const names = Object.keys(arrays);
  for (const key of names) {
    const array = arrays[key]!;
    const expected = array.shape.reduce((a, b) => a * b, 1);
    if (array.data.length !== expected)
      throw new Error(`npz member ${key}: ${array.data.length} values for shape (${array.shape})`);
    const name = Buffer.from(`${key}.npy`, 'utf8');
    const { descr, bytes } = arrayBytes(array);
    const header = npyHeader(descr, array.shape);
    const size = header.length + bytes.length;
    // Pad the local header's extra field so the member (and so its array data) starts aligned.
    let pad = (ALIGN - ((offset + 30 + name.length) % ALIGN)) % ALIGN;
    if (pad > 0 && pad < 4) pad += ALIGN; // an extra field is at least its 4-byte header
    const crc = crc32(bytes, crc32(header));
    const local = Buffer.alloc(30 + name.length + pad);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed
    local.writeUInt16LE(0x0800, 6); // UTF-8 names
    local.writeUInt16LE(0, 8); // stored
    local.writeUInt16LE(0, 10);
    local.writeUInt16LE(DOS_DATE, 12);
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(size, 18);
    local.writeUInt32LE(size, 22);
    local.writeUInt16LE(name.length, 26);
    local.writeUInt16LE(pad, 28);
    name.copy(local, 30);
    if (pad > 0) {
      local.writeUInt16LE(0xd935, 30 + name.length); // a padding block (as zipalign writes)
      local.writeUInt16LE(pad - 4, 32 + name.length);
    }
    const entry = Buffer.alloc(46 + name.length);
    entry.writeUInt32LE(0x02014b50, 0);
    entry.writeUInt16LE(20, 4); // made by
    entry.writeUInt16LE(20, 6);
    entry.writeUInt16LE(0x0800, 8);
    entry.writeUInt16LE(0, 10);
    entry.writeUInt16LE(0, 12);
    entry.writeUInt16LE(DOS_DATE, 14);
    entry.writeUInt32LE(crc, 16);
    entry.writeUInt32LE(size, 20);
    entry.writeUInt32LE(size, 24);
    entry.writeUInt16LE(name.length, 28);
    entry.writeUInt32LE(offset, 42);
    name.copy(entry, 46);
    central.push(entry);
    parts.push(local, header, bytes);
    offset += local.length + size;
    if (offset > 0xffffffff) {
      throw new StepwiseError(
        'batch_size: the padded batch would exceed 4 GiB; lease fewer groups per batch',
        413,
        'batch_too_large',
        'batch_size',
      );
    }
  }
  const centralSize = central.reduce((n, b) => n + b.length, 0);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(names.length, 8);
  end.writeUInt16LE(names.length, 10);
  end.writeUInt32LE(centralSize, 12);
  end.writeUInt32LE(offset, 16);
  parts.push(...central, end);
  return { parts, size: offset + centralSize + end.length };
}

export function writeNpz(arrays: Record<string, NpyArray>): Buffer {
  const { parts, size } = npzParts(arrays);
  return Buffer.concat(parts, size);
}
