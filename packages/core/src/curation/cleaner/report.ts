import type { JsonObject } from '../../domain/json.js';
import type { CleanerMetrics, RepairMode, ResolvedCleanerOptions, SaarTurn } from './saar.js';

/*
 * What CLEANER did to one trajectory, in the two shapes it travels in: a typed report for code, and
 * snake_case JSON for the trajectory's metadata (`metadata.cleaner`), online and offline alike.
 */

/** One rollback: a failed attempt rolled out of the context and the regeneration that replaced it. */
export interface RepairRecord {
  /** The step that made the failed attempt (null when it is not known). */
  failedStep: number | null;
  /** The step that regenerated the turn (T'). */
  retryStep: number | null;
  similarity: number;
  mode: RepairMode;
  errorTypes: string[];
}

export interface CleanerReport {
  options: ResolvedCleanerOptions;
  metrics: CleanerMetrics;
  repairs: RepairRecord[];
  /** Regenerations asked for and never received (the episode ended while one was owed). */
  abandonedSteps?: number[];
  /** The `<tool_call>` id of the tokenizer the run split responses with (graft.ts). */
  toolCallTokenId?: number | null;
}

/**
 * Steps whose tokens are not on the purified path as they were captured: the failed attempts that
 * were rolled back, and the regenerations whose call (shallow) or whole turn (deep) took their place
 * after being generated with the error in view.
 */
export function purifiedStepIndices(repairs: readonly RepairRecord[]): number[] {
  const set = new Set<number>();
  for (const r of repairs) {
    if (r.failedStep !== null) set.add(r.failedStep);
    if (r.retryStep !== null) set.add(r.retryStep);
  }
  return [...set].sort((a, b) => a - b);
}

/** `metadata.cleaner` of a trajectory. */
export function cleanerMetadata(report: CleanerReport): JsonObject {
  const { metrics: m, options: o } = report;
  return {
    rollbacks_triggered: m.rollbacksTriggered,
    recovered: m.recovered,
    failed: m.failed,
    shallow: m.shallow,
    deep: m.deep,
    removed_error_types: { ...m.removedErrorTypes },
    purified_step_indices: purifiedStepIndices(report.repairs),
    tool_attempts: m.attempts,
    rollback_enabled: m.enabled,
    disabled_by: m.disabledBy,
    repairs: report.repairs.map((r) => ({
      failed_step: r.failedStep,
      retry_step: r.retryStep,
      similarity: r.similarity,
      mode: r.mode,
      error_types: [...r.errorTypes],
    })),
    options: { p: o.p, max_retries: o.maxRetries, max_attempts: o.maxAttempts, threshold: o.threshold },
    ...(report.abandonedSteps && report.abandonedSteps.length > 0
      ? { abandoned_steps: [...report.abandonedSteps] }
      : {}),
    ...(report.toolCallTokenId != null ? { tool_call_token_id: report.toolCallTokenId } : {}),
  };
}

/** An OpenAI chat tool call, as agents send them back. */
export interface ChatToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/** An OpenAI-shaped assistant turn as SAAR sees it (`callText`: its decoded call segment, if known). */
export function chatTurn(content: unknown, calls: readonly ChatToolCall[], callText?: string): SaarTurn {
  return {
    reasoning: typeof content === 'string' ? content : null,
    calls: calls.map((c) => ({ name: c.function.name, arguments: c.function.arguments })),
    ...(callText !== undefined ? { callText } : {}),
  };
}

/**
 * The assistant message that replaces a rolled-back one: the failed message's text with the
 * regenerated tool calls (shallow), or the regenerated message whole (deep).
 */
export function repairedAssistantMessage<M extends { tool_calls?: unknown }>(
  failed: M,
  regenerated: M,
  mode: RepairMode,
): M {
  return mode === 'shallow' ? { ...failed, tool_calls: regenerated.tool_calls } : { ...regenerated };
}
