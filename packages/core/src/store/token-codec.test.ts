import { describe, expect, it } from 'vitest';
import {
  commonPrefixLength,
  decodeFloats,
  decodeTokens,
  encodeFloats,
  encodeTokens,
  hashTokens,
  joinPrompt,
  toNumbers,
} from './token-codec.js';

describe('token codec', () => {
  it('packs ids as little-endian uint32, 4 bytes each', () => {
    const blob = encodeTokens([1, 256, 0xffffffff]);
    expect(blob.length).toBe(12);
    expect([...blob]).toEqual([1, 0, 0, 0, 0, 1, 0, 0, 255, 255, 255, 255]);
    expect(Array.from(decodeTokens(blob))).toEqual([1, 256, 0xffffffff]);
  });

  it('encodes a slice and decodes blobs that are not 4-byte aligned in memory', () => {
    const blob = encodeTokens([9, 8, 7, 6, 5], 2);
    const shifted = Buffer.alloc(blob.length + 1);
    blob.copy(shifted, 1);
    expect(Array.from(decodeTokens(shifted.subarray(1)))).toEqual([7, 6, 5]);
  });

  it('rejects a blob whose length is not a multiple of 4', () => {
    expect(() => decodeTokens(Buffer.from([1, 2, 3]))).toThrow(/multiple of 4/);
  });

  it('round-trips logprobs at float32 precision', () => {
    const values = [-0.125, -3.5, 0, -12.75];
    expect(decodeFloats(encodeFloats(values))).toEqual(values);
    expect(decodeFloats(null)).toBeNull();
  });

  it('decodes logprobs from an unaligned blob as from an aligned one', () => {
    const blob = encodeFloats([-0.5, -1.25, -7]);
    const shifted = Buffer.alloc(blob.length + 2);
    blob.copy(shifted, 2);
    expect(decodeFloats(shifted.subarray(2))).toEqual([-0.5, -1.25, -7]);
  });

  it('copies a typed array into a plain array of the same numbers', () => {
    const out = toNumbers(new Uint32Array([7, 0, 0xffffffff]));
    expect(Array.isArray(out)).toBe(true);
    expect(out).toEqual([7, 0, 0xffffffff]);
    expect(toNumbers(new Float32Array([-0.5]))).toEqual([-0.5]);
  });

  it('finds the longest common prefix', () => {
    expect(commonPrefixLength([1, 2, 3, 4], [1, 2, 9])).toBe(2);
    expect(commonPrefixLength([], [1])).toBe(0);
    expect(commonPrefixLength([5, 6], [5, 6, 7])).toBe(2);
  });

  it('joins a prompt from a base prefix and a suffix, and refuses a prefix longer than its base', () => {
    const base = Uint32Array.from([1, 2, 3, 4]);
    expect(Array.from(joinPrompt(base, 3, Uint32Array.from([7, 8])))).toEqual([1, 2, 3, 7, 8]);
    expect(() => joinPrompt(base, 5, new Uint32Array(0))).toThrow(/exceeds/);
  });

  it('fingerprints sequences so that order and length matter', () => {
    expect(hashTokens([1, 2, 3])).toBe(hashTokens([1, 2, 3]));
    expect(hashTokens([1, 2, 3])).not.toBe(hashTokens([3, 2, 1]));
    expect(hashTokens([0])).not.toBe(hashTokens([0, 0]));
  });
});
