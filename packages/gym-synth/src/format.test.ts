import { spawnSync } from 'node:child_process';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  addDays,
  cents,
  csvCell,
  inOrderRegex,
  lineRegex,
  pyFixed,
  slugify,
  toCsv,
  weekday,
} from './format.js';
import { Rng } from './rng.js';

/** Python's f"{x:.{d}f}" for many values at once (one interpreter). */
function pythonFixed(pairs: ReadonlyArray<[number, number]>): string[] {
  const script = 'import json, sys\nfor x, d in json.load(sys.stdin):\n    print(f"{x:.{d}f}")';
  const run = spawnSync('python3', ['-c', script], { input: JSON.stringify(pairs), encoding: 'utf8' });
  if (run.status !== 0) throw new Error(run.stderr);
  return run.stdout.trim().split('\n');
}

describe('pyFixed', () => {
  it('rounds exact ties to even like Python (toFixed does not)', () => {
    expect(pyFixed(0.125, 2)).toBe('0.12');
    expect((0.125).toFixed(2)).toBe('0.13');
    expect(pyFixed(87.25, 1)).toBe('87.2');
    expect(pyFixed(2.675, 2)).toBe('2.67'); // 2.675 is 2.67499999... in binary
    expect(pyFixed(-1.5, 0)).toBe('-2');
    expect(pyFixed(-0.001, 2)).toBe('-0.00');
    expect(pyFixed(1234.5, 0)).toBe('1234');
  });

  it('agrees with Python on random values', () => {
    const pairs = fc
      .sample(
        fc.tuple(
          fc.oneof(
            fc.double({ min: -1e6, max: 1e6, noNaN: true }),
            fc.integer({ min: -100_000, max: 100_000 }).map((k) => k / 8),
            fc.integer({ min: -100_000, max: 100_000 }).map((k) => k / 1000),
          ),
          fc.integer({ min: 0, max: 4 }),
        ),
        { numRuns: 3000, seed: 42 },
        // JSON has no -0: Python would be asked about +0.
      )
      .map(([x, d]): [number, number] => [Object.is(x, -0) ? 0 : x, d]);
    const expected = pythonFixed(pairs);
    pairs.forEach(([x, d], i) => {
      expect(pyFixed(x, d)).toBe(expected[i]);
    });
  });
});

describe('text helpers', () => {
  it('formats cents and quotes CSV cells only when needed', () => {
    expect(cents(1234)).toBe('12.34');
    expect(cents(-5)).toBe('-0.05');
    expect(csvCell('a,b')).toBe('"a,b"');
    expect(csvCell('say "hi"')).toBe('"say ""hi"""');
    expect(toCsv(['a', 'b'], [[1, 'x']])).toBe('a,b\n1,x\n');
  });

  it('slugifies as the reference scripts do', () => {
    expect(slugify('  Spring Sale! ')).toBe('spring-sale');
    expect(slugify('Crumb & Co.')).toBe('crumb-co');
  });

  it('computes dates and weekdays in UTC', () => {
    expect(addDays('2024-02-28', 1)).toBe('2024-02-29');
    expect(addDays('2024-03-01', -1)).toBe('2024-02-29');
    expect(weekday('2024-06-10')).toBe(0); // a Monday
  });

  it('builds regexes that match whole lines and ordered parts only', () => {
    const line = new RegExp(lineRegex('a.b 3'));
    expect(line.test('x\na.b 3\ny')).toBe(true);
    expect(line.test('xa.b 3')).toBe(false);
    expect(line.test('a-b 3')).toBe(false);
    const order = new RegExp(inOrderRegex(['## B', '## A']));
    expect(order.test('## B\n..\n## A')).toBe(true);
    expect(order.test('## A\n## B')).toBe(false);
  });
});

describe('Rng', () => {
  it('is deterministic per seed and stays in range', () => {
    fc.assert(
      fc.property(
        fc.integer(),
        fc.integer({ min: -50, max: 50 }),
        fc.integer({ min: 0, max: 50 }),
        (seed, lo, span) => {
          const a = Rng.of('t', seed);
          const b = Rng.of('t', seed);
          for (let i = 0; i < 20; i++) {
            const x = a.int(lo, lo + span);
            expect(x).toBe(b.int(lo, lo + span));
            expect(x).toBeGreaterThanOrEqual(lo);
            expect(x).toBeLessThanOrEqual(lo + span);
          }
        },
      ),
    );
  });

  it('shuffles into a permutation and samples distinct items', () => {
    const rng = Rng.of('perm', 1);
    const items = Array.from({ length: 30 }, (_, i) => i);
    expect([...rng.shuffle(items)].sort((x, y) => x - y)).toEqual(items);
    const sample = rng.sample(items, 10);
    expect(new Set(sample).size).toBe(10);
    expect(() => rng.sample(items, 31)).toThrow();
  });
});
