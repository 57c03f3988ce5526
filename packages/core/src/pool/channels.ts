import type { ChannelConfig, ChannelConfigPatch } from '../domain/index.js';
import type { PoolTx, Rule } from '../store/tx.js';
import { adoptGroupSize, resettleFullGroups } from './groups.js';

/**
 * Patches a channel's settings (its row locked: concurrent patches apply one after the other).
 * A size given now sizes the groups that had none; a change of required signals may make groups
 * that waited for them ready (a reward pin likewise).
 */
export function* configureChannel(
  tx: PoolTx,
  channel: string,
  patch: ChannelConfigPatch,
  now: number,
): Rule<ChannelConfig> {
  const current = yield* tx.lockChannel(channel, now);
  const config: ChannelConfig = {
    ...current,
    ...patch,
    curation: { ...current.curation, ...patch.curation },
    episode: { ...current.episode, ...patch.episode },
    forced_sampling: { ...current.forced_sampling, ...patch.forced_sampling },
    schedule: { ...current.schedule, ...patch.schedule },
  };
  yield* tx.saveChannelConfig(channel, config, now);
  tx.emit('channel_configured', channel, { config }, now);
  if (patch.n_rollouts != null) yield* adoptGroupSize(tx, channel, patch.n_rollouts, config, now);
  if (patch.required_signals !== undefined || patch.reward_pin !== undefined)
    yield* resettleFullGroups(tx, channel, config, now);
  return config;
}

export function* setPolicyVersion(tx: PoolTx, version: number, now: number): Rule<void> {
  const previous = yield* tx.setPolicyVersion(version);
  tx.emit('policy_version_changed', null, { previous, version }, now);
}
