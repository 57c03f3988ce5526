import { BusyError, type ChannelConfig } from '../domain/index.js';
import type { PoolTx, Rule } from '../store/tx.js';

/*
 * Admission control (AReaL's staleness bound η): a trainer consuming `batch_groups` groups per
 * policy version trains a group at staleness ⌊Q / batch_groups⌋, where Q counts the groups ahead of
 * it: unconsumed ones, and those the trainer took under the version in force (its update in
 * progress; they stop counting when the version it publishes is set). So a channel with
 * `max_staleness` η and `batch_groups` B admits a new group only while Q < (η + 1) × B: rollouts
 * wait instead of being generated only to be dropped as stale. Later rollouts of an admitted group
 * always join it.
 */

/** The most groups a channel over-samples by: a drop rate counts up to this (4× the budget at most). */
export const MAX_DROP_RATE = 0.75;

/**
 * The most unconsumed groups the channel admits, or null when admission is off. Where curation drops
 * groups at lease time (zero variance, too few left), the budget grows by 1 / (1 − drop rate): the
 * groups expected to be dropped are generated ahead, so a lease is served full without the trainer
 * waiting on them (DAPO's dynamic sampling, as backfill).
 */
export function admissionLimit(
  config: Pick<ChannelConfig, 'max_staleness' | 'batch_groups'>,
  dropRate = 0,
): number | null {
  if (config.max_staleness === null || config.batch_groups === null) return null;
  const budget = (config.max_staleness + 1) * config.batch_groups;
  return Math.ceil(budget / (1 - Math.min(Math.max(dropRate, 0), MAX_DROP_RATE)) - 1e-9);
}

/**
 * The channel's rate of groups curation dropped at lease time, from its counters: dropped / (dropped
 * + kept + 2), so the first drops move it gently (two kept groups are assumed before any is seen).
 */
export function* curationDropRate(tx: PoolTx, channel: string): Rule<number> {
  const c = yield* tx.prompts.counters(channel, ['curation_dropped_groups', 'curation_kept_groups']);
  const dropped = c.curation_dropped_groups ?? 0;
  return dropped / (dropped + (c.curation_kept_groups ?? 0) + 2);
}

/** Refuses (a retryable 429) a new group of `channel` when its staleness budget is spent. */
export function* admitGroup(tx: PoolTx, channel: string, now: number): Rule<void> {
  const config = yield* tx.channelConfig(channel);
  if (admissionLimit(config) === null) return;
  // Held until commit: concurrent first rollouts of new groups are counted one after another.
  yield* tx.lockChannel(channel, now);
  const limit = admissionLimit(config, yield* curationDropRate(tx, channel))!;
  const ahead = yield* tx.groupsAhead(channel, yield* tx.policyVersion());
  if (ahead < limit) return;
  tx.log.count(channel, 'admission_waits');
  throw new BusyError(
    `channel ${channel}: ${ahead} groups are ahead of a new one (unconsumed, or in the update in progress), its staleness budget ((max_staleness + 1) × batch_groups, over-sampled for the groups curation drops: ${limit}); start this group once the trainer consumes one and publishes its version`,
    'staleness_budget',
  );
}
