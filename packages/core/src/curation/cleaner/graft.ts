import { z } from 'zod';
import type { JsonObject, Step, Trajectory } from '../../domain/index.js';
import { familyOf, graftRefusal, type ModelAdapter, ModelFeatureError } from '../../text/model-adapter.js';
import { type RecordedModel, recordedModel } from '../../text/step-model.js';
import { loadQwen3Tokenizer } from '../../text/tokenizer.js';
import type { RepairMode } from './saar.js';

// What a lease serves for a trajectory CLEANER rolled back online: the token-level graft, and why grafted
// rows carry no rollout log-probs (recomputed, as the authors' trainer does).
// docs/cleaner.md#what-a-lease-serves

/** The token a Hermes-format turn's calls begin with, looked up in the model's tokenizer. */
export const TOOL_CALL_TOKEN = '<tool_call>';

/**
 * The `<tool_call>` id of the Qwen3 tokenizer the gateway renders with: what a record written before
 * runs stored their tokenizer's id is read with.
 */
export function defaultToolCallTokenId(): number {
  const id = loadQwen3Tokenizer().tokenId(TOOL_CALL_TOKEN);
  if (id === undefined) throw new Error(`the Qwen3 tokenizer has no ${TOOL_CALL_TOKEN} token`);
  return id;
}

/** The adapter of a step's recorded model, where this process serves it (undefined: it does not). */
export type ModelOfStep = (recorded: RecordedModel) => ModelAdapter | undefined;

/**
 * The id a step's tool calls open with, in its own model's vocabulary: its model's adapter's
 * (`toolCallOpen` as one token); for a model not served here, the id the run recorded, once the
 * family is known to open calls with one token. A step that records no model is the built-in Qwen3.
 * A model whose calls have no one-token opener refuses, naming it: never Qwen3's id on its ids.
 */
export function graftTokenId(
  step: Pick<Step, 'metadata'>,
  recordedId: number | null,
  modelOf?: ModelOfStep,
): number {
  const recorded = recordedModel(step.metadata);
  if (!recorded) return recordedId ?? defaultToolCallTokenId();
  const adapter = modelOf?.(recorded);
  if (adapter) return adapter.toolCallOpenId();
  const family = familyOf(recorded.family);
  const refused = graftRefusal(recorded.name, family);
  if (refused) throw refused;
  if (recordedId !== null) return recordedId;
  throw new ModelFeatureError(
    recorded.name,
    family,
    "CLEANER's graft point: no engine of this server serves the model and its run recorded no tool-call token id, so where its calls begin is unknown",
  );
}

/** One rollback as `metadata.cleaner.repairs` records it (snake_case, as stored). */
const StoredRepair = z.object({
  failed_step: z.number().int().min(0).nullable(),
  retry_step: z.number().int().min(0).nullable(),
  mode: z.enum(['shallow', 'deep']),
});
const StoredCleaner = z.object({
  repairs: z.array(StoredRepair),
  tool_call_token_id: z.number().int().min(0).nullable().optional(),
  abandoned_steps: z.array(z.number().int().min(0)).optional(),
});

export interface GraftRepair {
  failedStep: number | null;
  retryStep: number | null;
  mode: RepairMode;
}

/** What an online CLEANER run recorded for the graft (runner-written `metadata.cleaner`). */
export interface OnlineCleaner {
  repairs: GraftRepair[];
  /** Regenerations asked for and never received: their prompts hold an error. */
  abandonedSteps: number[];
  /** The `<tool_call>` id of the run's tokenizer (null: not recorded, the Qwen3 one). */
  toolCallTokenId: number | null;
}

/**
 * The online CLEANER record of a trajectory (runner-written metadata: agents cannot merge metadata,
 * docs/security.md), or null when it is no online CLEANER run. A record with no repairs is still
 * one: its failures were kept on purpose (p draw off, rollback turned off). Derived trajectories
 * carry their source's report for the record, but their steps are already purified: null.
 */
export function onlineCleaner(
  trajectory: Pick<Trajectory, 'metadata' | 'derivedFrom'>,
): OnlineCleaner | null {
  if (trajectory.derivedFrom !== null) return null;
  const parsed = StoredCleaner.safeParse(trajectory.metadata.cleaner);
  if (!parsed.success) return null;
  return {
    repairs: parsed.data.repairs.map((r) => ({
      failedStep: r.failed_step,
      retryStep: r.retry_step,
      mode: r.mode,
    })),
    abandonedSteps: parsed.data.abandoned_steps ?? [],
    toolCallTokenId: parsed.data.tool_call_token_id ?? null,
  };
}

/** The rollbacks an online CLEANER run recorded for this trajectory ([] when none, or no such run). */
export function onlineRepairs(trajectory: Pick<Trajectory, 'metadata' | 'derivedFrom'>): GraftRepair[] {
  return onlineCleaner(trajectory)?.repairs ?? [];
}

/**
 * A trajectory's steps as everything that trains on it or judges it reads them: leases, curation
 * filters, reward functions and training exports. An online CLEANER run's are its purified view
 * (`trainingView`); any other trajectory's are its steps as captured. The store keeps the captured
 * steps for the dashboard and the audit export.
 */
export function trainingSteps(
  trajectory: Pick<Trajectory, 'metadata' | 'derivedFrom'>,
  steps: readonly Step[],
  modelOf?: ModelOfStep,
): Step[] {
  const online = onlineCleaner(trajectory);
  if (!online || (online.repairs.length === 0 && online.abandonedSteps.length === 0)) return [...steps];
  return trainingView(steps, online.repairs, {
    abandonedSteps: online.abandonedSteps,
    toolCallTokenId: online.toolCallTokenId ?? undefined,
    ...(modelOf ? { modelOf } : {}),
  }).steps;
}

/** Index of the first `<tool_call>` token in a response, or null (the authors' P/K boundary). */
export function toolCallStart(
  responseIds: readonly number[],
  markerId: number = defaultToolCallTokenId(),
): number | null {
  const at = responseIds.indexOf(markerId);
  return at === -1 ? null : at;
}

const startsWith = (ids: readonly number[], prefix: readonly number[]) =>
  prefix.length <= ids.length && prefix.every((x, i) => ids[i] === x);

export interface GraftRecord {
  /** The step index the grafted turn is served at (the chain's first failed attempt). */
  index: number;
  /** The captured steps it replaces, in order: failed attempt, regeneration, (failed retry, regeneration)... */
  from: number[];
  modes: RepairMode[];
  /** Length of P in the grafted response ids (the ids before K′). */
  reasoningTokens: number;
}

export interface TrainingView {
  steps: Step[];
  /** Captured steps not served (failed attempts, regenerations, and chains that could not be checked). */
  removed: number[];
  grafts: GraftRecord[];
}

/**
 * The steps a trainer receives for a trajectory with these online repairs (see the module comment).
 * A chain whose steps are missing, or whose regeneration was not asked from its failed attempt's
 * context, cannot be grafted safely: its steps are left out, never served as captured.
 */
export function trainingView(
  steps: readonly Step[],
  repairs: readonly GraftRepair[],
  options: {
    abandonedSteps?: readonly number[];
    /** The id the run recorded (its tokenizer's tool-call opener); see graftTokenId. */
    toolCallTokenId?: number;
    modelOf?: ModelOfStep;
  } = {},
): TrainingView {
  const abandoned = options.abandonedSteps ?? [];
  if (repairs.length === 0 && abandoned.length === 0) return { steps: [...steps], removed: [], grafts: [] };
  const markerOf = (step: Step) => graftTokenId(step, options.toolCallTokenId ?? null, options.modelOf);
  const byIndex = new Map(steps.map((s) => [s.index, s]));
  // Chains: a rollback whose failed attempt is the previous rollback's regeneration continues it.
  const chains: GraftRepair[][] = [];
  const tailOf = new Map<number, GraftRepair[]>();
  const removed = new Set<number>(abandoned);
  for (const r of repairs) {
    if (r.failedStep !== null) removed.add(r.failedStep);
    if (r.retryStep !== null) removed.add(r.retryStep);
    const chain = r.failedStep !== null ? tailOf.get(r.failedStep) : undefined;
    if (chain && r.failedStep !== null) {
      tailOf.delete(r.failedStep);
      chain.push(r);
    } else chains.push([r]);
    if (r.retryStep !== null) tailOf.set(r.retryStep, chain ?? chains.at(-1)!);
  }
  const grafted = new Map<number, Step>();
  const grafts: GraftRecord[] = [];
  for (const chain of chains) {
    const graft = graftChain(chain, byIndex, markerOf);
    if (!graft) continue;
    grafted.set(graft.step.index, graft.step);
    grafts.push(graft.record);
  }
  const out: Step[] = [];
  for (const s of steps) {
    const g = grafted.get(s.index);
    if (g) out.push(g);
    else if (!removed.has(s.index)) out.push(s);
  }
  return {
    steps: out,
    removed: steps.map((s) => s.index).filter((i) => removed.has(i) && !grafted.has(i)),
    grafts,
  };
}

function graftChain(
  chain: readonly GraftRepair[],
  byIndex: ReadonlyMap<number, Step>,
  markerOf: (step: Step) => number,
): { step: Step; record: GraftRecord } | null {
  const first = chain[0]!.failedStep;
  const base = first === null ? undefined : byIndex.get(first);
  if (!base) return null;
  const markerId = markerOf(base);
  const model = JSON.stringify(recordedModel(base.metadata));
  let response = base.responseIds;
  let reasoning: number | null = toolCallStart(response, markerId);
  let text = base.responseText;
  let last = base;
  let version = base.policyVersion;
  for (const r of chain) {
    const retry = r.retryStep === null ? undefined : byIndex.get(r.retryStep);
    // The regeneration must have been asked from the failed attempt's context (plus the failure).
    if (!retry || !startsWith(retry.promptIds, base.promptIds)) return null;
    // Ids of two vocabularies cannot be one response.
    if (JSON.stringify(recordedModel(retry.metadata)) !== model) return null;
    const oldStart = toolCallStart(response, markerId);
    const newStart = toolCallStart(retry.responseIds, markerId);
    if (r.mode === 'shallow') {
      // The agent went on from P + K′: without both boundaries no ids hold that turn.
      if (oldStart === null || newStart === null) return null;
      response = [...response.slice(0, oldStart), ...retry.responseIds.slice(newStart)];
      reasoning = oldStart;
    } else {
      response = retry.responseIds;
      reasoning = newStart;
      text = retry.responseText;
    }
    last = retry;
    version = Math.min(version, retry.policyVersion);
  }
  const metadata: JsonObject = {
    ...base.metadata,
    cleaner_graft: {
      from: [first!, ...chain.map((r) => r.retryStep!)],
      modes: chain.map((r) => r.mode),
    },
  };
  const step: Step = {
    ...base,
    responseIds: response,
    // Not sampled from this prompt as a whole: the trainer recomputes (module comment). The routing
    // of the failed attempt's tokens is not the grafted response's: routing replay must not use it.
    responseLogprobs: null,
    routedExperts: null,
    policyVersion: version,
    responseText: text,
    toolCalls: last.toolCalls,
    toolResults: last.toolResults,
    finishReason: last.finishReason,
    isLast: last.isLast,
    metadata,
  };
  return {
    step,
    record: {
      index: base.index,
      from: [first!, ...chain.map((r) => r.retryStep!)],
      modes: chain.map((r) => r.mode),
      reasoningTokens: reasoning ?? 0,
    },
  };
}
