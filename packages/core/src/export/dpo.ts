import type { JsonObject, Trajectory } from '../domain/index.js';
import type { ExportContext } from './context.js';
import { type Conversation, firstAssistantIndex, type Message } from './conversation.js';
import { trainingConversation } from './sft.js';
import type { FileSink } from './sink.js';

/**
 * One line of `dpo.jsonl`: TRL's conversational preference shape (`prompt`, `chosen`, `rejected`
 * as message lists) with the rewards and where the pair came from.
 */
export interface DpoLine {
  /** The messages before the first assistant turn (shared by both rollouts). */
  prompt: Message[];
  /** The best rollout's turns from its first assistant message on. */
  chosen: Message[];
  rejected: Message[];
  chosen_reward: number;
  rejected_reward: number;
  group_id: string;
  channel: string;
  chosen_trajectory_uid: string;
  rejected_trajectory_uid: string;
  tools: JsonObject[];
}

/**
 * Preference pairs from prompt groups: within each group (of the trajectories matching the filters),
 * the best rollout by reward against the worst, when their gap is > 0 and at least `minMargin`.
 */
export async function writeDpo(ctx: ExportContext, sink: FileSink, minMargin: number): Promise<void> {
  for await (const trajectory of ctx.trajectories()) {
    // A group is paired once, when the walk reaches its oldest matching trajectory.
    const first = await ctx.store.scanTrajectories({
      ...ctx.query,
      channel: trajectory.channel,
      groupId: trajectory.groupId,
      after: null,
      limit: 1,
    });
    if (first.items[0]?.id === trajectory.id) {
      const line = await pairGroup(ctx, trajectory, minMargin);
      if (line) sink.writeLine(line);
    }
    ctx.onTrajectory();
  }
}

async function pairGroup(ctx: ExportContext, first: Trajectory, minMargin: number): Promise<DpoLine | null> {
  ctx.note('groups');
  const members: Trajectory[] = [];
  for await (const m of ctx.trajectories({ channel: first.channel, groupId: first.groupId })) {
    if (m.reward === null) ctx.skip('no_reward');
    else members.push(m);
  }
  if (members.length < 2) {
    ctx.skip('group_too_small');
    return null;
  }
  // Best first; ties keep storage order, so the same store always gives the same pair.
  const ranked = members
    .map((m, i) => ({ m, i }))
    .sort((a, b) => b.m.reward! - a.m.reward! || a.i - b.i)
    .map((r) => r.m);
  const conversation = async (m: Trajectory): Promise<Conversation | null> => {
    const c = await trainingConversation(ctx, m);
    if (typeof c === 'string') {
      ctx.skip(c);
      return null;
    }
    return c;
  };
  let best: { t: Trajectory; c: Conversation } | null = null;
  let b = 0;
  for (; b < ranked.length && !best; b++) {
    const c = await conversation(ranked[b]!);
    if (c) best = { t: ranked[b]!, c };
  }
  let worst: { t: Trajectory; c: Conversation } | null = null;
  for (let w = ranked.length - 1; w >= b && !worst; w--) {
    const c = await conversation(ranked[w]!);
    if (c) worst = { t: ranked[w]!, c };
  }
  if (!best || !worst) {
    ctx.skip('group_too_small');
    return null;
  }
  const margin = best.t.reward! - worst.t.reward!;
  if (!(margin > 0) || margin < minMargin) {
    ctx.skip('group_below_margin');
    return null;
  }
  const split = (c: Conversation) => {
    const at = firstAssistantIndex(c.messages);
    return { prompt: c.messages.slice(0, at), turns: c.messages.slice(at) };
  };
  const chosen = split(best.c);
  const rejected = split(worst.c);
  if (JSON.stringify(chosen.prompt) !== JSON.stringify(rejected.prompt)) {
    // Guided rollouts, or agents that vary the task text: not a preference over the same prompt.
    ctx.skip('group_prompt_mismatch');
    return null;
  }
  ctx.note('pairs');
  return {
    prompt: chosen.prompt,
    chosen: chosen.turns,
    rejected: rejected.turns,
    chosen_reward: best.t.reward!,
    rejected_reward: worst.t.reward!,
    group_id: first.groupId,
    channel: first.channel,
    chosen_trajectory_uid: best.t.id,
    rejected_trajectory_uid: worst.t.id,
    tools: best.c.tools,
  };
}
