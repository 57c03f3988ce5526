import { type Random, randomInt, seededRandom } from '@stepwise/core';

/**
 * The draws a template makes, over one seeded stream: the same seed gives the same task on every
 * machine, so nothing here may consult the clock or Math.random.
 */
export class Rng {
  constructor(private readonly random: Random) {}

  static of(...seed: readonly (string | number)[]): Rng {
    return new Rng(seededRandom(...seed));
  }

  float(): number {
    return this.random();
  }

  /** An integer in [lo, hi] (both included). */
  int(lo: number, hi: number): number {
    return lo + randomInt(this.random, hi - lo + 1);
  }

  chance(p: number): boolean {
    return this.random() < p;
  }

  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[randomInt(this.random, items.length)]!;
  }

  /** A shuffled copy (Fisher-Yates). */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = randomInt(this.random, i + 1);
      [out[i], out[j]] = [out[j]!, out[i]!];
    }
    return out;
  }

  /** `k` distinct items, in random order. */
  sample<T>(items: readonly T[], k: number): T[] {
    if (k > items.length) throw new Error(`sample of ${k} from ${items.length} items`);
    return this.shuffle(items).slice(0, k);
  }

  /** A child stream: draws made through it do not shift this one's later draws. */
  fork(label: string): Rng {
    return Rng.of(label, this.int(0, 2 ** 31 - 1));
  }
}
