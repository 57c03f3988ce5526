import { describe, expect, it } from 'vitest';
import { maskedPrefix, responseLossMask, responseVersions } from './versions.js';

const step = (versionSpans: [number, number][] | null, n = 5, policyVersion = 2) => ({
  responseIds: Array.from({ length: n }, (_, i) => 100 + i),
  versionSpans,
  policyVersion,
});

describe('per-token versions and the partial-rollout mask', () => {
  it('expands spans run by run; no spans: policyVersion throughout', () => {
    expect(
      Array.from(
        responseVersions(
          step([
            [2, 2],
            [3, 2],
            [4, 1],
          ]),
        ),
      ),
    ).toEqual([2, 2, 3, 3, 4]);
    expect(Array.from(responseVersions(step(null, 3, 7)))).toEqual([7, 7, 7]);
    // Spans that fall short of the response (never stored, but not trusted): the last run goes on.
    expect(
      Array.from(
        responseVersions(
          step([
            [2, 1],
            [5, 1],
          ]),
        ),
      ),
    ).toEqual([2, 5, 5, 5, 5]);
  });

  it('"mask" leaves out every run but the last; "train", one run or none leave the step whole', () => {
    const spanned = step([
      [2, 2],
      [3, 2],
      [4, 1],
    ]);
    expect(maskedPrefix(spanned, 'mask')).toBe(4);
    expect(Array.from(responseLossMask(spanned, 'mask')!)).toEqual([0, 0, 0, 0, 1]);
    expect(responseLossMask(spanned, 'train')).toBeNull();
    expect(responseLossMask(step([[2, 5]]), 'mask')).toBeNull();
    expect(responseLossMask(step(null), 'mask')).toBeNull();
    // Spans longer than the response mask at most the whole of it.
    expect(
      maskedPrefix(
        step(
          [
            [1, 9],
            [2, 1],
          ],
          5,
        ),
        'mask',
      ),
    ).toBe(5);
  });
});
