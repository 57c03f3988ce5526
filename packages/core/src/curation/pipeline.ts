import { type ChannelCuration, DEFAULT_CHANNEL_CONFIG, type ExclusionReason } from '../domain/channel.js';

// Serve-time curation: trajectory filters, then group filters, applied by the store inside the lease
// transaction. docs/datapool.md#curation-at-lease-time

export type GroupDropReason = 'zero_variance' | 'too_few_after_curation';

export interface CandidateStep {
  responseIds: readonly number[];
  finishReason: string | null;
}

export interface CandidateTrajectory {
  id: string;
  reward: number | null;
  /** Needed only when a trajectory filter is on (see `needsSteps`). */
  steps?: readonly CandidateStep[];
}

export interface Exclusion {
  id: string;
  reason: ExclusionReason;
  detail?: Record<string, unknown>;
}

export interface CurationDecision {
  /** Ids of the trajectories served, in the group's order. */
  keep: string[];
  excluded: Exclusion[];
  /** Set when the whole group is dropped. */
  drop: GroupDropReason | null;
}

export const DEFAULT_CURATION: ChannelCuration = DEFAULT_CHANNEL_CONFIG.curation;

/** Curation that changes nothing: the store then skips the work. */
export function isNoop(c: ChannelCuration): boolean {
  return (
    c.zero_variance === 'keep' &&
    c.truncated === 'keep' &&
    c.repetition === null &&
    c.duplicates === 'keep' &&
    c.min_trajectories <= 1
  );
}

/** Trajectory filters read the steps; group filters need only rewards. */
export function needsSteps(c: ChannelCuration): boolean {
  return c.truncated !== 'keep' || c.repetition !== null || c.duplicates !== 'keep';
}

/**
 * The share of a sequence's n-grams that repeat an earlier n-gram of it: 0 for text that never
 * repeats itself, near 1 for a model stuck in a loop. Sequences shorter than 2n count as 0 (too short
 * to call degenerate).
 */
export function repetitionFraction(ids: readonly number[], n: number): number {
  const total = ids.length - n + 1;
  if (ids.length < 2 * n || total <= 0) return 0;
  // n-grams keyed by a hash (two 26-bit lanes), each hash holding the starts seen with it; equal
  // hashes are compared token by token, so the count is exact. No strings: this runs per lease.
  const seen = new Map<number, number[]>();
  const same = (a: number, b: number) => {
    for (let j = 0; j < n; j++) if (ids[a + j] !== ids[b + j]) return false;
    return true;
  };
  let repeats = 0;
  for (let i = 0; i < total; i++) {
    let h1 = 0x1234567;
    let h2 = 0x7654321;
    for (let j = 0; j < n; j++) {
      const v = ids[i + j]!;
      h1 = Math.imul(h1 ^ v, 0x2c1b3c6d) >>> 6;
      h2 = Math.imul(h2 ^ (v >>> 13) ^ (v << 7), 0x297a2d39) >>> 6;
    }
    const key = h1 * 0x4000000 + h2;
    const starts = seen.get(key);
    if (starts === undefined) seen.set(key, [i]);
    else if (starts.some((s) => same(s, i))) repeats++;
    else starts.push(i);
  }
  return repeats / total;
}

/** Two trajectories are duplicates when every step's response ids are equal. */
function responseKey(steps: readonly CandidateStep[]): string {
  // Each step as its length and its ids' bytes, one character per byte: exact, and no join of numbers.
  let key = '';
  for (const s of steps)
    key += `${s.responseIds.length}:${Buffer.from(Uint32Array.from(s.responseIds).buffer).toString('latin1')}`;
  return key;
}

export function curateGroup(members: readonly CandidateTrajectory[], c: ChannelCuration): CurationDecision {
  const excluded: Exclusion[] = [];
  const kept: CandidateTrajectory[] = [];
  const seen = new Map<string, string>();
  for (const t of members) {
    const steps = t.steps ?? [];
    if (c.truncated === 'exclude') {
      const at = steps.findIndex((s) => s.finishReason === 'length');
      if (at >= 0) {
        excluded.push({ id: t.id, reason: 'truncated', detail: { step: at } });
        continue;
      }
    }
    if (c.repetition) {
      const { ngram, max_fraction } = c.repetition;
      let worst = { step: -1, fraction: 0 };
      steps.forEach((s, i) => {
        const fraction = repetitionFraction(s.responseIds, ngram);
        if (fraction > worst.fraction) worst = { step: i, fraction };
      });
      if (worst.fraction > max_fraction) {
        excluded.push({
          id: t.id,
          reason: 'repetition',
          detail: { step: worst.step, fraction: Math.round(worst.fraction * 1000) / 1000, ngram },
        });
        continue;
      }
    }
    if (c.duplicates === 'exclude' && steps.length > 0) {
      const key = responseKey(steps);
      const first = seen.get(key);
      if (first !== undefined) {
        excluded.push({ id: t.id, reason: 'duplicate', detail: { duplicate_of: first } });
        continue;
      }
      seen.set(key, t.id);
    }
    kept.push(t);
  }
  const keep = kept.map((t) => t.id);
  if (kept.length < c.min_trajectories || (kept.length === 0 && members.length > 0))
    return { keep, excluded, drop: 'too_few_after_curation' };
  if (c.zero_variance === 'drop' && kept.length > 0 && kept.every((t) => t.reward === kept[0]!.reward))
    return { keep, excluded, drop: 'zero_variance' };
  return { keep, excluded, drop: null };
}
