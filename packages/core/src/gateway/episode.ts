import {
  type ChannelConfig,
  type EpisodeLimits,
  type ForcedSampling,
  type JsonObject,
  StepwiseError,
  type Trajectory,
} from '../domain/index.js';

/*
 * The episode policy (docs/datapool.md#episode-policy): the limits a channel (and a trajectory, at
 * init, only tighter) sets on an episode, and the sampling settings it forces. The gateway checks the
 * limits before each LLM call on what the episode has stored, and refuses a call past one.
 */

/** Where a trajectory's own limits are kept (metadata, set at init). */
export const EPISODE_LIMITS_KEY = 'episode_limits';
/** Where the limit that ended an episode is recorded (metadata), for a reward to read. */
export const EPISODE_LIMIT_KEY = 'episode_limit';

/** What an open episode runs under: its limits and the channel's forced sampling. */
export interface EpisodePolicy {
  limits: EpisodeLimits;
  sampling: ForcedSampling;
}

/** What an episode has used, from its stored steps. */
export interface EpisodeUsage {
  turns: number;
  /** Response tokens over all its steps. */
  responseTokens: number;
  /** The last step's prompt and response: the context the next call starts from, at least. */
  context: number;
}

/** Nothing used yet (frozen: a session takes a copy). */
export const NO_USAGE: Readonly<EpisodeUsage> = Object.freeze({ turns: 0, responseTokens: 0, context: 0 });

/** The tighter of two limits (null: none). */
const tighter = (a: number | null, b: number | null) => (a === null ? b : b === null ? a : Math.min(a, b));

/** A trajectory's own limits from its metadata (only numbers count). */
function trajectoryLimits(metadata: Trajectory['metadata']): Partial<EpisodeLimits> {
  const given = metadata[EPISODE_LIMITS_KEY];
  if (typeof given !== 'object' || given === null || Array.isArray(given)) return {};
  const out: Partial<EpisodeLimits> = {};
  for (const key of LIMIT_NAMES) {
    const value = (given as Record<string, unknown>)[key];
    if (typeof value === 'number' && Number.isInteger(value) && value >= 1) out[key] = value;
  }
  return out;
}

const LIMIT_NAMES = ['max_turns', 'max_prompt_tokens', 'max_response_tokens', 'max_total_tokens'] as const;

/** The policy of an episode: the channel's limits, tightened by the trajectory's own. */
export function episodePolicy(
  config: Pick<ChannelConfig, 'episode' | 'forced_sampling'>,
  metadata: Trajectory['metadata'],
): EpisodePolicy | null {
  const own = trajectoryLimits(metadata);
  const limits = Object.fromEntries(
    LIMIT_NAMES.map((k) => [k, tighter(config.episode[k], own[k] ?? null)]),
  ) as EpisodeLimits;
  const limited = LIMIT_NAMES.some((k) => limits[k] !== null);
  const forced = Object.values(config.forced_sampling).some((v) => v !== null);
  return limited || forced ? { limits, sampling: config.forced_sampling } : null;
}

/** Whether a policy needs the episode's token counts (not only its turns). */
export const countsTokens = (limits: EpisodeLimits) =>
  limits.max_prompt_tokens !== null ||
  limits.max_response_tokens !== null ||
  limits.max_total_tokens !== null;

/** A call refused because its episode reached a limit: an OpenAI-style 400 naming it. */
export class EpisodeLimitError extends StepwiseError {
  override readonly name = 'EpisodeLimitError';
  constructor(
    readonly limit: (typeof LIMIT_NAMES)[number],
    readonly value: number,
    readonly used: number,
  ) {
    super(
      `episode limit reached: ${limit} is ${value} and this episode has used ${used}; the episode is over (its trajectory's metadata ${EPISODE_LIMIT_KEY} says why)`,
      400,
      'episode_limit',
      limit,
    );
  }
}

/** Throws the limit a new call of this episode would pass; else the most tokens it may generate. */
export function checkEpisode(limits: EpisodeLimits, usage: EpisodeUsage): number | null {
  const { max_turns, max_prompt_tokens, max_response_tokens, max_total_tokens } = limits;
  if (max_turns !== null && usage.turns >= max_turns)
    throw new EpisodeLimitError('max_turns', max_turns, usage.turns);
  if (max_prompt_tokens !== null && usage.context >= max_prompt_tokens)
    throw new EpisodeLimitError('max_prompt_tokens', max_prompt_tokens, usage.context);
  if (max_response_tokens !== null && usage.responseTokens >= max_response_tokens)
    throw new EpisodeLimitError('max_response_tokens', max_response_tokens, usage.responseTokens);
  if (max_total_tokens !== null && usage.context >= max_total_tokens)
    throw new EpisodeLimitError('max_total_tokens', max_total_tokens, usage.context);
  const left = [
    max_response_tokens === null ? null : max_response_tokens - usage.responseTokens,
    max_total_tokens === null ? null : max_total_tokens - usage.context,
  ].reduce(tighter, null);
  return left;
}

/**
 * One call of an episode under its policy: a call past a limit is recorded (`ended`) and refused;
 * otherwise the fields to set on its request (`requested`: the agent's values).
 */
export async function admitCall(
  policy: EpisodePolicy,
  usage: EpisodeUsage,
  requested: { temperature?: unknown; top_p?: unknown; max_tokens?: unknown },
  ended: (error: EpisodeLimitError) => Promise<void>,
): Promise<SamplingRewrite> {
  let left: number | null;
  try {
    left = checkEpisode(policy.limits, usage);
  } catch (error) {
    if (error instanceof EpisodeLimitError) await ended(error);
    throw error;
  }
  return samplingRewrite(policy.sampling, requested, left);
}

/** The request fields a policy sets: sampling it forces and max_tokens it clamps. */
export interface SamplingRewrite {
  /** Field → value to put in the request. */
  set: Record<string, number>;
  /** What the stored step says: each field's value as the agent sent it and as it ran. */
  record: JsonObject;
}

/**
 * The fields to set on a request whose own values are `requested` (`max_tokens` the agent's, under
 * whichever name it used): forced values replace the agent's, then max_tokens is clamped to `left`.
 */
export function samplingRewrite(
  sampling: ForcedSampling,
  requested: { temperature?: unknown; top_p?: unknown; max_tokens?: unknown },
  left: number | null,
): SamplingRewrite {
  const set: Record<string, number> = {};
  const record: JsonObject = {};
  const agent = (v: unknown) => (typeof v === 'number' ? v : null);
  for (const field of ['temperature', 'top_p', 'max_tokens'] as const) {
    const forced = sampling[field];
    if (forced !== null) {
      set[field] = forced;
      record[field] = { agent: agent(requested[field]), forced };
    }
  }
  if (left !== null) {
    const asked = set.max_tokens ?? agent(requested.max_tokens);
    if (asked === null || asked > left) {
      set.max_tokens = left;
      record.max_tokens_clamped = { asked, to: left };
    }
  }
  return { set, record };
}

/** What the episode policy needs of the gateway: a rebuilt session's usage, and where a refusal goes. */
export interface EpisodeServices {
  /** What an episode has used, from its stored steps. */
  usage(trajectoryId: string): Promise<EpisodeUsage>;
  /** Records on the trajectory the limit that ended it (metadata `episode_limit`), once. */
  ended(trajectoryId: string, error: EpisodeLimitError): Promise<void>;
}
