import type { InjectionMode } from '../curation/actguide/hint.js';
import type { Trajectory } from '../domain/index.js';
import type { ModelRef } from '../text/model-ref.js';
import { isObject } from './call-request.js';
import type { EpisodePolicy, EpisodeUsage } from './episode.js';
import type { AnsweredCall } from './tool-results.js';

/*
 * What the gateway keeps of an open trajectory between its calls (a cache: all of it can be rebuilt
 * from the store), and what opening one takes.
 */

export interface InitTrajectoryInput {
  groupId?: string;
  channel?: string;
  metadata?: Record<string, unknown>;
  nRollouts?: number | null;
  /** ActGuide-RL: a guided rollout (trained off-policy) or a probe (never trained). */
  guided?: boolean;
  probe?: boolean;
  guidanceK?: number | null;
  /** The hint in its prompt; each guided step then also stores the prompt without it. */
  guidanceHint?: string | null;
  /**
   * Where the hint is: in the task's user message (`user_prompt`, the agent was given it), or an
   * assistant message the gateway inserts after the first user message of every call
   * (`assistant_prefix`, the paper's second mode; the agent never sees it).
   */
  guidanceMode?: InjectionMode;
  /** ActGuide-RL: hold the group back from leases if none of its rollouts scores above this. */
  holdForGuidance?: number;
  /** Refuse to join an existing group (an agent's own key, docs/security.md). */
  newGroup?: boolean;
  /** Chat answers keep the raw `<tool_call>` text in `content` (Claw-R1's agents parse it there). */
  rawToolCalls?: boolean;
  /** Limits of this episode, tighter than its channel's (looser ones are the channel's). */
  episodeLimits?: Partial<
    Record<'max_turns' | 'max_prompt_tokens' | 'max_response_tokens' | 'max_total_tokens', number>
  >;
}

/** Where a trajectory asks for raw tool-call text (metadata `raw_tool_calls`, set at init). */
export const RAW_TOOL_CALLS = 'raw_tool_calls';

export interface LastStep {
  index: number;
  calls: AnsweredCall[];
  answered: boolean;
}

/** Why a call in token-continuity mode took the chat path (continuity.ts). */
export type FallbackReason =
  | 'first_step'
  | 'no_exact_ids'
  | 'history_rewritten'
  | 'template_unknown'
  | 'engine'
  | 'options';

/** What a step leaves for the next call to continue (continuity.ts): its conversation and exact ids. */
export interface ContinuityBase {
  messages: readonly unknown[];
  tools: unknown;
  templateKwargs: unknown;
  content: string;
  toolCalls: { name: string; arguments: string }[];
  promptIds: readonly number[];
  responseIds: readonly number[];
  servedModel: string | null;
  /** The model folder of the engine that produced it (null: none configured, the built-in Qwen3). */
  model: ModelRef | null;
}

/** What the gateway remembers about an open trajectory between calls. */
export interface Session {
  id: string;
  groupId: string;
  channel: string;
  nextIndex: number;
  last: LastStep | null;
  /** Calls in flight and step writes not yet committed: completing the trajectory waits for them. */
  writes: Set<Promise<void>>;
  inFlight: number;
  usedAt: number;
  closed: string | null;
  /** A guided trajectory's hint: its steps get a training prompt without it. */
  hint: string | null;
  /** Chat answers carry the model's raw `<tool_call>` text in `content` (Claw-R1's form). */
  rawToolCalls: boolean;
  /** Where the hint is (metadata `guidance.mode`; absent: the user message). */
  hintMode: InjectionMode;
  /** The hint every chat call of a guided or probe trajectory opens with in `assistant_prefix` mode. */
  prefixHint: string | null;
  /** The arguments the engine generated for this session's tool calls, by id (echoed-calls.ts). */
  generatedCalls: Map<string, string>;
  /** Token continuity: what the last step leaves to continue, or why it leaves nothing (null: no step yet). */
  continuity: ContinuityBase | FallbackReason | null;
  /** The episode policy in force when the session opened (episode.ts); null: none. */
  episode: EpisodePolicy | null;
  /** What the episode has used, kept up as its steps are stored; null until read from the store. */
  usage: EpisodeUsage | null;
}

/** The hint a guided trajectory's steps are stored without (metadata `guidance.hint`). */
function hintOf(t: Pick<Trajectory, 'guided' | 'metadata'>): string | null {
  if (!t.guided) return null;
  const guidance = t.metadata.guidance;
  if (typeof guidance !== 'object' || guidance === null || Array.isArray(guidance)) return null;
  const hint = (guidance as Record<string, unknown>).hint;
  return typeof hint === 'string' ? hint : null;
}

/** Where a guided trajectory's hint is (metadata `guidance.mode`), `user_prompt` unless it says so. */
function hintModeOf(t: Pick<Trajectory, 'metadata'>): InjectionMode {
  const guidance = t.metadata.guidance;
  if (typeof guidance !== 'object' || guidance === null || Array.isArray(guidance)) return 'user_prompt';
  return (guidance as Record<string, unknown>).mode === 'assistant_prefix'
    ? 'assistant_prefix'
    : 'user_prompt';
}

/** The hint the gateway inserts as the assistant's opening: guided and probe trajectories alike. */
function prefixHintOf(t: Pick<Trajectory, 'guided' | 'probe' | 'metadata'>): string | null {
  if (!(t.guided || t.probe) || hintModeOf(t) !== 'assistant_prefix') return null;
  const hint = (t.metadata.guidance as Record<string, unknown>).hint;
  return typeof hint === 'string' ? hint : null;
}

/** A session for a trajectory, `next` its next step's index and `last` its last step. */
export function newSession(
  t: Pick<Trajectory, 'id' | 'groupId' | 'channel' | 'guided' | 'probe' | 'metadata'>,
  next: number,
  last: LastStep | null,
  rawToolCalls: boolean,
  episode: EpisodePolicy | null = null,
): Session {
  return {
    id: t.id,
    groupId: t.groupId,
    channel: t.channel,
    nextIndex: next,
    last,
    writes: new Set(),
    inFlight: 0,
    usedAt: Date.now(),
    closed: null,
    hint: hintOf(t),
    rawToolCalls,
    hintMode: hintModeOf(t),
    prefixHint: prefixHintOf(t),
    generatedCalls: new Map(),
    continuity: null,
    episode,
    usage: null,
  };
}

/** Waits for the session's calls in flight and step writes, and those they start meanwhile. */
export async function settle(session: Session): Promise<void> {
  while (session.writes.size > 0) await Promise.all(session.writes);
}

/** The calls a stored step's tool_calls made, as tool results are matched against them. */
export function callsOf(toolCalls: readonly Record<string, unknown>[] | null): AnsweredCall[] {
  return (toolCalls ?? []).map((c) => ({
    id: typeof c.id === 'string' ? c.id : '',
    name: isObject(c.function) && typeof c.function.name === 'string' ? c.function.name : '',
  }));
}
