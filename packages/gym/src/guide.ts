import { appendFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  chooseGuidanceK,
  GuidanceConfig,
  type GuidanceConfigInput,
  guidedPrompt,
  type InjectionMode,
  isHardGroup,
  type PlanAction,
  parseOrThrow,
  planFromSteps,
  renderHint,
  StepwiseError,
  StepwiseHttpError,
} from '@stepwise/core';
import {
  type GuideDecision,
  type GuideSummary,
  type PlanSource,
  readDecisions,
  summarizeGuidance,
} from './guide-decisions.js';
import { type GymRunOptions, type GymSummary, runGym, type SampleResult } from './runner.js';
import { serverClient } from './server-client.js';
import type { GymTask } from './tasks/schema.js';

// ActGuide-RL on a gym run: unguided first, then every hard group held, guided (k chosen by probes for
// `adaptive`) and replaced. docs/actguide.md#a-gym-run-with-guidance
// What a decision records, and the decisions file, is guide-decisions.ts.

export const REPLACED_TAG = 'actguide-replaced';

export interface GuideOptions extends GuidanceConfigInput {
  /** Imported action logs: a plan per task id, for tasks without reference actions. */
  actionLogs?: ReadonlyMap<string, readonly PlanAction[]>;
  /** Look for a stored rollout that solved the task when neither gives a plan (default true). */
  storedPlans?: boolean;
  /** Where the hint goes: the user message (default) or an assistant prefix (docs/actguide.md). */
  injectionMode?: InjectionMode;
  /** Hold the unguided groups for guidance, so no trainer leases a hard one (default true). */
  hold?: boolean;
  /**
   * How often the guide holds its not-yet-decided hard groups again (default 10 minutes), restarting
   * their `guidance_hold_timeout_ms`: a long guide phase never sees a waiting group time out.
   */
  holdRefreshMs?: number;
  /** Channel of the probe rollouts (default `<channel>-probe`). */
  probeChannel?: string;
  /** A key with the admin scope, for labelling replaced rollouts (default: the run's apiKey). */
  adminApiKey?: string;
  /** The guide's own state (decisions, probe and guided samples); default `<stateFile>.guide/`. */
  stateDir?: string;
  onDecision?: (decision: GuideDecision) => void;
  onSample?: (result: SampleResult, phase: 'probe' | 'guided') => void;
}

export interface GuidedRunOptions extends GymRunOptions {
  guide: GuideOptions;
}

export interface GuidedRunResult {
  results: SampleResult[];
  summary: GymSummary;
  guidance: {
    decisions: GuideDecision[];
    summary: GuideSummary;
    probes: SampleResult[];
    guided: SampleResult[];
  };
}

const defaultStateDir = (stateFile: string) => `${stateFile.replace(/\.jsonl$/, '')}.guide`;

/** Marks replaced rollouts untrainable (POST /v1/labels, admin scope); they stay for inspection. */
async function labelReplaced(
  options: GuidedRunOptions,
  replaced: readonly { trajectoryId: string; guidedGroup: string }[],
) {
  if (replaced.length === 0) return;
  const key = options.guide.adminApiKey ?? options.apiKey;
  const labels = replaced.map(({ trajectoryId, guidedGroup }) => ({
    trajectory_uid: trajectoryId,
    trainable: false,
    tags: [REPLACED_TAG],
    note: `ActGuide: a hard group, replaced by the guided group ${guidedGroup}`,
    author: 'actguide',
  }));
  try {
    await serverClient(options.gatewayUrl, key).addLabels(labels);
  } catch (error) {
    if (!(error instanceof StepwiseHttpError)) throw error;
    const scope =
      error.status === 401 || error.status === 403 ? ' (labels need a key with the admin scope)' : '';
    throw new Error(
      `labelling replaced rollouts failed: ${error.url} answered ${error.status}${scope}: ${error.responseBody ?? error.message}`,
    );
  }
}

const scores = (results: readonly SampleResult[]) =>
  results.filter((r) => r.status === 'complete').map((r) => r.score);

/** Runs the tasks, then guides the hard groups (see the module comment). */
export async function runGuided(
  options: GuidedRunOptions,
  runSamples: typeof runGym = runGym,
): Promise<GuidedRunResult> {
  const config = parseOrThrow(GuidanceConfig, stripHooks(options.guide), 'guide');
  const { guide, ...gymOptions } = options;
  const mode: InjectionMode = guide.injectionMode ?? 'user_prompt';
  const holding = guide.hold !== false;
  const unguided = await runSamples({
    ...gymOptions,
    ...(holding ? { holdForGuidance: config.threshold } : {}),
  });
  const stateDir = guide.stateDir ?? defaultStateDir(options.stateFile);
  mkdirSync(stateDir, { recursive: true });
  const decisionsFile = join(stateDir, 'decisions.jsonl');
  const decided = readDecisions(decisionsFile);
  const channel = options.channel ?? 'train';
  const todo = undecidedGroups(options, unguided.results, decided, config.threshold);
  const plans = await plansOfHardGroups(todo, options, config.threshold);
  if (options.signal?.aborted) return { ...unguided, guidance: guidanceSoFar(decided, options.tasks) };
  const run: GuideRun = {
    options,
    gymOptions,
    runSamples,
    config,
    mode,
    holding,
    stateDir,
    probeChannel: guide.probeChannel ?? `${channel}-probe`,
    probes: [],
    guided: [],
    plans,
    holds: groupHolds(options, channel, todo),
  };

  const decisions = new Map(decided);
  let refresher: NodeJS.Timeout | null = null;
  if (holding) {
    await run.holds.refresh();
    refresher = setInterval(() => void run.holds.refresh(), guide.holdRefreshMs ?? 10 * 60_000);
    refresher.unref();
  }
  let failure: { error: unknown } | null = null;
  try {
    failure = await decideAll(run, todo, decisions, decisionsFile);
  } finally {
    if (refresher) clearInterval(refresher);
    // A failed guide releases every group it did not decide: none waits for a replacement that will
    // not come. A run cut short (aborted) keeps them held for a resumed run, as before.
    if (holding && !options.signal?.aborted) await run.holds.releaseUndecided();
  }
  if (failure !== null) throw failure.error;
  const { probes, guided } = run;
  return { ...unguided, guidance: { ...guidanceSoFar(decisions, options.tasks), probes, guided } };
}

/** A task's unguided group, judged hard or not, waiting for the guide's decision. */
interface GroupToDecide {
  task: GymTask;
  groupId: string;
  rewards: number[];
  hard: boolean;
  /** Its trajectories, labelled untrainable once a guided group replaces it. */
  replaced: string[];
}

/** What the guide's steps share: the run, its guidance settings and the guide's state so far. */
interface GuideRun {
  options: GuidedRunOptions;
  gymOptions: GymRunOptions;
  runSamples: typeof runGym;
  config: GuidanceConfig;
  mode: InjectionMode;
  holding: boolean;
  stateDir: string;
  probeChannel: string;
  /** The probe and guided samples run so far, pass by pass. */
  probes: SampleResult[];
  guided: SampleResult[];
  plans: ReadonlyMap<string, ResolvedPlan>;
  holds: ReturnType<typeof groupHolds>;
}

/** The tasks without a decision yet, by id, each with its unguided group's rewards and hardness. */
function undecidedGroups(
  options: GuidedRunOptions,
  unguided: readonly SampleResult[],
  decided: ReadonlyMap<string, GuideDecision>,
  threshold: number,
): GroupToDecide[] {
  const byTask = new Map<string, SampleResult[]>();
  for (const r of unguided) byTask.set(r.taskId, [...(byTask.get(r.taskId) ?? []), r]);
  return [...options.tasks]
    .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0))
    .filter((t) => !decided.has(t.id))
    .map((task) => {
      const results = byTask.get(task.id) ?? [];
      const groupId = results[0]?.groupId ?? `${options.runId}.${task.id}`;
      const rewards = scores(results);
      const hard = isHardGroup(rewards, threshold);
      const replaced = results.flatMap((r) => (r.trajectoryUid ? [r.trajectoryUid] : []));
      return { task, groupId, rewards, hard, replaced };
    });
}

/** The plan of each hard group's task, looked up one task at a time. */
async function plansOfHardGroups(
  todo: readonly GroupToDecide[],
  options: GuidedRunOptions,
  threshold: number,
): Promise<Map<string, ResolvedPlan>> {
  // Every hard group is guided: with its plan, else with the hint None (the paper re-runs them all).
  const plans = new Map<string, ResolvedPlan>();
  for (const t of todo)
    if (t.hard)
      plans.set(
        t.task.id,
        (await planFor(t.task, options, threshold)) ?? { actions: [], source: 'none', from: null },
      );
  return plans;
}

/**
 * The holds of the groups not decided yet: held again now (the unguided pass may have been long),
 * then every holdRefreshMs, and released in the end if the guide fails before deciding them.
 */
function groupHolds(options: GuidedRunOptions, channel: string, todo: readonly GroupToDecide[]) {
  const hold = (t: GroupToDecide) => groupHold(options, channel, t.groupId);
  const undecided = new Set(todo);
  let refreshing: Promise<void> = Promise.resolve();
  return {
    hold,
    refresh: () => {
      refreshing = (async () => {
        for (const item of undecided)
          if (item.hard)
            await hold(item)
              .hold()
              .catch(() => {});
      })();
      return refreshing;
    },
    // Before a group's hold is released: no refresh may hold it again after.
    settle: async (item: GroupToDecide) => {
      undecided.delete(item);
      await refreshing;
    },
    releaseUndecided: async () => {
      for (const item of undecided)
        await hold(item)
          .release('abandoned')
          .catch(() => {});
    },
  };
}

/**
 * Decides the groups of `todo`, a few at once, each decision appended to the decisions file as it is
 * made; the first failure stops the rest and is returned (a run cut short just stops).
 */
async function decideAll(
  run: GuideRun,
  todo: readonly GroupToDecide[],
  decisions: Map<string, GuideDecision>,
  decisionsFile: string,
): Promise<{ error: unknown } | null> {
  const { options, config } = run;
  let next = 0;
  let failure: { error: unknown } | null = null;
  // Each guided task runs its passes with up to `samples` rollouts at once: share the concurrency.
  const width = Math.max(
    1,
    Math.floor(options.concurrency / Math.max(options.samples, config.probeRollouts)),
  );
  const worker = async () => {
    while (next < todo.length && !options.signal?.aborted && failure === null) {
      const item = todo[next++]!;
      let decision: GuideDecision;
      try {
        decision = await decide(run, item);
      } catch (error) {
        if (error instanceof Aborted) return; // a pass cut short decides nothing
        // The other workers stop taking groups; what is left undecided runGuided releases.
        failure ??= { error };
        return;
      }
      if (options.signal?.aborted) return;
      appendFileSync(decisionsFile, `${JSON.stringify(decision)}\n`);
      decisions.set(item.task.id, decision);
      options.guide.onDecision?.(decision);
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, Math.max(1, todo.length)) }, worker));
  return failure;
}

/** One group's decision: a hard one guided (probes, then the guided group) and replaced, else left. */
async function decide(run: GuideRun, item: GroupToDecide): Promise<GuideDecision> {
  const { options, config, holding, holds } = run;
  const { task, groupId, rewards, hard, replaced } = item;
  const base = { taskId: task.id, groupId, rewards, hard };
  if (!hard) {
    // Not hard here (the store may have judged by a reward set later): it goes on to ready.
    await holds.settle(item);
    if (holding) await holds.hold(item).release('abandoned');
    return { ...base, reason: null, guidance: null };
  }
  // Held already when it settled; this also holds one that settled ready (e.g. a run made before).
  const note = holding ? await holds.hold(item).hold() : null;
  const plan = run.plans.get(task.id)!;
  const actions = plan.actions;
  const guidedGroup = `${groupId}.guided`;
  let decision: GuideDecision;
  try {
    const choice = await chooseGuidanceK(
      actions,
      async (k) => scores(await guidedPass(run, task, groupId, plan, k, 'probe')),
      config,
    );
    const guidedRewards = scores(await guidedPass(run, task, groupId, plan, choice.k, 'guided'));
    if (options.signal?.aborted) throw new Aborted();
    decision = {
      ...base,
      reason: note,
      guidance: {
        k: choice.k,
        strategy: choice.strategy,
        hint: renderHint(actions, choice.k),
        planSource: plan.source,
        planFrom: plan.from,
        actions: actions.length,
        probes: choice.probes,
        groupId: guidedGroup,
        rewards: guidedRewards,
        rescued: guidedRewards.some((r) => r > config.threshold),
        replaced,
        mode: run.mode,
      },
    };
    // The guided group has landed: the hard group's rollouts are kept but never trained on.
    await labelReplaced(
      options,
      replaced.map((trajectoryId) => ({ trajectoryId, guidedGroup })),
    );
  } catch (error) {
    // A run cut short stays held (a resumed run guides it; the hold times out otherwise). A failed
    // one is released as it was, unlabelled: no group waits for a replacement that will not come.
    if (!(error instanceof Aborted) && !options.signal?.aborted && holding) {
      await holds.settle(item);
      await holds
        .hold(item)
        .release('abandoned')
        .catch(() => {});
    }
    throw error;
  }
  await holds.settle(item);
  if (holding) await holds.hold(item).release('replaced');
  return decision;
}

/** One pass of a task with a hint of k actions: probe rollouts, or the guided group itself. */
async function guidedPass(
  run: GuideRun,
  task: GymTask,
  groupId: string,
  plan: ResolvedPlan,
  k: number,
  phase: 'probe' | 'guided',
): Promise<SampleResult[]> {
  const { options, config, mode } = run;
  const actions = plan.actions;
  const hint = renderHint(actions, k);
  const samples = phase === 'probe' ? config.probeRollouts : options.samples;
  const guidance = {
    k,
    strategy: config.strategy,
    hint,
    mode,
    actions: actions.length,
    plan_source: plan.source,
    ...(plan.from ? { plan_from: plan.from } : {}),
  };
  const { results } = await run.runSamples({
    ...run.gymOptions,
    // In assistant_prefix mode the task prompt stays as it is: the gateway opens each call with the hint.
    tasks: [mode === 'user_prompt' ? { ...task, prompt: guidedPrompt(task.prompt, hint) } : task],
    samples,
    concurrency: Math.max(1, Math.min(options.concurrency, samples)),
    channel: phase === 'probe' ? run.probeChannel : options.channel,
    stateFile: join(
      run.stateDir,
      phase === 'probe' ? `probe-${task.id}-k${k}.jsonl` : `guided-${task.id}.jsonl`,
    ),
    groupOf: () => (phase === 'probe' ? `${groupId}.probe-${k}` : `${groupId}.guided`),
    guidance: { kind: phase === 'probe' ? 'probe' : 'guided', k, hint, mode },
    metadataOf: () => ({
      guidance:
        phase === 'probe'
          ? { ...guidance, probe: true, for_group: groupId }
          : { ...guidance, off_policy: true, replaces: groupId },
    }),
    onSample: (result) => options.guide.onSample?.(result, phase),
  });
  (phase === 'probe' ? run.probes : run.guided).push(...results);
  return results;
}

/** A guided pass cut short by the run's signal: it decides nothing. */
class Aborted extends StepwiseError {
  override readonly name = 'Aborted';
  constructor() {
    super('the guided run was stopped', 499, 'aborted');
  }
}

/**
 * Holds and releases a group for guidance (POST /v1/groups/guidance, admin scope). A hold refused
 * because a trainer already leased the group is not an error: the guidance goes on, and the note
 * says that group was served as it was.
 */
function groupHold(options: GuidedRunOptions, channel: string, groupId: string) {
  const server = serverClient(options.gatewayUrl, options.guide.adminApiKey ?? options.apiKey);
  // null when done; the server's answer when it refused with a conflict (the group is leased).
  const send = async (action: 'hold' | 'release', call: () => Promise<unknown>): Promise<string | null> => {
    try {
      await call();
      return null;
    } catch (error) {
      if (!(error instanceof StepwiseHttpError)) throw error;
      const text = error.responseBody ?? error.message;
      if (error.status === 409) return text;
      const scope =
        error.status === 401 || error.status === 403
          ? ' (holding groups needs a key with the admin scope)'
          : '';
      throw new Error(
        `${action} of group ${groupId} failed: ${error.url} answered ${error.status}${scope}: ${text}`,
      );
    }
  };
  return {
    hold: async () => {
      const refused = await send('hold', () => server.holdForGuidance(channel, groupId));
      return refused === null ? null : `not held: ${refused}`;
    },
    release: async (reason: 'replaced' | 'abandoned') => {
      await send('release', () => server.releaseGuidance(channel, groupId, reason));
    },
  };
}

/** The decisions made so far, in task order, with their summary. */
function guidanceSoFar(decisions: ReadonlyMap<string, GuideDecision>, tasks: readonly GymTask[]) {
  const ordered = tasks.flatMap((t) => {
    const d = decisions.get(t.id);
    return d ? [d] : [];
  });
  return { decisions: ordered, summary: summarizeGuidance(ordered), probes: [], guided: [] };
}

/** The scheduler's fields of the guide options (the rest are this module's). */
function stripHooks(guide: GuideOptions): GuidanceConfigInput {
  const {
    probeChannel,
    adminApiKey,
    stateDir,
    onDecision,
    onSample,
    actionLogs,
    storedPlans,
    injectionMode,
    hold,
    holdRefreshMs,
    ...config
  } = guide;
  return config;
}

interface ResolvedPlan {
  actions: readonly PlanAction[];
  source: PlanSource;
  from: string | null;
}

/**
 * The plan a hard task is guided with: its reference actions, else an imported action log, else the
 * successful calls of a stored rollout that solved it (the most recent complete one scoring above the
 * threshold, read through the pool API with the guide's key); null when none has a plan.
 */
async function planFor(
  task: GymTask,
  options: GuidedRunOptions,
  threshold: number,
): Promise<ResolvedPlan | null> {
  if (task.referenceActions && task.referenceActions.length > 0)
    return { actions: task.referenceActions, source: 'reference', from: null };
  const logged = options.guide.actionLogs?.get(task.id);
  if (logged && logged.length > 0) return { actions: logged, source: 'action_log', from: null };
  if (options.guide.storedPlans === false) return null;
  const server = serverClient(options.gatewayUrl, options.guide.adminApiKey ?? options.apiKey);
  const lookUp = async <T>(call: () => Promise<T>): Promise<T> => {
    try {
      return await call();
    } catch (error) {
      if (!(error instanceof StepwiseHttpError)) throw error;
      const url = new URL(error.url ?? options.gatewayUrl);
      const path = `${url.pathname}${url.search}`;
      const scope =
        error.status === 401 || error.status === 403
          ? ' (reading stored rollouts needs the trainer scope)'
          : '';
      throw new Error(`looking up a plan for ${task.id}: ${path} answered ${error.status}${scope}`);
    }
  };
  const query = { taskId: task.id, status: 'complete', rewardMin: threshold, limit: 50, offset: 0 };
  const page = await lookUp(() => server.listTrajectories(query));
  const solved = page.items
    .filter((t) => t.reward !== null && t.reward > threshold && !t.probe)
    .sort((a, b) => b.created_at - a.created_at);
  for (const t of solved) {
    const full = await lookUp(() => server.getTrajectory(t.trajectory_uid));
    const actions = planFromSteps(
      full.steps.map((s) => ({
        index: s.step_index,
        toolCalls: s.tool_calls as never,
        toolResults: s.tool_results,
      })),
    );
    if (actions.length > 0) return { actions, source: 'stored', from: t.trajectory_uid };
  }
  return null;
}
