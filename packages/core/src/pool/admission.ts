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

/** The most unconsumed groups the channel admits, or null when admission is off. */
export function admissionLimit(config: Pick<ChannelConfig, 'max_staleness' | 'batch_groups'>): number | null {
  if (config.max_staleness === null || config.batch_groups === null) return null;
  return (config.max_staleness + 1) * config.batch_groups;
}

/** Refuses (a retryable 429) a new group of `channel` when its staleness budget is spent. */
export function* admitGroup(tx: PoolTx, channel: string, now: number): Rule<void> {
  const limit = admissionLimit(yield* tx.channelConfig(channel));
  if (limit === null) return;
  // Held until commit: concurrent first rollouts of new groups are counted one after another.
  yield* tx.lockChannel(channel, now);
  const ahead = yield* tx.groupsAhead(channel, yield* tx.policyVersion());
  if (ahead < limit) return;
  tx.log.count(channel, 'admission_waits');
  throw new BusyError(
    `channel ${channel}: ${ahead} groups are ahead of a new one (unconsumed, or in the update in progress), its staleness budget ((max_staleness + 1) × batch_groups = ${limit}); start this group once the trainer consumes one and publishes its version`,
    'staleness_budget',
  );
}
