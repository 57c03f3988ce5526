import {
  GUIDE_STRATEGIES,
  type GuidanceProbe,
  type GuideStrategy,
  INJECTION_MODES,
  type InjectionMode,
} from '@stepwise/core';
import { z } from 'zod';
import { readStateLines } from './runner.js';

// The guide's decisions (guide.ts): what one says, its line in the decisions file, and their summary.
// Apart from the guide itself: read back on resume and by the state-file checks without running it.

/** Where a guided task's plan came from, in the order they are tried; `none`: no plan, hint `None`. */
export const PLAN_SOURCES = ['reference', 'action_log', 'stored', 'none'] as const;
export type PlanSource = (typeof PLAN_SOURCES)[number];

export interface GuidanceRecord {
  k: number;
  strategy: GuideStrategy;
  hint: string;
  planSource: PlanSource;
  /** With `stored`: the trajectory whose successful calls are the plan. */
  planFrom: string | null;
  /** Length of the plan the hint was cut from. */
  actions: number;
  probes: GuidanceProbe[];
  /** The guided group served in the hard group's place. */
  groupId: string;
  rewards: number[];
  /** A guided rollout scored above the threshold. */
  rescued: boolean;
  /** The unguided trajectories labelled untrainable. */
  replaced: string[];
  /** Where the hint went. */
  mode: InjectionMode;
}

export interface GuideDecision {
  taskId: string;
  /** The unguided group. */
  groupId: string;
  /** Scores of its complete rollouts. */
  rewards: number[];
  hard: boolean;
  /** Why a hard group was left as it was, or a note on its hold (leased before it could be held). */
  reason: string | null;
  guidance: GuidanceRecord | null;
}

export interface GuideSummary {
  /** Groups with at least one complete unguided rollout. */
  groups: number;
  hard: number;
  guided: number;
  rescued: number;
  /** hard / groups. */
  hardFraction: number;
  /** rescued / hard. */
  rescuedFraction: number;
  probeRollouts: number;
  guidedRollouts: number;
}

const rewards = z.array(z.number());
const count = z.number().int().min(0);

/** A line of the guide's decisions file, as the guide writes it. */
const GuideDecisionLine: z.ZodType<GuideDecision> = z.object({
  taskId: z.string(),
  groupId: z.string(),
  rewards,
  hard: z.boolean(),
  reason: z.string().nullable(),
  guidance: z
    .object({
      k: count,
      strategy: z.enum(GUIDE_STRATEGIES),
      hint: z.string(),
      planSource: z.enum(PLAN_SOURCES),
      planFrom: z.string().nullable(),
      actions: count,
      probes: z.array(z.object({ k: count, rewards })),
      groupId: z.string(),
      rewards,
      rescued: z.boolean(),
      replaced: z.array(z.string()),
      mode: z.enum(INJECTION_MODES),
    })
    .nullable(),
});

export function readDecisions(path: string): Map<string, GuideDecision> {
  const decisions = new Map<string, GuideDecision>();
  // A line torn by a crash mid-write is skipped: that task is decided again (its samples resume from their state).
  for (const d of readStateLines(path, GuideDecisionLine)) decisions.set(d.taskId, d);
  return decisions;
}

export function summarizeGuidance(decisions: readonly GuideDecision[]): GuideSummary {
  const groups = decisions.filter((d) => d.rewards.length > 0).length;
  const hard = decisions.filter((d) => d.hard).length;
  const guided = decisions.filter((d) => d.guidance !== null);
  const rescued = guided.filter((d) => d.guidance!.rescued).length;
  return {
    groups,
    hard,
    guided: guided.length,
    rescued,
    hardFraction: groups === 0 ? 0 : hard / groups,
    rescuedFraction: hard === 0 ? 0 : rescued / hard,
    probeRollouts: guided.reduce(
      (n, d) => n + d.guidance!.probes.reduce((m, p) => m + p.rewards.length, 0),
      0,
    ),
    guidedRollouts: guided.reduce((n, d) => n + d.guidance!.rewards.length, 0),
  };
}
