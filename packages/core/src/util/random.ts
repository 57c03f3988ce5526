/**
 * Seeded pseudo-randomness (synthetic data, the sim engine). Not cryptographic: the point is that the same seed and
 * the same inputs give the same numbers on every machine and Node version.
 */

/** FNV-1a over the parts joined with a separator: a 32-bit seed from any mix of numbers and strings. */
export function hashSeed(...parts: readonly (string | number | bigint)[]): number {
  let h = 0x811c9dc5;
  const s = parts.map(String).join('\u0000');
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A random-number generator returning floats in [0, 1). */
export type Random = () => number;

/** mulberry32: a small, well-mixed 32-bit generator. */
export function seededRandom(...seed: readonly (string | number | bigint)[]): Random {
  let a = hashSeed(...seed);
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** An integer in [0, n). */
export function randomInt(random: Random, n: number): number {
  return Math.floor(random() * n);
}

export function pick<T>(random: Random, items: readonly T[]): T {
  const item = items[randomInt(random, items.length)];
  if (item === undefined) throw new Error('pick from an empty list');
  return item;
}
