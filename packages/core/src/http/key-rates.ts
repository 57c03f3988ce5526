/*
 * Per-key rates (docs/security.md#what-every-request-may-cost): each configured API key draws its
 * requests, and separately the trajectories it opens, from token buckets; an empty bucket is a 429
 * with Retry-After, answered before the body is read. Without keys (loopback only) every caller is
 * the operator and nothing is limited.
 */

export interface RateLimits {
  /** Requests per second per key, any route (LLM calls included); 0: unlimited. */
  requestsPerSecond: number;
  /** Requests a key may send at once before the rate applies. */
  requestBurst: number;
  /** Trajectories opened (`POST /init_trajectory`) per second per key; 0: unlimited. */
  trajectoriesPerSecond: number;
  /** Trajectories a key may open at once before the rate applies. */
  trajectoryBurst: number;
}

/** The defaults `stepwise serve` starts with: well above a gym run or a rollout fleet, below a flood. */
export const DEFAULT_RATE_LIMITS: RateLimits = {
  requestsPerSecond: 2_000,
  requestBurst: 20_000,
  trajectoriesPerSecond: 20,
  trajectoryBurst: 200,
};

interface Bucket {
  tokens: number;
  at: number;
}

/** One token bucket per key name and kind; `now` in milliseconds (injectable for tests). */
export class KeyRates {
  private readonly buckets = new Map<string, Bucket>();

  constructor(
    private readonly limits: RateLimits,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Takes one request (and, when it opens one, a trajectory) for `key`; the seconds to wait if refused. */
  take(
    key: string,
    opensTrajectory: boolean,
  ): { refused: 'requests' | 'trajectories'; retryAfterS: number } | null {
    const { requestsPerSecond, requestBurst, trajectoriesPerSecond, trajectoryBurst } = this.limits;
    const now = this.now();
    const requests = this.bucket(`r:${key}`, requestsPerSecond, requestBurst, now);
    const trajectories = opensTrajectory
      ? this.bucket(`t:${key}`, trajectoriesPerSecond, trajectoryBurst, now)
      : null;
    if (requests && requests.tokens < 1)
      return { refused: 'requests', retryAfterS: wait(requests, requestsPerSecond) };
    if (trajectories && trajectories.tokens < 1)
      return { refused: 'trajectories', retryAfterS: wait(trajectories, trajectoriesPerSecond) };
    if (requests) requests.tokens -= 1;
    if (trajectories) trajectories.tokens -= 1;
    return null;
  }

  /** The bucket refilled to `now`, or null when this kind is unlimited. */
  private bucket(name: string, rate: number, burst: number, now: number): Bucket | null {
    if (rate <= 0) return null;
    let b = this.buckets.get(name);
    if (!b) {
      b = { tokens: Math.max(1, burst), at: now };
      this.buckets.set(name, b);
    }
    b.tokens = Math.min(Math.max(1, burst), b.tokens + ((now - b.at) / 1000) * rate);
    b.at = now;
    return b;
  }
}

const wait = (b: Bucket, rate: number) => Math.max(1, Math.ceil((1 - b.tokens) / rate));
