import { createHash } from 'node:crypto';
import {
  type Group,
  type JsonObject,
  type NewStep,
  type Step,
  type Trajectory,
  ValidationError,
} from '../../domain/index.js';
import type {
  CompleteInput,
  CreateTrajectoryInput,
  Page,
  ScanPage,
  SubmitOutcome,
  SubmitRequest,
  TrajectoryQuery,
  TrajectoryScan,
} from '../../store/store.js';
import { type ChatTokenizer, loadQwen3Tokenizer } from '../../text/index.js';
import { ModelFeatureError } from '../../text/model-adapter.js';
import { recordedModel } from '../../text/step-model.js';
import { derivedSteps, failedToolMessages, modeOf, onlineMetrics, servedContext } from './derived-steps.js';
import { graftTokenId, type ModelOfStep, onlineCleaner, type TrainingView } from './graft.js';
import { type PurifiedDerivation, purifyTrajectory } from './purify.js';
import { type CleanerOptions, resolveCleanerOptions } from './saar.js';

// Offline CLEANER over a store (`stepwise purify`): derived trajectories in a channel of their own,
// originals never changed, ids hashed from the source so a re-run resumes.
// docs/cleaner.md#stepwise-purify-derived-trajectories-in-the-store

export interface PurifyStoreOptions {
  /** Only this channel (default: every channel, derived ones excepted). */
  channel?: string;
  /** Only this trajectory. */
  trajectoryId?: string;
  /** Where derived trajectories go (default `<source channel>-purified`). */
  into?: string;
  cleaner?: CleanerOptions;
  /** Purify and report, write nothing. */
  dryRun?: boolean;
  /** Qwen3's tokenizer: the built-in model's, which a step that records no model is. */
  tokenizer?: ChatTokenizer;
  /** The adapters of the models steps record (`model_family`, `model_name`), where known. */
  modelOf?: ModelOfStep;
  clock?: () => number;
  onProgress?: (done: number, total: number) => void;
}

export type PurifySkipReason =
  | 'already_derived'
  | 'no_messages'
  | 'template_mismatch'
  | 'probe'
  | 'not_complete'
  | 'derived';

export interface PurifiedEntry {
  source: string;
  derived: string;
  channel: string;
  group_id: string;
  /** `purified` (repairs made), `copied` (nothing to roll back). */
  outcome: 'purified' | 'copied';
  repairs: number;
  mode: PurifiedDerivation['mode'] | null;
  steps_before: number;
  steps_after: number;
}

export interface PurifySummary {
  dry_run: boolean;
  scanned: number;
  purified: number;
  copied: number;
  skipped: Partial<Record<PurifySkipReason, number>>;
  metrics: {
    rollbacks_triggered: number;
    recovered: number;
    failed: number;
    shallow: number;
    deep: number;
    removed_error_types: Record<string, number>;
    /** Failed tool results in the contexts before and after purification. */
    tool_errors_before: number;
    tool_errors_after: number;
  };
  options: ReturnType<typeof resolveCleanerOptions>;
  /** The trajectories written (or, with dry_run, that would be), in scan order. */
  trajectories: PurifiedEntry[];
}

/** The id of the trajectory derived from `source`: stable, so re-runs find what they wrote. */
export function derivedTrajectoryId(source: string): string {
  return createHash('sha256').update(`stepwise/cleaner-offline/${source}`).digest('hex').slice(0, 32);
}

export interface PurifyPool {
  getTrajectory(id: string): Promise<Trajectory | null>;
  getTrajectorySteps(id: string): Promise<Step[]>;
  getGroup(channel: string, id: string): Promise<Group | null>;
  listTrajectories(query: TrajectoryQuery): Promise<Page<Trajectory>>;
  scanTrajectories(query: TrajectoryScan): Promise<ScanPage<Trajectory>>;
  createTrajectory(input: CreateTrajectoryInput, now: number): Promise<Trajectory>;
  submitBatch(requests: SubmitRequest[], now: number): Promise<SubmitOutcome[]>;
  completeTrajectory(id: string, input: CompleteInput, now: number): Promise<Trajectory>;
}

async function* candidates(store: PurifyPool, options: PurifyStoreOptions): AsyncGenerator<Trajectory> {
  if (options.trajectoryId !== undefined) {
    const t = await store.getTrajectory(options.trajectoryId);
    if (!t) throw new ValidationError(`trajectory: ${options.trajectoryId} does not exist`, 'trajectory');
    if (options.channel !== undefined && t.channel !== options.channel)
      throw new ValidationError(
        `trajectory: ${t.id} is in channel ${t.channel}, not ${options.channel}`,
        'trajectory',
      );
    yield t;
    return;
  }
  let after: string | null = null;
  do {
    const page = await store.scanTrajectories({
      ...(options.channel !== undefined ? { channel: options.channel } : {}),
      status: 'complete',
      after,
      limit: 200,
    });
    for (const t of page.items) yield t;
    after = page.cursor;
  } while (after !== null);
}

async function countCandidates(store: PurifyPool, options: PurifyStoreOptions): Promise<number> {
  if (options.trajectoryId !== undefined) return 1;
  const page = await store.listTrajectories({
    ...(options.channel !== undefined ? { channel: options.channel } : {}),
    status: 'complete',
    limit: 1,
    offset: 0,
  });
  return page.total;
}

/**
 * How the similarity reads a trajectory's call segments: decoded from its ids with its own model's
 * tokenizer, from that model's tool-call opener. A model with no such token, or one not known here,
 * is compared by its rebuilt calls instead (saar.ts), as any engine without ids is.
 */
function callDecoding(
  steps: readonly Step[],
  builtIn: ChatTokenizer,
  modelOf: ModelOfStep | undefined,
): { decode?: (ids: readonly number[]) => string; toolCallTokenId?: number } {
  const recorded = recordedModel(steps[0]?.metadata);
  if (!recorded) return { decode: (ids) => builtIn.decode(ids) };
  const adapter = modelOf?.(recorded);
  if (!adapter) return {};
  try {
    const toolCallTokenId = graftTokenId(steps[0]!, null, modelOf);
    return { decode: (ids) => adapter.tokenizer.decode(ids), toolCallTokenId };
  } catch (error) {
    if (error instanceof ModelFeatureError) return {};
    throw error;
  }
}

/** Purifies stored trajectories into derived ones (see the module comment). */
export async function purifyStore(
  store: PurifyPool,
  options: PurifyStoreOptions = {},
): Promise<PurifySummary> {
  const resolved = resolveCleanerOptions(options.cleaner ?? {});
  if (options.into !== undefined && options.channel !== undefined && options.into === options.channel)
    throw new ValidationError('into: derived trajectories go to another channel than --channel', 'into');
  const tokenizer = options.tokenizer ?? loadQwen3Tokenizer();
  const clock = options.clock ?? Date.now;
  const summary = emptySummary(options, resolved);
  const skip = (reason: PurifySkipReason) => {
    summary.skipped[reason] = (summary.skipped[reason] ?? 0) + 1;
  };
  const total = await countCandidates(store, options);
  const groupSizes = new Map<string, number>();
  for await (const source of candidates(store, options)) {
    summary.scanned++;
    options.onProgress?.(summary.scanned, Math.max(total, summary.scanned));
    const ineligible = ineligibleReason(source);
    if (ineligible) {
      skip(ineligible);
      continue;
    }
    const into = options.into ?? `${source.channel}-purified`;
    const derivedId = derivedTrajectoryId(source.id);
    const existing = await store.getTrajectory(derivedId);
    if (existing?.status === 'complete') {
      skip('already_derived');
      continue;
    }
    const original = await store.getTrajectorySteps(source.id);
    if (original.length === 0 || original.every((s) => s.messages === null)) {
      skip('no_messages');
      continue;
    }
    // An online CLEANER run decided what to roll back while it ran (repairs, or none: p drawn off,
    // rollback turned off) and its record is the truth; offline purification is for the others.
    const online = onlineCleaner(source);
    const result = purifyTrajectory(original, {
      ...resolved,
      ...callDecoding(original, tokenizer, options.modelOf),
    });
    const m = online ? onlineMetrics(source.metadata.cleaner) : result.report.metrics;
    const before = original.at(-1)!;
    const flagged = flaggedOutputs(original);
    const derived = derivedSteps(source, derivedId, original, {
      online,
      result,
      tokenizer,
      modelOf: options.modelOf,
    });
    if (!derived) {
      skip('template_mismatch');
      continue;
    }
    const { steps, grafted } = derived;
    tallyMetrics(summary.metrics, m, {
      before: failedToolMessages((before.messages ?? []) as JsonObject[], flagged),
      after: grafted
        ? failedToolMessages(servedContext(grafted.steps), flagged)
        : failedToolMessages(result.messages, flagged),
    });
    const changed = grafted ? grafted.grafts.length + grafted.removed.length > 0 : result.changed;
    if (changed) summary.purified++;
    else summary.copied++;
    summary.trajectories.push({
      source: source.id,
      derived: derivedId,
      channel: into,
      group_id: source.groupId,
      outcome: changed ? 'purified' : 'copied',
      ...repairsOf(online, result),
      steps_before: original.length,
      steps_after: steps.length,
    });
    if (options.dryRun) continue;

    const derivation = derivationOf(source, online, grafted, changed, result);
    const cleanerReport = !online && result.derivation ? result.derivation.cleaner : undefined;
    await writeDerived(store, {
      source,
      derivedId,
      into,
      existing,
      steps,
      derivation,
      cleanerReport,
      groupSizes,
      clock,
    });
  }
  return summary;
}

function emptySummary(options: PurifyStoreOptions, resolved: PurifySummary['options']): PurifySummary {
  return {
    dry_run: options.dryRun === true,
    scanned: 0,
    purified: 0,
    copied: 0,
    skipped: {},
    metrics: {
      rollbacks_triggered: 0,
      recovered: 0,
      failed: 0,
      shallow: 0,
      deep: 0,
      removed_error_types: {},
      tool_errors_before: 0,
      tool_errors_after: 0,
    },
    options: resolved,
    trajectories: [],
  };
}

/** Adds one trajectory's rollback metrics and failed tool messages (before, after) to the totals. */
function tallyMetrics(
  metrics: PurifySummary['metrics'],
  m: ReturnType<typeof onlineMetrics>,
  toolErrors: { before: number; after: number },
): void {
  metrics.rollbacks_triggered += m.rollbacksTriggered;
  metrics.recovered += m.recovered;
  metrics.failed += m.failed;
  metrics.shallow += m.shallow;
  metrics.deep += m.deep;
  for (const [type, n] of Object.entries(m.removedErrorTypes))
    metrics.removed_error_types[type] = (metrics.removed_error_types[type] ?? 0) + n;
  metrics.tool_errors_before += toolErrors.before;
  metrics.tool_errors_after += toolErrors.after;
}

/** The derived trajectory's `derivation`: online grafts, an offline purification's record, or unchanged. */
function derivationOf(
  source: Trajectory,
  online: ReturnType<typeof onlineCleaner>,
  grafted: TrainingView | null,
  changed: boolean,
  result: ReturnType<typeof purifyTrajectory>,
): Record<string, unknown> {
  return online && grafted && changed
    ? {
        derived_from: source.id,
        purified_offline: false,
        purified_online: true,
        mode: modeOf(online.repairs.map((r) => r.mode)),
        grafts: grafted.grafts.map((g) => ({ index: g.index, from: g.from, modes: g.modes })),
        removed_steps: grafted.removed,
      }
    : !online && result.derivation
      ? { ...result.derivation }
      : { derived_from: source.id, purified_offline: false, unchanged: true };
}

/** Writes the derived trajectory (created once, its steps, completed with the source's reward). */
async function writeDerived(
  store: PurifyPool,
  c: {
    source: Trajectory;
    derivedId: string;
    into: string;
    existing: Trajectory | null;
    steps: NewStep[];
    derivation: Record<string, unknown>;
    /** An offline purification's report, for the derived trajectory's metadata. */
    cleanerReport: unknown;
    groupSizes: Map<string, number>;
    clock: () => number;
  },
): Promise<void> {
  const { source, derivedId, into, existing, steps, derivation, groupSizes, clock } = c;
  // The derived group mirrors the source group: as many rollouts as it completed.
  const groupKey = `${source.channel}\u0000${source.groupId}`;
  let size = groupSizes.get(groupKey);
  if (size === undefined) {
    size = (await store.getGroup(source.channel, source.groupId))?.nComplete ?? 1;
    groupSizes.set(groupKey, size);
  }
  if (!existing) {
    await store.createTrajectory(
      {
        id: derivedId,
        groupId: source.groupId,
        channel: into,
        nRollouts: size,
        metadata: {
          ...source.metadata,
          // An online run keeps its own record; an offline purification writes its report.
          ...(c.cleanerReport ? { cleaner: c.cleanerReport } : {}),
        },
        taskId: source.taskId,
        guided: source.guided,
        guidanceK: source.guidanceK,
        derivedFrom: source.id,
        derivation,
      },
      clock(),
    );
  }
  // Steps already written by a run that crashed are skipped by the store as duplicates.
  const [outcome] = await store.submitBatch([{ channel: into, nRollouts: size, steps }], clock());
  if (outcome && !outcome.ok) throw outcome.error;
  await store.completeTrajectory(derivedId, { reward: source.reward, status: 'complete' }, clock());
}

/** Why a trajectory is never purified (derived itself, a probe, not complete), or null. */
function ineligibleReason(source: Trajectory): PurifySkipReason | null {
  if (source.derivedFrom !== null) return 'derived';
  if (source.probe) return 'probe';
  if (source.status !== 'complete') return 'not_complete';
  return null;
}

/** The tool outputs the gateway flagged as failures, keyed by call id (alphanumerics) and content. */
function flaggedOutputs(steps: readonly Step[]): Set<string> {
  return new Set(
    steps.flatMap((s) =>
      (s.toolResults ?? [])
        .filter((r) => r.error)
        .map((r) => `${(r.tool_call_id ?? '').replace(/[^0-9a-z]/gi, '')}\u0000${r.content}`),
    ),
  );
}

/** How many repairs a purification made, and their mode (online: the run's own record). */
function repairsOf(
  online: ReturnType<typeof onlineCleaner>,
  result: ReturnType<typeof purifyTrajectory>,
): { repairs: number; mode: PurifySummary['trajectories'][number]['mode'] } {
  if (!online) return { repairs: result.repairs.length, mode: result.derivation?.mode ?? null };
  const modes = online.repairs.map((r) => r.mode);
  return { repairs: modes.length, mode: modes.length > 0 ? modeOf(modes) : null };
}
