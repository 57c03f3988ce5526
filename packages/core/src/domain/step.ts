import { z } from 'zod';
import { ChannelName, ClientId } from './ids.js';
import { JsonObject, StoredJsonObject } from './json.js';

/** Highest step index a trajectory may have (stores key steps by trajectory and index). */
export const MAX_STEP_INDEX = 1_000_000;
/** The largest policy version: PostgreSQL stores it as `integer`; SQLite is held to the same. */
export const MAX_POLICY_VERSION = 2_147_483_647;

/**
 * The most prompt ids one LLM call may send as ids (`/generate`, a completions prompt of ids), and
 * the most ids in each array of a stored step: Qwen3's longest context. Past it a request is a 400
 * naming the field, so no call or step buys more tokenising, copying or storing than this
 * (docs/security.md).
 */
export const MAX_PROMPT_TOKENS = 262_144;

/** Why a value is not a token id (a non-negative integer that fits in uint32). */
function tokenIdProblem(v: unknown): string {
  if (typeof v !== 'number' || !Number.isInteger(v)) return 'must be an integer';
  if (v < 0) return 'must be >= 0';
  return 'must fit in uint32';
}

/**
 * Token id arrays, checked in one tight loop: they are most of every step's bytes, and a generic
 * per-element schema costs ten times the JSON parse. Errors still name the offending index.
 */
export const TokenIds = z.custom<number[]>().transform((value: unknown, ctx): number[] => {
  if (!Array.isArray(value)) {
    ctx.issues.push({ code: 'custom', message: 'must be an array of token ids', input: value });
    return z.NEVER;
  }
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (typeof v === 'number' && v >= 0 && v <= 0xffffffff && Number.isInteger(v)) continue;
    ctx.issues.push({ code: 'custom', message: tokenIdProblem(v), input: v, path: [i] });
    return z.NEVER;
  }
  return value as number[];
});

/** Logprobs: finite numbers, checked the same way. */
const Logprobs = z.custom<number[]>().transform((value: unknown, ctx): number[] => {
  if (!Array.isArray(value)) {
    ctx.issues.push({ code: 'custom', message: 'must be an array of numbers', input: value });
    return z.NEVER;
  }
  for (let i = 0; i < value.length; i++) {
    const v = value[i];
    if (typeof v === 'number' && Number.isFinite(v)) continue;
    ctx.issues.push({ code: 'custom', message: 'must be a finite number', input: v, path: [i] });
    return z.NEVER;
  }
  return value as number[];
});

/**
 * Runs of response tokens by the policy version that produced them: `[version, count]`, versions
 * rising, counts positive (docs/datapool.md#partial-rollouts).
 */
export const VersionSpans = z
  .array(
    z.tuple([
      z.number().int('must be an integer').min(0, 'must be >= 0').max(MAX_POLICY_VERSION),
      z.number().int('must be an integer').min(1, 'must be >= 1'),
    ]),
  )
  .min(1, 'must hold at least one span')
  .max(MAX_PROMPT_TOKENS)
  .superRefine((spans, ctx) => {
    for (let i = 1; i < spans.length; i++)
      if (spans[i]![0] <= spans[i - 1]![0])
        ctx.addIssue({ code: 'custom', path: [i, 0], message: 'versions must rise from span to span' });
  });
export type VersionSpans = [version: number, count: number][];

/**
 * Bounds of a step's MoE routing (Claw-R1's `routed_experts`, for routing replay): one expert id
 * per token, layer and top-k slot. Ids fit in uint16 and a step holds at most 2^23 of them (16 MiB
 * stored), so one step never buys more storage than that.
 */
export const MAX_ROUTED_EXPERT_ID = 65_535;
export const MAX_ROUTED_EXPERTS = 2 ** 23;
/** Largest `multi_modal_data` of a step, as JSON (images travel as URLs or data: URIs). */
export const MAX_MULTI_MODAL_BYTES = 16 * 1024 * 1024;

/**
 * MoE routing decisions as Claw-R1's Step holds them: an array `[tokens][layers][top_k]` of expert
 * ids, rectangular, tokens counted from the first prompt token. Checked in one loop (it can hold
 * millions of ids); errors name the offending position.
 */
export const RoutedExperts = z.custom<number[][][]>().transform((value: unknown, ctx): number[][][] => {
  const fail = (message: string, path: number[]) => {
    ctx.issues.push({ code: 'custom', message, input: value, path });
    return z.NEVER;
  };
  if (!Array.isArray(value) || value.length === 0)
    return fail('must be a non-empty array [tokens][layers][top_k] of expert ids', []);
  const first = value[0];
  const layers = Array.isArray(first) ? first.length : 0;
  const topK = layers > 0 && Array.isArray(first[0]) ? first[0].length : 0;
  if (layers === 0 || topK === 0)
    return fail('must be a non-empty array [tokens][layers][top_k] of expert ids', [0]);
  if (value.length * layers * topK > MAX_ROUTED_EXPERTS)
    return fail(
      `${value.length}x${layers}x${topK} expert ids; a step holds at most ${MAX_ROUTED_EXPERTS}`,
      [],
    );
  for (let t = 0; t < value.length; t++) {
    const token = value[t];
    if (!Array.isArray(token) || token.length !== layers)
      return fail(`must be an array of ${layers} layers (every token routes through as many)`, [t]);
    for (let l = 0; l < layers; l++) {
      const slots = token[l];
      if (!Array.isArray(slots) || slots.length !== topK)
        return fail(`must be an array of ${topK} expert ids (top_k is the same everywhere)`, [t, l]);
      for (let k = 0; k < topK; k++) {
        const v = slots[k];
        if (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_ROUTED_EXPERT_ID) continue;
        return fail(`must be an integer expert id in 0..${MAX_ROUTED_EXPERT_ID}`, [t, l, k]);
      }
    }
  }
  return value as number[][][];
});

/** Claw-R1's `multi_modal_data` (`images`, `videos`, ...): any JSON object, bounded in size. */
export const MultiModalData = JsonObject.superRefine((value, ctx) => {
  const bytes = Buffer.byteLength(JSON.stringify(value));
  if (bytes > MAX_MULTI_MODAL_BYTES)
    ctx.addIssue({
      code: 'custom',
      message: `${bytes} bytes of JSON; a step holds at most ${MAX_MULTI_MODAL_BYTES} (MAX_MULTI_MODAL_BYTES)`,
    });
});

export const TokenSource = z.enum(['engine', 'retokenized', 'submitted']);
export type TokenSource = z.infer<typeof TokenSource>;

/** An observation that followed a step's action (a tool's output), with its failure if any. */
export const ToolResult = z.object({
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
  content: z.string(),
  error: z.boolean().default(false),
  error_type: z.string().optional(),
});
export type ToolResult = z.infer<typeof ToolResult>;

export const StepTimings = z.object({
  latency_ms: z.number().min(0).optional(),
  ttft_ms: z.number().min(0).optional(),
});

/**
 * A step on the wire: Claw-R1's snake_case fields plus Stepwise's additions. This is the shape
 * agents submit and trainers receive; the store keeps the same content in a compact form.
 */
export const StepWire = z
  .strictObject({
    trajectory_uid: ClientId,
    prompt_uid: ClientId,
    step_index: z.number().int('must be an integer').min(0, 'must be >= 0').max(MAX_STEP_INDEX),
    prompt_ids: TokenIds,
    response_ids: TokenIds,
    reward: z.number().finite().nullable().optional(),
    policy_version: z
      .number()
      .int('must be an integer')
      .min(0, 'must be >= 0')
      .max(MAX_POLICY_VERSION, `must be <= ${MAX_POLICY_VERSION}`)
      .optional(),
    is_last: z.boolean().default(false),
    // Claw-R1's Step has `metadata: Optional[dict] = None`: null is no metadata.
    metadata: StoredJsonObject.nullable()
      .default({})
      .transform((m) => m ?? {}),
    rollout_log_probs: Logprobs.nullable().optional(),
    // Which policy version produced each response token, as runs [version, count] in order (a
    // generation that spanned a weight switch has several); absent: all of them policy_version's.
    version_spans: VersionSpans.nullable().optional(),
    token_source: TokenSource.default('submitted'),
    finish_reason: z.string().max(64).nullable().optional(),
    // What the agent saw: kept for judges, SFT export and the dashboard.
    messages: z.array(JsonObject).nullable().optional(),
    tools: z.array(JsonObject).nullable().optional(),
    response_text: z.string().nullable().optional(),
    tool_calls: z.array(JsonObject).nullable().optional(),
    tool_results: z.array(ToolResult).nullable().optional(),
    timings: StepTimings.nullable().optional(),
    engine_id: z.string().max(256).nullable().optional(),
    // ActGuide-RL: the prompt without the guidance hint (docs/actguide.md); prompt_ids is what the
    // engine saw. Only guided steps carry it.
    training_prompt_ids: TokenIds.nullable().optional(),
    // Claw-R1's Step: MoE routing for routing replay, and the prompt's images/videos.
    routed_experts: RoutedExperts.nullable().optional(),
    multi_modal_data: MultiModalData.nullable().optional(),
  })
  .superRefine((step, ctx) => {
    // Routing starts at the first prompt token: it covers no more tokens than the step has.
    const routed = step.routed_experts?.length ?? 0;
    if (routed > step.prompt_ids.length + step.response_ids.length)
      ctx.addIssue({
        code: 'custom',
        path: ['routed_experts'],
        message: `routes ${routed} tokens; the step has ${step.prompt_ids.length + step.response_ids.length} (prompt_ids + response_ids)`,
      });
    // A step is one LLM call: none of its id arrays is longer than a call's prompt may be.
    for (const field of ['prompt_ids', 'response_ids', 'training_prompt_ids'] as const) {
      const length = step[field]?.length ?? 0;
      if (length > MAX_PROMPT_TOKENS)
        ctx.addIssue({
          code: 'custom',
          path: [field],
          message: `${length} token ids; a step holds at most ${MAX_PROMPT_TOKENS} (MAX_PROMPT_TOKENS)`,
        });
    }
    if (step.version_spans != null) {
      const covered = step.version_spans.reduce((n, [, count]) => n + count, 0);
      if (covered !== step.response_ids.length)
        ctx.addIssue({
          code: 'custom',
          path: ['version_spans'],
          message: `covers ${covered} tokens; response_ids has ${step.response_ids.length}`,
        });
      if (step.policy_version !== undefined && step.version_spans[0]?.[0] !== step.policy_version)
        ctx.addIssue({
          code: 'custom',
          path: ['version_spans'],
          message: `starts at version ${step.version_spans[0]?.[0]}; policy_version is ${step.policy_version} (the version of the first token)`,
        });
    }
    if (step.rollout_log_probs != null && step.rollout_log_probs.length !== step.response_ids.length) {
      ctx.addIssue({
        code: 'custom',
        path: ['rollout_log_probs'],
        message: `length ${step.rollout_log_probs.length} must equal response_ids length ${step.response_ids.length}`,
      });
    }
  });
export type StepWireInput = z.input<typeof StepWire>;

/** A step as the domain sees it (camelCase); token arrays are always full. */
export const Step = z.object({
  trajectoryId: z.string(),
  groupId: z.string(),
  channel: z.string(),
  index: z.number().int().min(0),
  promptIds: z.array(z.number().int()),
  responseIds: z.array(z.number().int()),
  responseLogprobs: z.array(z.number()).nullable(),
  /** The version of each run of response tokens (a generation across a weight switch); null: all policyVersion's. */
  versionSpans: z.array(z.tuple([z.number().int(), z.number().int()])).nullable(),
  reward: z.number().nullable(),
  policyVersion: z.number().int().min(0),
  isLast: z.boolean(),
  metadata: JsonObject,
  tokenSource: TokenSource,
  finishReason: z.string().nullable(),
  messages: z.array(JsonObject).nullable(),
  tools: z.array(JsonObject).nullable(),
  responseText: z.string().nullable(),
  toolCalls: z.array(JsonObject).nullable(),
  toolResults: z.array(ToolResult).nullable(),
  latencyMs: z.number().nullable(),
  ttftMs: z.number().nullable(),
  engineId: z.string().nullable(),
  /** A guided step's prompt without the hint (the training view); null otherwise. */
  trainingPromptIds: z.array(z.number().int()).nullable(),
  /** MoE routing `[tokens][layers][top_k]` from the first prompt token (Claw-R1); null when not sent. */
  routedExperts: z.array(z.array(z.array(z.number().int()))).nullable(),
  /** The prompt's images/videos as the agent sent them (Claw-R1); null when not sent. */
  multiModalData: JsonObject.nullable(),
  createdAt: z.number(),
});
export type Step = z.infer<typeof Step>;

/** A step offered to the store: the wire fields, normalised, before the store assigns time. */
export type NewStep = Omit<Step, 'createdAt' | 'channel' | 'policyVersion'> & {
  policyVersion: number | null;
};

/** A step with every optional field empty; callers name the keys and tokens and what else they know. */
export function newStep(
  fields: Pick<NewStep, 'trajectoryId' | 'groupId' | 'index' | 'promptIds' | 'responseIds'> &
    Partial<NewStep>,
): NewStep {
  return {
    responseLogprobs: null,
    versionSpans: null,
    reward: null,
    policyVersion: null,
    isLast: false,
    metadata: {},
    tokenSource: 'submitted',
    finishReason: null,
    messages: null,
    tools: null,
    responseText: null,
    toolCalls: null,
    toolResults: null,
    latencyMs: null,
    ttftMs: null,
    engineId: null,
    trainingPromptIds: null,
    routedExperts: null,
    multiModalData: null,
    ...fields,
  };
}

export function stepFromWire(wire: z.output<typeof StepWire>): NewStep {
  return {
    trajectoryId: wire.trajectory_uid,
    groupId: wire.prompt_uid,
    index: wire.step_index,
    promptIds: wire.prompt_ids,
    responseIds: wire.response_ids,
    responseLogprobs: wire.rollout_log_probs ?? null,
    // One span is no information beyond policy_version: kept as none.
    versionSpans: wire.version_spans && wire.version_spans.length > 1 ? wire.version_spans : null,
    reward: wire.reward ?? null,
    policyVersion: wire.policy_version ?? wire.version_spans?.[0]?.[0] ?? null,
    isLast: wire.is_last,
    metadata: wire.metadata,
    tokenSource: wire.token_source,
    finishReason: wire.finish_reason ?? null,
    messages: wire.messages ?? null,
    tools: wire.tools ?? null,
    responseText: wire.response_text ?? null,
    toolCalls: wire.tool_calls ?? null,
    toolResults: wire.tool_results ?? null,
    latencyMs: wire.timings?.latency_ms ?? null,
    ttftMs: wire.timings?.ttft_ms ?? null,
    engineId: wire.engine_id ?? null,
    trainingPromptIds: wire.training_prompt_ids ?? null,
    routedExperts: wire.routed_experts ?? null,
    multiModalData: wire.multi_modal_data ?? null,
  };
}

/** Body of `POST /v1/steps` and Claw-R1's `POST /submit_steps`. */
export const SubmitStepsBody = z.strictObject({
  steps: z
    .array(z.unknown())
    .min(1, 'must hold at least one step')
    .max(10_000, 'at most 10000 steps per call'),
  channel: ChannelName.optional(),
  n_rollouts: z.number().int().min(1).max(4096).optional(),
});
