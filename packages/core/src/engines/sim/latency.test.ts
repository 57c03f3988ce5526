import { describe, expect, it } from 'vitest';
import { instantLatency, latencyModel } from './latency.js';

describe('latencyModel', () => {
  it('schedules the first token at ttft, then one every 1/tokensPerSecond', () => {
    const m = latencyModel({ ttftMs: 200, tokensPerSecond: 50 });
    expect(m.schedule({ tokenIds: [1, 2, 3] })).toEqual([200, 220, 240]);
    expect(m.totalMs({ tokenIds: [1, 2, 3] })).toBe(240);
    expect(m.totalMs({ tokenIds: [] })).toBe(200);
  });

  it('instant latency is all zeros; bad settings are refused', () => {
    expect(instantLatency.schedule({ tokenIds: [1, 2] })).toEqual([0, 0]);
    expect(() => latencyModel({ ttftMs: -1, tokensPerSecond: 1 })).toThrow(RangeError);
    expect(() => latencyModel({ ttftMs: 0, tokensPerSecond: 0 })).toThrow(RangeError);
  });
});
