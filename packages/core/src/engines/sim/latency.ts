import type { SimResult } from './engine.js';

export interface LatencyModelOptions {
  /** Time to first token, in ms (prefill). */
  ttftMs: number;
  /** Decode speed after the first token. */
  tokensPerSecond: number;
}

/** When each token of a result is ready, in ms after the request arrived. The core never sleeps. */
export interface LatencyModel extends LatencyModelOptions {
  /** `offsets[i]` is when token i is ready: ttft for the first, then one per 1/tokensPerSecond. */
  schedule(result: Pick<SimResult, 'tokenIds'>): number[];
  /** When the whole completion is ready (ttft for an empty one). */
  totalMs(result: Pick<SimResult, 'tokenIds'>): number;
}

export function latencyModel(options: LatencyModelOptions): LatencyModel {
  const { ttftMs, tokensPerSecond } = options;
  if (!(Number.isFinite(ttftMs) && ttftMs >= 0)) throw new RangeError('ttftMs must be a finite number >= 0');
  if (!(tokensPerSecond > 0)) throw new RangeError('tokensPerSecond must be > 0');
  const perToken = 1000 / tokensPerSecond;
  const schedule = (result: Pick<SimResult, 'tokenIds'>) =>
    result.tokenIds.map((_, i) => ttftMs + i * perToken);
  return {
    ttftMs,
    tokensPerSecond,
    schedule,
    totalMs: (result) =>
      result.tokenIds.length === 0 ? ttftMs : ttftMs + (result.tokenIds.length - 1) * perToken,
  };
}

/** No delay at all: what unit tests and benchmarks of the gateway's own overhead use. */
export const instantLatency: LatencyModel = latencyModel({
  ttftMs: 0,
  tokensPerSecond: Number.POSITIVE_INFINITY,
});
