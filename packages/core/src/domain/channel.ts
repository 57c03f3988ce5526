import { z } from 'zod';
import { SignalSource } from './signal.js';

/** Serve-time curation of a channel's groups (packages/core/src/curation/pipeline.ts); the default changes nothing. */
/** Why serve-time curation leaves a trajectory out of its group (curation/pipeline.ts). */
export type ExclusionReason = 'truncated' | 'repetition' | 'duplicate';

export const ChannelCuration = z.strictObject({
  /** `drop`: a group whose served rewards are all equal (no GRPO signal) is dropped, the batch refilled. */
  zero_variance: z.enum(['keep', 'drop']),
  /** `exclude`: a trajectory with a step that stopped at the length limit is not served. */
  truncated: z.enum(['keep', 'exclude']),
  /** Degenerate output: a step whose response repeats more than `max_fraction` of its n-grams. */
  repetition: z
    .strictObject({
      ngram: z.number().int().min(1).max(64),
      max_fraction: z.number().min(0).max(1),
    })
    .nullable(),
  /** `exclude`: a trajectory whose every response equals an earlier one of its group. */
  duplicates: z.enum(['keep', 'exclude']),
  /** A group left with fewer trajectories than this after the filters is dropped. */
  min_trajectories: z.number().int().min(1).max(4096),
});
export type ChannelCuration = z.infer<typeof ChannelCuration>;

const TokenLimit = z.number().int().min(1).max(100_000_000).nullable();

/**
 * An episode's limits (docs/datapool.md#episode-policy): checked by the gateway before each LLM call on
 * what the episode has stored; a call past one is refused with an error naming it.
 */
export const EpisodeLimits = z.strictObject({
  /** LLM calls (steps) per episode. */
  max_turns: z.number().int().min(1).max(1_000_000).nullable(),
  /** Tokens of one call's prompt (the episode's context so far). */
  max_prompt_tokens: TokenLimit,
  /** Response tokens summed over the episode; a call's max_tokens is clamped to what is left. */
  max_response_tokens: TokenLimit,
  /** The context a call may reach, prompt and response; max_tokens is clamped to stay within it. */
  max_total_tokens: TokenLimit,
});
export type EpisodeLimits = z.infer<typeof EpisodeLimits>;
export const NO_EPISODE_LIMITS: EpisodeLimits = {
  max_turns: null,
  max_prompt_tokens: null,
  max_response_tokens: null,
  max_total_tokens: null,
};

/**
 * Sampling settings the gateway puts in place of the agent's on every call of the channel (a train or
 * validation channel's fixed temperature); null leaves the agent's value.
 */
export const ForcedSampling = z.strictObject({
  temperature: z.number().min(0).max(100).nullable(),
  top_p: z.number().gt(0).max(1).nullable(),
  max_tokens: z.number().int().min(1).max(100_000_000).nullable(),
});
export type ForcedSampling = z.infer<typeof ForcedSampling>;

/**
 * How the pool answers a producer's "what next?" (pool/schedule.ts, docs/datapool.md#prompt-scheduler):
 * `in_order` walks the channel's prompts in registration order, a round at a time; `uniform` draws
 * among those not in flight; `difficulty` sorts prompts into pools by their latest group's pass rate
 * (prime-rl's difficulty pools): too easy and too hard ones are retired until a re-test is due.
 */
export const ScheduleConfig = z.strictObject({
  policy: z.enum(['in_order', 'uniform', 'difficulty']),
  /** Rollouts per prompt handed out (null: the channel's n_rollouts, else 1). */
  n_rollouts: z.number().int().min(1).max(4096).nullable(),
  /** A prompt handed out is in flight until its group settles, or this long (a producer died). */
  claim_timeout_ms: z
    .number()
    .int()
    .min(1)
    .max(7 * 24 * 3_600_000),
  /** A rollout passes with a reward at or above this. */
  pass_threshold: z.number().finite(),
  /** `difficulty`: a pass rate at or above this is too easy (retired). */
  easy_at_least: z.number().min(0).max(1),
  /** `difficulty`: a pass rate at or below this is too hard (retired). */
  hard_at_most: z.number().min(0).max(1),
  /** `difficulty`: a retired prompt is tried again this many policy versions after its last group. */
  retest_every: z.number().int().min(1).max(1_000_000),
  /** `difficulty`: how often each pool is drawn from, relative to the others (0: never). */
  weights: z.strictObject({
    unseen: z.number().min(0).max(1000),
    learnable: z.number().min(0).max(1000),
    retest: z.number().min(0).max(1000),
  }),
  /**
   * A mixture of task sets (Atropos' environment weights): a set is drawn by its weight, then a
   * prompt of it under the policy; every leased batch holds at least ⌊min_share × batch⌋ groups of
   * each set (the lease waits for them). Sets not named are never handed out. Null: no mixture.
   */
  mixture: z
    .record(
      z.string().min(1).max(128),
      z.strictObject({ weight: z.number().min(0).max(1000), min_share: z.number().min(0).max(1) }),
    )
    .refine((m) => Object.keys(m).length > 0, 'name at least one task set')
    .refine(
      (m) => Object.values(m).reduce((sum, s) => sum + s.min_share, 0) <= 1 + 1e-9,
      'the min_share values must add up to at most 1',
    )
    .nullable(),
});
export type ScheduleConfig = z.infer<typeof ScheduleConfig>;

export const DEFAULT_SCHEDULE: ScheduleConfig = {
  policy: 'in_order',
  n_rollouts: null,
  claim_timeout_ms: 30 * 60 * 1000,
  pass_threshold: 1,
  easy_at_least: 1,
  hard_at_most: 0,
  retest_every: 4,
  weights: { unseen: 1, learnable: 1, retest: 1 },
  mixture: null,
};

const fields = {
  n_rollouts: z.number().int().min(1).max(4096).nullable(),
  max_queue_size: z.number().int().min(1).nullable(),
  max_staleness: z.number().int().min(0).nullable(),
  /**
   * Groups per trainer batch (the trainer sets it). With `max_staleness` it is admission control
   * (AReaL's staleness bound η): at most (max_staleness + 1) × batch_groups groups are unconsumed
   * at once; a new group waits (a 429) rather than be generated to go stale (pool/admission.ts).
   */
  batch_groups: z.number().int().min(1).max(65_536).nullable(),
  stale_policy: z.enum(['drop', 'flag']),
  group_timeout_ms: z.number().int().min(1).nullable(),
  incomplete_policy: z.enum(['drop', 'serve_partial']),
  /** An open trajectory with no activity for this long is closed as `aborted` (no session leaks). */
  idle_timeout_ms: z.number().int().min(1).nullable(),
  /**
   * A group held in `pending_guidance` this long is released as it is (the guide crashed or hangs):
   * no group waits forever unless this is null.
   */
  guidance_hold_timeout_ms: z.number().int().min(1).nullable(),
  curation: ChannelCuration,
  /**
   * Trajectory-level signals every complete rollout of a group must have (e.g. `reward`, the
   * rewards combination's signal) before the group is ready: a group is never served half-scored.
   */
  required_signals: z
    .array(z.string().min(1).max(128))
    .max(32, 'at most 32 names')
    .refine((names) => new Set(names).size === names.length, 'names must be distinct'),
  /**
   * Lets agents own their episodes under their base_url (Claw-R1's black-box clients): complete
   * with a reward, post signals of any source, merge metadata, join existing groups.
   */
  trust_agent_reward: z.boolean(),
  /**
   * Chat answers keep the model's `<tool_call>` text in `content` (no `tool_calls`), as Claw-R1's
   * gateway answers and its agents parse; for clients that cannot ask per trajectory.
   */
  raw_tool_calls: z.boolean(),
  /**
   * A step generated across a weight switch (version_spans): `train` on all its tokens, or `mask`
   * the ones before its last switch out of the loss (slime's --mask-offpolicy-in-partial-rollout).
   */
  partial_rollouts: z.enum(['train', 'mask']),
  /** Limits of each episode (a trajectory may tighten them at init, never loosen them). */
  episode: EpisodeLimits,
  /** Sampling settings that replace the agent's; the stored step records both. */
  forced_sampling: ForcedSampling,
  /** What the prompt scheduler hands producers next. */
  schedule: ScheduleConfig,
  /**
   * Serving pinned to one version of a score (re-verification, docs/datapool.md#pinned-serving): each
   * served rollout's reward is its latest trajectory-level signal of this name, source and version,
   * and a group waits until all its complete rollouts have one. Null: the stored reward.
   */
  reward_pin: z
    .strictObject({
      signal: z.string().min(1).max(128),
      // The agent's own word never decides what a trainer is served.
      source: SignalSource.exclude(['agent', 'user']).default('verifier'),
      version: z.string().min(1).max(64),
    })
    .nullable(),
};

/** Per-channel pool policy; persisted so every process sharing the store applies the same rules. */
export const ChannelConfig = z.strictObject(fields);
export type ChannelConfig = z.infer<typeof ChannelConfig>;

/** A change to some settings; fields left out keep their value. */
export const ChannelConfigPatch = z
  .strictObject({
    ...fields,
    curation: ChannelCuration.partial(),
    episode: EpisodeLimits.partial(),
    forced_sampling: ForcedSampling.partial(),
    schedule: ScheduleConfig.partial(),
  })
  .partial();
export type ChannelConfigPatch = z.infer<typeof ChannelConfigPatch>;

export const DEFAULT_CHANNEL_CONFIG: ChannelConfig = {
  n_rollouts: null,
  max_queue_size: null,
  max_staleness: null,
  batch_groups: null,
  stale_policy: 'drop',
  group_timeout_ms: null,
  incomplete_policy: 'drop',
  idle_timeout_ms: 30 * 60 * 1000,
  guidance_hold_timeout_ms: 6 * 60 * 60 * 1000,
  curation: {
    zero_variance: 'keep',
    truncated: 'keep',
    repetition: null,
    duplicates: 'keep',
    min_trajectories: 1,
  },
  required_signals: [],
  trust_agent_reward: false,
  raw_tool_calls: false,
  partial_rollouts: 'train',
  episode: NO_EPISODE_LIMITS,
  forced_sampling: { temperature: null, top_p: null, max_tokens: null },
  schedule: DEFAULT_SCHEDULE,
  reward_pin: null,
};
