import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type ChannelCuration, DEFAULT_CHANNEL_CONFIG } from '../domain/channel.js';
import { type CandidateTrajectory, curateGroup, isNoop, needsSteps, repetitionFraction } from './pipeline.js';

const curation = (over: Partial<ChannelCuration>): ChannelCuration => ({
  ...DEFAULT_CHANNEL_CONFIG.curation,
  ...over,
});
const step = (ids: number[], finishReason: string | null = 'stop') => ({ responseIds: ids, finishReason });
const t = (id: string, reward: number | null, ...steps: ReturnType<typeof step>[]): CandidateTrajectory => ({
  id,
  reward,
  steps,
});

describe('repetitionFraction', () => {
  it('is 0 for a sequence that never repeats an n-gram, and grows as a loop takes over', () => {
    expect(repetitionFraction([1, 2, 3, 4, 5, 6, 7, 8], 2)).toBe(0);
    // 1 2 1 2 1 2 1 2: bigrams 12 21 12 21 12 21 12 -> 5 of 7 repeat an earlier one.
    expect(repetitionFraction([1, 2, 1, 2, 1, 2, 1, 2], 2)).toBeCloseTo(5 / 7);
    expect(repetitionFraction(Array(40).fill(7), 4)).toBeCloseTo(36 / 37);
  });

  it('equals the plain definition (n-grams as strings in a set) on random sequences', () => {
    const plain = (ids: number[], n: number) => {
      const total = ids.length - n + 1;
      if (ids.length < 2 * n || total <= 0) return 0;
      const seen = new Set<string>();
      let repeats = 0;
      for (let i = 0; i < total; i++) {
        const key = ids.slice(i, i + n).join(',');
        if (seen.has(key)) repeats++;
        else seen.add(key);
      }
      return repeats / total;
    };
    fc.assert(
      fc.property(
        fc.array(fc.oneof(fc.integer({ min: 0, max: 3 }), fc.integer({ min: 0, max: 2 ** 32 - 1 })), {
          maxLength: 300,
        }),
        fc.integer({ min: 1, max: 8 }),
        (ids, n) => repetitionFraction(ids, n) === plain(ids, n),
      ),
      { numRuns: 2000 },
    );
  });

  it('calls nothing shorter than two n-grams degenerate', () => {
    expect(repetitionFraction([5, 5, 5], 2)).toBe(0);
    expect(repetitionFraction([], 1)).toBe(0);
  });
});

describe('curateGroup', () => {
  it('the default changes nothing', () => {
    const c = DEFAULT_CHANNEL_CONFIG.curation;
    expect(isNoop(c)).toBe(true);
    expect(needsSteps(c)).toBe(false);
    const d = curateGroup([t('a', 1), t('b', 1)], c);
    expect(d).toEqual({ keep: ['a', 'b'], excluded: [], drop: null });
  });

  it('drops a zero-variance group, and keeps one whose rewards differ', () => {
    const c = curation({ zero_variance: 'drop' });
    expect(curateGroup([t('a', 1), t('b', 1), t('c', 1)], c).drop).toBe('zero_variance');
    expect(curateGroup([t('a', 0), t('b', 0)], c).drop).toBe('zero_variance');
    expect(curateGroup([t('a', 1), t('b', 0)], c)).toEqual({ keep: ['a', 'b'], excluded: [], drop: null });
  });

  it('excludes truncated trajectories, then judges variance over what is left', () => {
    const c = curation({ truncated: 'exclude', zero_variance: 'drop' });
    const members = [t('a', 1, step([1]), step([2], 'length')), t('b', 0, step([3])), t('c', 0, step([4]))];
    const d = curateGroup(members, c);
    expect(d.excluded).toEqual([{ id: 'a', reason: 'truncated', detail: { step: 1 } }]);
    // Without a, the rewards left are 0 and 0: no signal.
    expect(d.drop).toBe('zero_variance');
  });

  it('excludes degenerate output and exact duplicates, keeping the first of equal trajectories', () => {
    const c = curation({ repetition: { ngram: 2, max_fraction: 0.5 }, duplicates: 'exclude' });
    const loop = [1, 2, 1, 2, 1, 2, 1, 2, 1, 2];
    const d = curateGroup(
      [
        t('a', 1, step([5, 6, 7])),
        t('b', 0, step(loop)),
        t('c', 0, step([5, 6, 7])),
        t('d', 0, step([8, 9])),
      ],
      c,
    );
    expect(d.keep).toEqual(['a', 'd']);
    expect(d.excluded).toEqual([
      { id: 'b', reason: 'repetition', detail: { step: 0, fraction: 0.778, ngram: 2 } },
      { id: 'c', reason: 'duplicate', detail: { duplicate_of: 'a' } },
    ]);
    expect(d.drop).toBeNull();
  });

  it('drops a group left with fewer than min_trajectories', () => {
    const c = curation({ truncated: 'exclude', min_trajectories: 2 });
    const d = curateGroup([t('a', 1, step([1], 'length')), t('b', 0, step([2]))], c);
    expect(d).toMatchObject({ keep: ['b'], drop: 'too_few_after_curation' });
    // Every member excluded: dropped even with min_trajectories 1.
    const all = curateGroup([t('a', 1, step([1], 'length'))], curation({ truncated: 'exclude' }));
    expect(all.drop).toBe('too_few_after_curation');
  });
});
