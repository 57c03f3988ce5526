import { join } from 'node:path';
import { HINT_HEADING } from '@stepwise/core/curation/actguide/index.js';
import { StepwiseClient } from '@stepwise/core/sdk/client.js';
import { startServer } from '@stepwise/core/server/server.js';
import { contentText } from '@stepwise/core/text/content.js';
import { REPLACED_TAG, runGuided } from '@stepwise/gym/guide.js';
import type { GuideSummary } from '@stepwise/gym/guide-decisions.js';
import { runGym, type SampleResult } from '@stepwise/gym/runner.js';
import { referenceTasks } from '@stepwise/gym/tasks/index.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import { synthesize } from '@stepwise/gym-synth/index.js';

// The demo's two algorithm sections, each on a store and sim of its own: CLEANER (the same tasks
// without and with rollback) and ActGuide-RL (hard groups replaced by guided ones).

/** What the sections take from the demo's options. */
export interface SectionOptions {
  /** CLEANER part: tasks run twice, without and with CLEANER (default 3; 0 skips the part). */
  cleanerTasks?: number;
  /** CLEANER part: samples per task in each pass (default 2). */
  cleanerSamples?: number;
  /** CLEANER part: the sim's chance of a wrong tool call before each right one (default 0.5). */
  cleanerErrorRate?: number;
  /** ActGuide part: tasks the sim cannot finish without a plan (default 3; 0 skips the part). */
  guideTasks?: number;
  /** ActGuide part: rollouts per group, unguided and guided (default 2). */
  guideSamples?: number;
  /** ActGuide part: share of a task's actions the plan in the prompt must show (default 0.6). */
  needsPlan?: number;
  seed: number;
}

/** One pass of the CLEANER comparison, read back from the store. */
export interface CleanerPassResult {
  samples: number;
  meanScore: number;
  /** LLM calls captured (the regenerations of a rollback included). */
  steps: number;
  /** Tool results the gateway flagged as failed on the stored steps: failed attempts are captured either way. */
  capturedToolErrors: number;
  /** Flagged tool results still in the final contexts (each trajectory's last prompt): what is trained on. */
  contextToolErrors: number;
  /** Trajectories whose final context holds at least one of them. */
  trajectoriesWithContextErrors: number;
}

export interface CleanerDemoResult {
  errorRate: number;
  tasks: number;
  plain: CleanerPassResult;
  cleaner: CleanerPassResult;
  /** Summed over the CLEANER pass's `metadata.cleaner`. */
  rollbacksTriggered: number;
  recovered: number;
  failed: number;
  shallow: number;
  deep: number;
  removedErrorTypes: Record<string, number>;
  /** The rollout shown side by side: a plain trajectory and its CLEANER twin (same task, same seed). */
  example: {
    taskId: string;
    sample: number;
    plainTrajectory: string;
    cleanerTrajectory: string;
    /** The plain run's final context, one line per call, result and answer. */
    before: string[];
    /** The CLEANER run's final context (the purified history the model saw), the same way. */
    after: string[];
  } | null;
}

export interface ActGuideTaskResult {
  taskId: string;
  /** Length of the task's reference plan. */
  actions: number;
  unguided: number[];
  hard: boolean;
  /** The chosen hint length (null: not guided). */
  k: number | null;
  probes: { k: number; rewards: number[] }[];
  guided: number[];
}

export interface ActGuideDemoResult extends GuideSummary {
  needsPlan: number;
  tasks: ActGuideTaskResult[];
  /** Read back from the store. */
  stored: {
    /** Trajectories of the guided groups in the training channel. */
    guided: number;
    /** Of those, the ones whose metadata carries `guidance` (k, hint, off_policy, replaces). */
    guidedWithGuidance: number;
    /** Unguided rollouts of hard groups labelled `trainable: false` (kept for inspection). */
    replacedUntrainable: number;
    /** Probe rollouts, in their own channel. */
    probes: number;
  };
}

// The main job on the embedded default (SQLite + the sim): 1. serve in process, the sim playing
// `reference`; 2. the gym runs the built-in agent on every task × N, sandboxed and verified; 3. a trainer
// leases with GRPO advantages (nacks one batch), acks, advances the version; 4. SFT export; 5. CLEANER
// without and with rollback; 6. ActGuide-RL, k chosen by probes. 5 and 6 use servers of their own.
export /** The CLEANER and ActGuide-RL sections of the demo, each skipped when given no tasks. */
async function demoSections(
  o: SectionOptions,
  section: Omit<SectionContext, 'tasks' | 'samples'>,
): Promise<{ cleaner: CleanerDemoResult | null; actguide: ActGuideDemoResult | null }> {
  const cleanerTasks = o.cleanerTasks ?? 3;
  const cleaner =
    cleanerTasks > 0
      ? await demoCleaner({
          ...section,
          tasks: synthesize({ n: cleanerTasks, seed: o.seed }),
          samples: o.cleanerSamples ?? 2,
          errorRate: o.cleanerErrorRate ?? 0.5,
        })
      : null;
  const guideTasks = o.guideTasks ?? 3;
  const actguide =
    guideTasks > 0
      ? await demoActGuide({
          ...section,
          tasks: synthesize({ n: guideTasks, seed: o.seed }),
          samples: o.guideSamples ?? 2,
          needsPlan: o.needsPlan ?? 0.6,
        })
      : null;
  return { cleaner, actguide };
}

interface SectionContext {
  out: string;
  seed: number;
  concurrency: number;
  sandboxed: boolean;
  say: (line: string) => void;
  tasks: readonly GymTask[];
  samples: number;
}

type StoredTrajectory = Awaited<ReturnType<StepwiseClient['getTrajectory']>>;
type WireMessage = { role?: unknown; content?: unknown; tool_calls?: unknown };
type WireToolCall = { function?: { name?: unknown; arguments?: unknown } };

const sum = (xs: readonly number[]) => xs.reduce((a, b) => a + b, 0);
const mean = (xs: readonly number[]) => (xs.length === 0 ? 0 : sum(xs) / xs.length);
const pct = (x: number) => `${(100 * x).toFixed(0)}%`;
const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim();
const clip = (text: string, width: number) =>
  text.length <= width ? text : `${text.slice(0, Math.max(0, width - 1))}…`;

/** Tool outputs the gateway flagged as failures, anywhere in a trajectory's stored steps. */
function flaggedOutputs(t: StoredTrajectory): Set<string> {
  return new Set(t.steps.flatMap((s) => (s.tool_results ?? []).filter((r) => r.error).map((r) => r.content)));
}

/** The context of a trajectory's last LLM call: what the model saw last, and what is trained on. */
const finalContext = (t: StoredTrajectory) => (t.steps.at(-1)?.messages ?? []) as WireMessage[];

/** Tool messages of the final context whose output the gateway flagged as a failure. */
function contextErrors(t: StoredTrajectory): number {
  const flagged = flaggedOutputs(t);
  return finalContext(t).filter((m) => m.role === 'tool' && flagged.has(contentText(m.content))).length;
}

/** The final context after the task prompt, one line per tool call, tool result and answer. */
function contextLines(t: StoredTrajectory): string[] {
  const flagged = flaggedOutputs(t);
  const lines: string[] = [];
  for (const m of finalContext(t)) {
    if (m.role === 'assistant') {
      const text = oneLine(contentText(m.content));
      if (text) lines.push(`"${text}"`);
      for (const c of (Array.isArray(m.tool_calls) ? m.tool_calls : []) as WireToolCall[])
        lines.push(`→ ${String(c.function?.name)} ${String(c.function?.arguments ?? '')}`);
    } else if (m.role === 'tool') {
      const output = contentText(m.content);
      lines.push(`${flagged.has(output) ? '✗' : '✓'} ${oneLine(output) || '(empty)'}`);
    }
  }
  const answer = t.steps.at(-1)?.response_text;
  if (answer) lines.push(`answer: ${oneLine(answer)}`);
  return lines;
}

/**
 * Two columns aligned on their longest common subsequence of lines, like a side-by-side diff: lines
 * only one side has are paired with the other side's lines of the same hunk, else with a blank.
 */
function sideBySide(left: readonly string[], right: readonly string[]): [string, string][] {
  const n = left.length;
  const m = right.length;
  const lcs = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      lcs[i]![j] =
        left[i] === right[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const rows: [string, string][] = [];
  let hunk: { left: string[]; right: string[] } = { left: [], right: [] };
  const flush = () => {
    for (let k = 0; k < Math.max(hunk.left.length, hunk.right.length); k++)
      rows.push([hunk.left[k] ?? '', hunk.right[k] ?? '']);
    hunk = { left: [], right: [] };
  };
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && left[i] === right[j]) {
      flush();
      rows.push([left[i++]!, right[j++]!]);
    } else if (j >= m || (i < n && lcs[i + 1]![j]! >= lcs[i]![j + 1]!)) hunk.left.push(left[i++]!);
    else hunk.right.push(right[j++]!);
  }
  flush();
  return rows;
}

async function readTrajectories(client: StepwiseClient, results: readonly SampleResult[]) {
  const byKey = new Map<string, { result: SampleResult; stored: StoredTrajectory }>();
  for (const r of results)
    if (r.trajectoryUid)
      byKey.set(`${r.taskId}#${r.sample}`, {
        result: r,
        stored: await client.getTrajectory(r.trajectoryUid),
      });
  return byKey;
}

function passResult(
  results: readonly SampleResult[],
  stored: readonly StoredTrajectory[],
): CleanerPassResult {
  const errors = stored.map(contextErrors);
  return {
    samples: results.length,
    meanScore: mean(results.map((r) => r.score)),
    steps: sum(stored.map((t) => t.steps.length)),
    capturedToolErrors: sum(
      stored.map((t) => sum(t.steps.map((s) => (s.tool_results ?? []).filter((r) => r.error).length))),
    ),
    contextToolErrors: sum(errors),
    trajectoriesWithContextErrors: errors.filter((e) => e > 0).length,
  };
}

/*
 * CLEANER online (docs/cleaner.md): the same tasks, the same sample seeds and so the same injected
 * mistakes, once with the plain built-in agent and once with CLEANER's rollback. Without it the
 * failed call and its error stay in the context that is trained on; with it the failed turn is
 * regenerated and rewritten out of the history. Everything shown is read back from the store.
 */
async function demoCleaner(c: SectionContext & { errorRate: number }): Promise<CleanerDemoResult> {
  const { say } = c;
  const server = await startServer({
    dbPath: join(c.out, 'cleaner.db'),
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: referenceTasks(c.tasks), errorRate: c.errorRate, seed: c.seed },
  });
  const client = new StepwiseClient({ baseUrl: server.url });
  try {
    say('');
    say(
      `cleaner   CLEANER online: ${c.tasks.length} tasks × ${c.samples} samples, the sim first makes a wrong tool call before a right one with p=${c.errorRate}; run without and with CLEANER (store: ${join(c.out, 'cleaner.db')})`,
    );
    // One run id for both passes: the same sample seeds, so the sim makes the same mistakes in each.
    const runId = `demo-cleaner-${c.seed}`;
    const pass = async (mode: 'plain' | 'cleaner') => {
      const { results } = await runGym({
        tasks: c.tasks,
        samples: c.samples,
        concurrency: c.concurrency,
        gatewayUrl: server.url,
        model: 'sim-qwen3',
        agent: { kind: 'builtin', maxTurns: 24, ...(mode === 'cleaner' ? { cleaner: {} } : {}) },
        runId,
        channel: mode === 'plain' ? 'cleaner-off' : 'cleaner-on',
        groupOf: (task) => `${runId}.${mode}.${task.id}`,
        stateFile: join(c.out, `state-${runId}-${mode}.jsonl`),
        workDir: join(c.out, 'work'),
        sampleTimeoutMs: 120_000,
        unsafeNoSandbox: !c.sandboxed,
      });
      const stored = await readTrajectories(client, results);
      const summary = passResult(
        results,
        [...stored.values()].map((s) => s.stored),
      );
      say(
        `cleaner   ${mode === 'plain' ? 'without CLEANER:' : 'with CLEANER:   '} ${summary.samples} samples, mean score ${summary.meanScore.toFixed(2)}, ${summary.steps} LLM calls; failed tool calls: ${summary.capturedToolErrors} captured, ${summary.contextToolErrors} left in the final contexts (${summary.trajectoriesWithContextErrors} of ${summary.samples} trajectories)`,
      );
      return { stored, summary };
    };
    const plain = await pass('plain');
    const cleaned = await pass('cleaner');

    const reports = [...cleaned.stored.values()].map(
      ({ stored }) => (stored.metadata.cleaner ?? {}) as Record<string, unknown>,
    );
    const total = (key: string) => sum(reports.map((r) => (typeof r[key] === 'number' ? r[key] : 0)));
    const removedErrorTypes: Record<string, number> = {};
    for (const r of reports)
      for (const [type, n] of Object.entries((r.removed_error_types ?? {}) as Record<string, number>))
        removedErrorTypes[type] = (removedErrorTypes[type] ?? 0) + n;
    const rollbacks = {
      rollbacksTriggered: total('rollbacks_triggered'),
      recovered: total('recovered'),
      failed: total('failed'),
      shallow: total('shallow'),
      deep: total('deep'),
    };
    say(
      `cleaner   rollbacks: ${rollbacks.rollbacksTriggered} triggered, ${rollbacks.recovered} recovered, ${rollbacks.failed} failed; repairs ${rollbacks.shallow} shallow (reasoning kept, call replaced), ${rollbacks.deep} deep (whole turn replaced); removed errors ${Object.entries(
        removedErrorTypes,
      )
        .map(([type, n]) => `${type} ×${n}`)
        .join(', ')}`,
    );

    const example = cleanerExample(plain.stored, cleaned.stored, say);
    return {
      errorRate: c.errorRate,
      tasks: c.tasks.length,
      plain: plain.summary,
      cleaner: cleaned.summary,
      ...rollbacks,
      removedErrorTypes,
      example,
    };
  } finally {
    await client.close();
    await server.close();
  }
}

/*
 * ActGuide-RL (docs/actguide.md): the sim's `needsPlan` makes the tasks unsolvable without a plan, so
 * every unguided group is hard (all rewards 0, no GRPO signal). The guide picks k, the shortest
 * prefix of the reference actions that works, by probe rollouts, and runs a guided group with that
 * hint in its place; the replaced rollouts are kept but labelled untrainable.
 */
async function demoActGuide(c: SectionContext & { needsPlan: number }): Promise<ActGuideDemoResult> {
  const { say } = c;
  const server = await startServer({
    dbPath: join(c.out, 'actguide.db'),
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: referenceTasks(c.tasks), needsPlan: c.needsPlan, seed: c.seed },
  });
  const client = new StepwiseClient({ baseUrl: server.url });
  try {
    say('');
    say(
      `actguide  ActGuide-RL: ${c.tasks.length} tasks × ${c.samples} samples; the sim finishes a task only when a plan in the prompt shows ≥ ${pct(c.needsPlan)} of its actions (store: ${join(c.out, 'actguide.db')})`,
    );
    const runId = `demo-guide-${c.seed}`;
    const run = await runGuided({
      tasks: c.tasks,
      samples: c.samples,
      concurrency: c.concurrency,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent: { kind: 'builtin', maxTurns: 24 },
      runId,
      stateFile: join(c.out, `state-${runId}.jsonl`),
      workDir: join(c.out, 'work'),
      sampleTimeoutMs: 120_000,
      unsafeNoSandbox: !c.sandboxed,
      guide: { strategy: 'adaptive', probeRollouts: 2, maxProbeSteps: 5 },
    });
    // From the decisions rather than as they come: a re-run with --out reuses them and decides nothing.
    for (const d of run.guidance.decisions) {
      const g = d.guidance;
      const probes = g?.probes.map((p) => `k=${p.k} [${p.rewards.join(' ')}]`).join(', ');
      say(
        `actguide  ${d.taskId}: unguided [${d.rewards.join(' ')}] ${d.hard ? 'hard' : 'not hard'}${
          g
            ? `; probes ${probes || 'none'} → k=${g.k}/${g.actions}; guided [${g.rewards.join(' ')}] ${g.rescued ? 'rescued' : 'still hard'}`
            : d.reason
              ? ` (${d.reason})`
              : ''
        }`,
      );
    }
    const s = run.guidance.summary;
    say(
      `actguide  ${s.hard} of ${s.groups} groups hard (${pct(s.hardFraction)}), ${s.rescued} rescued (${pct(s.rescuedFraction)}); ${s.probeRollouts} probe and ${s.guidedRollouts} guided rollouts`,
    );

    // What the store holds: guided groups in the training channel with their guidance, the replaced
    // rollouts labelled untrainable, the probes in their own channel.
    const train = await client.listTrajectories({ channel: 'train', limit: 500 });
    const guidedTrajectories = train.items.filter((t) => t.prompt_uid.endsWith('.guided'));
    const guidance = (t: { metadata: Record<string, unknown> }) =>
      t.metadata.guidance as
        | { k?: number; hint?: string; off_policy?: boolean; replaces?: string }
        | undefined;
    const withGuidance = guidedTrajectories.filter((t) => {
      const g = guidance(t);
      return g?.off_policy === true && typeof g.hint === 'string' && typeof g.k === 'number';
    });
    const replaced = await client.listTrajectories({ trainable: false, label: REPLACED_TAG, limit: 500 });
    const probes = await client.listTrajectories({ channel: 'train-probe', limit: 500 });
    say(
      `actguide  store: ${guidedTrajectories.length} guided trajectories (${withGuidance.length} with metadata.guidance off_policy), ${replaced.total} unguided ones labelled trainable=false '${REPLACED_TAG}', ${probes.total} probes in channel train-probe`,
    );
    if (withGuidance[0]) await showGuided(client, withGuidance[0], say);
    const tasks: ActGuideTaskResult[] = run.guidance.decisions.map((d) => ({
      taskId: d.taskId,
      actions: d.guidance?.actions ?? c.tasks.find((t) => t.id === d.taskId)?.referenceActions?.length ?? 0,
      unguided: d.rewards,
      hard: d.hard,
      k: d.guidance?.k ?? null,
      probes: d.guidance?.probes ?? [],
      guided: d.guidance?.rewards ?? [],
    }));
    return {
      needsPlan: c.needsPlan,
      ...s,
      tasks,
      stored: {
        guided: guidedTrajectories.length,
        guidedWithGuidance: withGuidance.length,
        replacedUntrainable: replaced.total,
        probes: probes.total,
      },
    };
  } finally {
    await client.close();
    await server.close();
  }
}

type PassTrajectories = Awaited<ReturnType<typeof readTrajectories>>;

/** The CLEANER rollout with the most rollbacks beside its plain twin: their final contexts, side by side. */
function cleanerExample(
  plain: PassTrajectories,
  cleaned: PassTrajectories,
  say: (line: string) => void,
): CleanerDemoResult['example'] {
  let example: CleanerDemoResult['example'] = null;
  let most = 0;
  for (const [key, { result, stored }] of cleaned) {
    const twin = plain.get(key);
    const n = Number(
      (stored.metadata.cleaner as { rollbacks_triggered?: number } | undefined)?.rollbacks_triggered ?? 0,
    );
    if (!twin || n <= most) continue;
    most = n;
    example = {
      taskId: result.taskId,
      sample: result.sample,
      plainTrajectory: twin.stored.trajectory_uid,
      cleanerTrajectory: stored.trajectory_uid,
      before: contextLines(twin.stored),
      after: contextLines(stored),
    };
  }
  if (example) {
    const width = 52;
    say(
      `cleaner   one rollout, ${example.taskId} #${example.sample}: the final stored context of each run (its last LLM call's messages)`,
    );
    say(
      `          ${'without CLEANER (errors stay, trained on)'.padEnd(width)} │ with CLEANER (failed turns rolled back)`,
    );
    for (const [left, right] of sideBySide(example.before, example.after))
      say(`          ${clip(left, width).padEnd(width)} │ ${clip(right, width)}`);
    say(
      `          stored as trajectories ${example.plainTrajectory} (channel cleaner-off) and ${example.cleanerTrajectory} (cleaner-on)`,
    );
  }
  return example;
}

/** A guided trajectory's guidance and the hint section of its stored first prompt. */
async function showGuided(
  client: StepwiseClient,
  shown: { trajectory_uid: string; metadata: Record<string, unknown> },
  say: (line: string) => void,
): Promise<void> {
  const g = shown.metadata.guidance as Record<string, unknown>;
  const steps = (await client.getTrajectory(shown.trajectory_uid)).steps;
  const user = ((steps[0]?.messages ?? []) as WireMessage[]).find((m) => m.role === 'user');
  const prompt = contentText(user?.content);
  const at = prompt.indexOf(HINT_HEADING);
  const { hint: _hint, ...rest } = g;
  say(`actguide  guided trajectory ${shown.trajectory_uid}: metadata.guidance ${JSON.stringify(rest)}`);
  say('actguide  the hint section of its stored step-0 prompt, after the task prompt:');
  for (const line of (at >= 0 ? prompt.slice(at) : prompt).split('\n')) say(`          ${clip(line, 110)}`);
}
