import { type ChannelConfig, ConflictError, type DropReason, NotFoundError } from '../domain/index.js';
import type { GroupRow } from '../store/rows.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { settlePromptOf } from './schedule.js';
import type { GuidanceRelease } from './types.js';

// A group's life: collecting -> ready (or pending_guidance) -> leased -> consumed, or dropped.

/** Moves a collecting group on once all its expected rollouts have finished. */
export function* settleGroup(tx: PoolTx, row: GroupRow, config: ChannelConfig, now: number): Rule<void> {
  if (row.state !== 'collecting' || row.expected === null || row.n_finished < row.expected) return;
  if (row.n_complete === 0) return yield* dropGroup(tx, row, 'no_complete_trajectories', now);
  // Every rollout is in; the group waits (still collecting) for its required signals.
  const names = config.required_signals;
  if (names.length > 0 && (yield* tx.completeWithoutSignals(row, names)) > 0) return;
  // Under a reward pin it waits for the pinned score too (docs/datapool.md#pinned-serving).
  const pin = config.reward_pin;
  if (pin !== null && (yield* tx.evidence.completeWithoutPinned(row, pin)) > 0) return;
  yield* markReady(tx, row, row.n_complete < row.expected, config, now);
}

/** Queues a group for leasing, unless a guidance hold finds it hard (then it waits for its replacement). */
export function* markReady(
  tx: PoolTx,
  row: GroupRow,
  partial: boolean,
  config: ChannelConfig,
  now: number,
): Rule<void> {
  if (yield* heldHard(tx, row)) return yield* markPending(tx, row, partial, now);
  if (row.state === 'collecting') yield* settlePromptOf(tx, row);
  yield* tx.updateGroup(row, {
    state: 'ready',
    ready_at: now,
    ready_seq: yield* tx.nextReadySeq(),
    partial: partial ? 1 : 0,
  });
  tx.log.count(row.channel, 'groups_ready');
  if (partial) tx.log.count(row.channel, 'groups_partial');
  tx.emit('group_ready', row.channel, { group_id: row.id, partial, n_complete: row.n_complete }, now);
  if (config.max_queue_size !== null) yield* enforceQueueLimit(tx, row.channel, config.max_queue_size, now);
}

/** Whether a held group is hard: no complete rollout it counts scored above the hold's threshold. */
function* heldHard(tx: PoolTx, row: GroupRow): Rule<boolean> {
  if (row.guidance_hold === null || row.guidance_hold === undefined) return false;
  return (yield* tx.completeAbove(row, row.guidance_hold)) === 0;
}

/** A held group waits for its guided replacement instead of becoming ready (never leased there). */
function* markPending(tx: PoolTx, row: GroupRow, partial: boolean, now: number): Rule<void> {
  if (row.state === 'collecting') yield* settlePromptOf(tx, row);
  yield* tx.updateGroup(row, {
    state: 'pending_guidance',
    pending_since: now,
    partial: partial ? 1 : 0,
    ready_seq: null,
  });
  tx.log.count(row.channel, 'groups_pending_guidance');
  tx.emit('group_pending_guidance', row.channel, { group_id: row.id, n_complete: row.n_complete }, now);
}

/** Drops the oldest ready groups past the channel's queue limit. */
function* enforceQueueLimit(tx: PoolTx, channel: string, limit: number, now: number): Rule<void> {
  const n = yield* tx.countReady(channel);
  if (n <= limit) return;
  for (const row of yield* tx.oldestReady(channel, n - limit)) yield* dropGroup(tx, row, 'queue_full', now);
}

export function* dropGroup(tx: PoolTx, row: GroupRow, reason: DropReason, now: number): Rule<void> {
  if (row.state === 'collecting') yield* settlePromptOf(tx, row);
  yield* tx.updateGroup(row, { state: 'dropped', drop_reason: reason, lease_id: null });
  tx.log.count(row.channel, `dropped_${reason}`);
  tx.emit('group_dropped', row.channel, { group_id: row.id, reason }, now);
}

/** Gives groups that were created before their size was known the channel's size. */
export function* adoptGroupSize(
  tx: PoolTx,
  channel: string,
  size: number,
  config: ChannelConfig,
  now: number,
): Rule<void> {
  for (const row of yield* tx.collecting(channel, 'unsized')) {
    yield* tx.updateGroup(row, { expected: size });
    yield* settleGroup(tx, row, config, now);
  }
}

/** Groups held back for signals no longer required (or already in) may be ready now. */
export function* resettleFullGroups(
  tx: PoolTx,
  channel: string,
  config: ChannelConfig,
  now: number,
): Rule<void> {
  for (const row of yield* tx.collecting(channel, 'full')) yield* settleGroup(tx, row, config, now);
}

/** Times out collecting groups: served partial where the channel allows it, else dropped. */
export function* sweepCollecting(tx: PoolTx, now: number): Rule<{ dropped: number; servedPartial: number }> {
  let dropped = 0;
  let servedPartial = 0;
  for (const channel of yield* tx.channelNames()) {
    const config = yield* tx.channelConfig(channel);
    if (config.group_timeout_ms === null) continue;
    for (const row of yield* tx.collectingSince(channel, now - config.group_timeout_ms)) {
      // All rollouts in but not all their signals: never served half-scored.
      if (row.expected !== null && row.n_finished >= row.expected && row.n_complete > 0) {
        yield* dropGroup(tx, row, 'signals_missing', now);
        dropped++;
      } else if (config.incomplete_policy === 'serve_partial' && row.n_complete > 0) {
        yield* markReady(tx, row, true, config, now);
        servedPartial++;
      } else {
        yield* dropGroup(tx, row, 'incomplete_timeout', now);
        dropped++;
      }
    }
  }
  return { dropped, servedPartial };
}

// ---- guidance holds (ActGuide-RL, docs/datapool.md) ---------------------------------------------

/** Keeps a group from being leased until its guided replacement lands (or the hold ends). */
export function* holdForGuidance(tx: PoolTx, channel: string, id: string, now: number): Rule<GroupRow> {
  const row = yield* tx.group(channel, id);
  if (!row) throw new NotFoundError(`group ${id} does not exist in channel ${channel}`);
  if (row.state === 'collecting' || row.state === 'ready') {
    // Held whatever its rewards: the caller already knows it will be replaced.
    yield* tx.updateGroup(row, { guidance_hold: Number.MAX_VALUE });
    if (row.state === 'ready') yield* markPending(tx, row, row.partial === 1, now);
  } else if (row.state === 'pending_guidance') {
    // Held again while the guide works on it: the timeout counts from now (the guide is alive).
    yield* tx.updateGroup(row, { pending_since: now });
  } else {
    throw new ConflictError(`group ${id} is already ${row.state}: it can no longer be held`, 'state');
  }
  return row;
}

/** Ends a group's guidance hold; a group waiting on it goes on to ready, as it would have. */
export function* releaseHold(tx: PoolTx, row: GroupRow, why: GuidanceRelease, now: number): Rule<void> {
  const wasPending = row.state === 'pending_guidance';
  yield* tx.updateGroup(row, { guidance_hold: null, pending_since: null });
  if (!wasPending) return;
  tx.log.count(row.channel, `guidance_released_${why}`);
  tx.emit('group_guidance_released', row.channel, { group_id: row.id, reason: why }, now);
  yield* markReady(tx, row, row.partial === 1, yield* tx.channelConfig(row.channel), now);
}

export function* releaseGuidance(
  tx: PoolTx,
  channel: string,
  id: string,
  why: GuidanceRelease,
  now: number,
): Rule<GroupRow> {
  const row = yield* tx.group(channel, id);
  if (!row) throw new NotFoundError(`group ${id} does not exist in channel ${channel}`);
  if (row.state === 'collecting' || row.state === 'pending_guidance') yield* releaseHold(tx, row, why, now);
  return row;
}

/** Releases groups held in pending_guidance past their channel's guidance_hold_timeout_ms. */
export function* sweepGuidanceHolds(tx: PoolTx, now: number): Rule<number> {
  let released = 0;
  for (const row of yield* tx.pendingGuidance()) {
    const ttl = (yield* tx.channelConfig(row.channel)).guidance_hold_timeout_ms;
    if (ttl === null || Number(row.pending_since ?? now) >= now - ttl) continue;
    yield* releaseHold(tx, row, 'timeout', now);
    released++;
  }
  return released;
}
