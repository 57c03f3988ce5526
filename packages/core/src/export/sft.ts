import type { JsonObject, Trajectory } from '../domain/index.js';
import { type ExportContext, trainable } from './context.js';
import { buildConversation, type Conversation, type Message } from './conversation.js';
import type { FileSink } from './sink.js';

/** One line of `sft.jsonl`: OpenAI's chat fine-tuning shape. */
export interface SftLine {
  messages: Message[];
  tools: JsonObject[];
}

/**
 * A trajectory's conversation for training, or why it has none: curation that makes its last step
 * untrainable (the answer trained on) excludes the whole trajectory.
 */
export async function trainingConversation(
  ctx: ExportContext,
  trajectory: Trajectory,
): Promise<Conversation | string> {
  const steps = await ctx.trainingStepsOf(trajectory);
  const last = steps.at(-1);
  if (last && !trainable(await ctx.store.getCurrentLabels(trajectory.id), last.index)) return 'untrainable';
  const conversation = buildConversation(steps);
  if (typeof conversation !== 'string') {
    ctx.note('tool_results_added', conversation.addedToolResults);
    ctx.note('tool_results_unplaced', conversation.unplacedToolResults);
  }
  return conversation;
}

/** SFT on (verified) rollouts: one conversation per matching trajectory. */
export async function writeSft(ctx: ExportContext, sink: FileSink): Promise<void> {
  for await (const trajectory of ctx.trajectories()) {
    const conversation = await trainingConversation(ctx, trajectory);
    if (typeof conversation === 'string') ctx.skip(conversation);
    else sink.writeLine({ messages: conversation.messages, tools: conversation.tools } satisfies SftLine);
    ctx.onTrajectory();
  }
}
