import { type ScheduleConfig, ValidationError } from '../domain/index.js';
import type { PromptRow } from '../store/prompts.js';
import type { GroupRow } from '../store/rows.js';
import type { PoolTx, Rule } from '../store/tx.js';
import type { NextPrompt, PromptPool, PromptView } from './types.js';

/*
 * The prompt scheduler (docs/datapool.md#prompt-scheduler): producers ask the pool what to roll out
 * next instead of walking a list. A channel holds its prompts (task ids, registered by API or from a
 * tasks folder) and each one's history; a prompt handed out is in flight until its group settles
 * (or its claim times out), and is not handed out again meanwhile. The channel's schedule policy
 * picks among the free ones; the channel's row is locked, so concurrent producers on either store
 * never get the same prompt.
 */

export const MAX_PROMPTS_PER_CALL = 256;

/** Registers prompts (new ones after the channel's last; known ones keep their place and history). */
export function* registerPrompts(
  tx: PoolTx,
  channel: string,
  prompts: readonly { taskId: string; taskSet: string }[],
  now: number,
): Rule<{ added: number; total: number }> {
  yield* tx.lockChannel(channel, now);
  const added = yield* tx.prompts.addPrompts(channel, prompts, now);
  if (added > 0) tx.emit('prompts_registered', channel, { added }, now);
  return { added, total: (yield* tx.prompts.prompts(channel)).length };
}

/**
 * Hands out up to `count` free prompts under the channel's policy, each with its number of rollouts;
 * with `taskSet`, only prompts of that set (a producer that runs one set's tasks).
 */
export function* nextPrompts(
  tx: PoolTx,
  channel: string,
  count: number,
  now: number,
  taskSet: string | null = null,
  random: () => number = Math.random,
): Rule<NextPrompt[]> {
  if (!Number.isInteger(count) || count < 1 || count > MAX_PROMPTS_PER_CALL)
    throw new ValidationError(`count: must be an integer from 1 to ${MAX_PROMPTS_PER_CALL}`, 'count');
  const config = yield* tx.lockChannel(channel, now);
  const { schedule } = config;
  const version = yield* tx.policyVersion();
  const free = (yield* tx.prompts.freePrompts(channel, now)).filter(
    (row) => taskSet === null || row.task_set === taskSet,
  );
  const picked =
    schedule.mixture === null
      ? pick(schedule, free, count, version, random)
      : pickMixed(schedule, schedule.mixture, free, count, version, random);
  const nRollouts = schedule.n_rollouts ?? config.n_rollouts ?? 1;
  for (const { row } of picked)
    yield* tx.prompts.claimPrompt(channel, row.task_id, now + schedule.claim_timeout_ms, now);
  if (picked.length > 0) {
    tx.log.count(channel, 'prompts_handed', picked.length);
    tx.emit(
      'prompts_handed',
      channel,
      { count: picked.length, task_ids: picked.map((p) => p.row.task_id) },
      now,
    );
  }
  return picked.map(({ row, pool }) => ({ taskId: row.task_id, taskSet: row.task_set, nRollouts, pool }));
}

/** Where a prompt stands under a schedule: its difficulty pool at this policy version. */
export function poolOf(schedule: ScheduleConfig, row: PromptRow, version: number): PromptPool {
  if (row.groups === 0 || row.last_pass_rate === null) return 'unseen';
  const rate = row.last_pass_rate;
  const retired = rate >= schedule.easy_at_least ? 'easy' : rate <= schedule.hard_at_most ? 'hard' : null;
  if (retired === null) return 'learnable';
  return version >= (row.last_version ?? 0) + schedule.retest_every ? 'retest' : retired;
}

interface Picked {
  row: PromptRow;
  pool: PromptPool;
}

function pick(
  schedule: ScheduleConfig,
  free: PromptRow[],
  count: number,
  version: number,
  random: () => number,
): Picked[] {
  const pooled = free.map((row) => ({ row, pool: poolOf(schedule, row, version) }));
  if (schedule.policy === 'in_order') {
    // A round at a time: the least handed first, in registration order.
    return pooled
      .sort((a, b) => a.row.handed - b.row.handed || a.row.position - b.row.position)
      .slice(0, count);
  }
  if (schedule.policy === 'uniform') return draw(pooled, count, random);
  return pickByDifficulty(schedule, pooled, count, random);
}

/**
 * A mixture: each pick draws a task set by its weight among those with a prompt the policy would
 * hand out, then takes that prompt (Atropos' weighted environments).
 */
function pickMixed(
  schedule: ScheduleConfig,
  mixture: NonNullable<ScheduleConfig['mixture']>,
  free: PromptRow[],
  count: number,
  version: number,
  random: () => number,
): Picked[] {
  const bySet = new Map<string, PromptRow[]>();
  for (const row of free)
    if ((mixture[row.task_set]?.weight ?? 0) > 0)
      bySet.set(row.task_set, [...(bySet.get(row.task_set) ?? []), row]);
  const out: Picked[] = [];
  while (out.length < count) {
    const options = [...bySet].flatMap(([set, rows]) => {
      const [next] = pick(schedule, rows, 1, version, random);
      return next ? [{ set, next, weight: mixture[set]!.weight }] : [];
    });
    if (options.length === 0) break;
    let r = random() * options.reduce((sum, o) => sum + o.weight, 0);
    let chosen = options.at(-1)!;
    for (const option of options) {
      r -= option.weight;
      if (r < 0) {
        chosen = option;
        break;
      }
    }
    out.push(chosen.next);
    bySet.set(
      chosen.set,
      bySet.get(chosen.set)!.filter((row) => row !== chosen.next.row),
    );
  }
  return out;
}

/** `count` of `items` drawn uniformly without replacement. */
function draw<T>(items: T[], count: number, random: () => number): T[] {
  const pool = [...items];
  const out: T[] = [];
  while (out.length < count && pool.length > 0)
    out.push(pool.splice(Math.floor(random() * pool.length), 1)[0]!);
  return out;
}

/**
 * prime-rl's difficulty pools: a pool is drawn by its weight among those with a free prompt, then
 * its prompt that waited longest (least recently handed, then registration order). Retired prompts
 * (too easy, too hard) are not drawn until a re-test is due.
 */
function pickByDifficulty(schedule: ScheduleConfig, pooled: Picked[], count: number, random: () => number) {
  const byPool = new Map<PromptPool, Picked[]>();
  for (const p of pooled) {
    if (p.pool === 'easy' || p.pool === 'hard') continue;
    byPool.set(p.pool, [...(byPool.get(p.pool) ?? []), p]);
  }
  for (const list of byPool.values())
    list.sort(
      (a, b) =>
        (a.row.last_handed_at ?? -1) - (b.row.last_handed_at ?? -1) || a.row.position - b.row.position,
    );
  const out: Picked[] = [];
  while (out.length < count) {
    const open = [...byPool].filter(
      ([pool, list]) => list.length > 0 && schedule.weights[weightOf(pool)] > 0,
    );
    if (open.length === 0) break;
    const total = open.reduce((sum, [pool]) => sum + schedule.weights[weightOf(pool)], 0);
    // The pool whose stretch of [0, total) the draw falls in.
    let r = random() * total;
    let chosen = open.at(-1)![1];
    for (const [pool, list] of open) {
      r -= schedule.weights[weightOf(pool)];
      if (r < 0) {
        chosen = list;
        break;
      }
    }
    out.push(chosen.shift()!);
  }
  return out;
}

const weightOf = (pool: PromptPool): keyof ScheduleConfig['weights'] =>
  pool === 'unseen' ? 'unseen' : pool === 'retest' ? 'retest' : 'learnable';

/**
 * A group stopped collecting (ready, held for guidance, or dropped): its prompt is free again, and what
 * its scored rollouts say (pass rate, mean, spread) becomes the prompt's latest history.
 */
export function* settlePromptOf(tx: PoolTx, group: GroupRow): Rule<void> {
  if (!(yield* tx.prompts.hasPrompts(group.channel))) return;
  const taskId = yield* tx.prompts.taskOfGroup(group.channel, group.id);
  if (taskId === null) return;
  // The group's complete rollouts that count, with a reward.
  const rewards = (yield* tx.groupMembers(group)).flatMap((m) => (m.reward === null ? [] : [m.reward]));
  if (rewards.length === 0) return yield* tx.prompts.settlePrompt(group.channel, taskId, null);
  const config = yield* tx.channelConfig(group.channel);
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) ** 2, 0) / rewards.length);
  const passes = rewards.filter((r) => r >= config.schedule.pass_threshold).length;
  const version = yield* tx.policyVersion();
  yield* tx.prompts.settlePrompt(group.channel, taskId, { n: rewards.length, passes, mean, std, version });
}

/** The channel's prompts with their history and pool, in registration order. */
export function* listPrompts(tx: PoolTx, channel: string, now: number): Rule<PromptView[]> {
  const { schedule } = yield* tx.channelConfig(channel);
  const version = yield* tx.policyVersion();
  return (yield* tx.prompts.prompts(channel)).map((row) => ({
    taskId: row.task_id,
    taskSet: row.task_set,
    position: row.position,
    pool: poolOf(schedule, row, version),
    inFlight: row.claimed_until !== null && row.claimed_until > now,
    handed: row.handed,
    groups: row.groups,
    attempts: row.attempts,
    passes: row.passes,
    lastPassRate: row.last_pass_rate,
    lastMean: row.last_mean,
    lastStd: row.last_std,
    lastVersion: row.last_version,
  }));
}
