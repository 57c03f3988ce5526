import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { clipMiddle, shareRoom } from './truncate.js';

describe('clipMiddle', () => {
  it('keeps short texts and cuts long ones to the limit, head and tail kept', () => {
    expect(clipMiddle('short', 100)).toEqual({ text: 'short', truncated: false });
    fc.assert(
      fc.property(fc.string({ maxLength: 5000 }), fc.integer({ min: 100, max: 3000 }), (text, max) => {
        const clipped = clipMiddle(text, max);
        expect(clipped.text.length).toBeLessThanOrEqual(max);
        expect(clipped.truncated).toBe(text.length > max);
        if (clipped.truncated) {
          const [head] = clipped.text.split('\n[... ');
          expect(text.startsWith(head!)).toBe(true);
        }
      }),
    );
  });

  it('shares room between two texts without waste', () => {
    expect(shareRoom(10, 10, 100)).toEqual([10, 10]);
    expect(shareRoom(10, 500, 100)).toEqual([10, 90]);
    expect(shareRoom(500, 500, 100)).toEqual([50, 50]);
  });
});
