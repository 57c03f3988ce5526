import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ExportRequest } from '@stepwise/core/export/request.js';
import { runExport } from '@stepwise/core/export/run-export.js';
import { StepwiseClient } from '@stepwise/core/sdk/client.js';
import { startServer } from '@stepwise/core/server/server.js';
import { describeLocation } from '@stepwise/core/store/open-store.js';
import { type GymRunOptions, runGym, summarize } from '@stepwise/gym/runner.js';
import { checkSandbox } from '@stepwise/gym/sandbox/index.js';
import { referenceTasks } from '@stepwise/gym/tasks/index.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import { synthesize } from '@stepwise/gym-synth/index.js';
import { embeddedStoreOf, requireNewStore, serverStore } from '../embedded-store.js';
import {
  type ActGuideDemoResult,
  type CleanerDemoResult,
  demoSections,
  type SectionOptions,
} from './demo-sections.js';

export interface DemoOptions extends SectionOptions {
  /** Keep the store, the SFT export and the run state here (default: a temporary directory). */
  out?: string;
  /** The store (`--db`): a new SQLite file or an empty PostgreSQL schema; default `<out>/stepwise.db`. */
  db?: string;
  pgSchema?: string;
  port: number;
  /** Synthesized tasks: one prompt group each. */
  tasks: number;
  /** Samples per task (the group size). */
  rollouts: number;
  batchSize: number;
  seed: number;
  /** Chance that the sim makes a wrong tool call first (then corrects it). */
  errorRate: number;
  /** Chance that an episode gives up part way (a failed rollout). */
  giveUpRate: number;
  concurrency: number;
  print: (line: string) => void;
}

export interface DemoResult {
  url: string;
  samples: number;
  meanScore: number;
  mixedGroups: number;
  consumedGroups: number;
  consumedSteps: number;
  producedSteps: number;
  /** Tool results flagged as failed in the stored steps. */
  toolErrors: number;
  sftLines: number;
  sandboxed: boolean;
  /** The CLEANER comparison (null when `cleanerTasks` is 0). */
  cleaner: CleanerDemoResult | null;
  /** The ActGuide run (null when `guideTasks` is 0). */
  actguide: ActGuideDemoResult | null;
}

export async function runDemo(o: DemoOptions): Promise<DemoResult> {
  const say = o.print;
  const tempDir = o.out ? null : mkdtempSync(join(tmpdir(), 'stepwise-demo-'));
  const out = o.out ? resolve(o.out) : tempDir!;
  mkdirSync(out, { recursive: true });
  const sandboxed = checkSandbox().ok;
  if (!sandboxed) {
    say('WARNING: bubblewrap is not available: the demo runs ITS OWN synthesized tasks WITHOUT a sandbox.');
    say('         Install it (apt-get install -y bubblewrap) to isolate them; `stepwise gym run` never runs');
    say('         unsandboxed unless told --unsafe-no-sandbox.');
  }
  const tasks = synthesize({ n: o.tasks, seed: o.seed });
  const store = embeddedStoreOf(o, out, 'stepwise.db');
  await requireNewStore(store).catch((error: unknown) => {
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
    throw error;
  });
  const server = await startServer({
    ...serverStore(store),
    port: o.port,
    engines: ['sim'],
    sim: {
      policy: 'reference',
      tasks: referenceTasks(tasks),
      errorRate: o.errorRate,
      giveUpRate: o.giveUpRate,
      seed: o.seed,
    },
  });
  const client = new StepwiseClient({ baseUrl: server.url });
  try {
    say(
      `stepwise serving on ${server.url} (store: ${store.kind === 'sqlite' ? 'SQLite' : 'PostgreSQL'} at ${describeLocation(store)}; engine: built-in sim)`,
    );
    say(`tasks     synthesized ${tasks.length}: ${[...new Set(tasks.map((t) => t.category))].join(', ')}`);
    const runId = `demo-${o.seed}`;
    const gym = runGym(demoRun(o, { out, gatewayUrl: server.url, tasks, runId, sandboxed }));
    // The trainer leases while the agents work: groups are served as they complete.
    const { consumedGroups, consumedSteps } = await demoTrainer(client, gym, {
      groups: tasks.length,
      batchSize: o.batchSize,
      rollouts: o.rollouts,
      say,
    });
    const { results } = await gym;
    const summary = summarize(results, 0);
    const manifest = await runExport({
      store: server.pool.store,
      request: ExportRequest.parse({ kind: 'sft', min_reward: 1 }),
      outDir: join(out, 'sft'),
      overwrite: true,
    });
    const stats = await client.stats('train');
    const stored = await server.pool.listSteps({ channel: 'train', limit: 100_000, offset: 0 });
    const toolErrors = stored.items.reduce(
      (n, s) => n + (s.toolResults ?? []).filter((r) => r.error).length,
      0,
    );
    say(
      `gym       ${summary.samples} samples, mean score ${summary.meanScore.toFixed(3)}; groups: ${summary.groups.mixed} mixed, ${summary.groups.allOne} all-one, ${summary.groups.allZero} all-zero`,
    );
    say(
      `export    SFT: ${manifest.counts.records} conversations of verified successes -> ${join(out, 'sft', 'sft.jsonl')}${tempDir ? ' (a temporary directory: pass --out DIR to keep it)' : ''}`,
    );
    say(
      `stats     produced ${stats.produced.steps} steps / ${stats.produced.trajectories} trajectories, consumed ${stats.consumed.groups} groups / ${stats.consumed.steps} steps, tool errors recorded ${toolErrors}`,
    );
    say(
      `browse    ${server.url}/v1/stats · ${server.url}/v1/trajectories (the dashboard comes with issue 8)`,
    );
    const { cleaner, actguide } = await demoSections(o, {
      out,
      seed: o.seed,
      concurrency: o.concurrency,
      sandboxed,
      say,
    });
    return {
      url: server.url,
      samples: summary.samples,
      meanScore: summary.meanScore,
      mixedGroups: summary.groups.mixed,
      consumedGroups,
      consumedSteps,
      producedSteps: stats.produced.steps,
      toolErrors,
      sftLines: manifest.counts.records,
      sandboxed,
      cleaner,
      actguide,
    };
  } finally {
    await client.close();
    await server.close();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
}

/** The demo's gym run: every task `rollouts` times by the built-in agent, each sample reported. */
function demoRun(
  o: DemoOptions,
  c: { out: string; gatewayUrl: string; tasks: GymTask[]; runId: string; sandboxed: boolean },
): GymRunOptions {
  const say = o.print;
  const { out, runId, tasks, sandboxed, gatewayUrl } = c;
  return {
    tasks,
    samples: o.rollouts,
    concurrency: o.concurrency,
    gatewayUrl,
    model: 'sim-qwen3',
    agent: { kind: 'builtin', maxTurns: 24 },
    runId,
    stateFile: join(out, `state-${runId}.jsonl`),
    workDir: join(out, 'work'),
    sampleTimeoutMs: 120_000,
    unsafeNoSandbox: !sandboxed,
    onSample: (r, done, total) =>
      say(
        `agent     ${done}/${total} ${r.taskId} #${r.sample}: score ${r.score.toFixed(2)}, ${r.toolCalls} tool calls, ${r.toolErrors} failed`,
      ),
  };
}

/**
 * The demo's trainer: leases groups as they complete while `gym` runs, nacks the first batch (a
 * failed update, served again), acks the rest and bumps the policy version after each.
 */
async function demoTrainer(
  client: StepwiseClient,
  gym: Promise<unknown>,
  c: { groups: number; batchSize: number; rollouts: number; say: (line: string) => void },
): Promise<{ consumedGroups: number; consumedSteps: number }> {
  let consumedGroups = 0;
  let consumedSteps = 0;
  let nacked = false;
  let version = 0;
  let gymDone = false;
  gym.then(
    () => {
      gymDone = true;
    },
    () => {
      gymDone = true;
    },
  );
  while (consumedGroups < c.groups) {
    const size = Math.min(c.batchSize, c.groups - consumedGroups);
    const batch = await client.lease({
      batchSize: size,
      nRollouts: c.rollouts,
      waitMs: gymDone ? 0 : 5_000,
      consumer: 'demo-trainer',
      advantage: 'grpo',
    });
    if (!batch) {
      if (gymDone) break; // what is left never completed a group (e.g. infrastructure failures)
      continue;
    }
    const steps = batch.groups.reduce(
      (n, g) => n + g.trajectories.reduce((m, t) => m + t.steps.length, 0),
      0,
    );
    const advantages = batch.groups.map(
      (g) => `[${g.trajectories.map((t) => (t.advantage ?? 0).toFixed(2)).join(' ')}]`,
    );
    c.say(
      `trainer   leased ${batch.groups.length} groups, ${steps} steps; GRPO advantages ${advantages.join(' ')}`,
    );
    if (!nacked) {
      nacked = true;
      await client.nack(batch.lease_id);
      c.say('trainer   nacked it (simulated failed update): the same groups are served again first');
      continue;
    }
    await client.ack(batch.lease_id);
    consumedGroups += batch.groups.length;
    consumedSteps += steps;
    version++;
    await client.setPolicyVersion(version);
    c.say(`trainer   acked; weights synced, policy version -> ${version}`);
  }
  return { consumedGroups, consumedSteps };
}
