import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ExportRequest } from '../export/request.js';
import { runExport } from '../export/run-export.js';
import { startServer } from '../gateway/server.js';
import { referenceTasks } from '../gym/cli.js';
import { runGym, summarize } from '../gym/runner.js';
import { checkSandbox } from '../gym/sandbox/index.js';
import { synthesize } from '../gym/synth/index.js';
import { StepwiseClient } from '../sdk/client.js';

export interface DemoOptions {
  /** Keep the store, the SFT export and the run state here (default: a temporary directory). */
  out?: string;
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
}

/*
 * The main job, end to end on the embedded default (SQLite + the built-in sim engine):
 * 1. `stepwise serve` in process, its sim playing the `reference` policy over a synthesized task set
 *    (it follows each task's reference actions, with mistakes it then corrects, and sometimes gives
 *    up part way);
 * 2. the gym runs the built-in Claw agent on every task × N samples through the gateway, each sample
 *    in a sandboxed workspace, and verifies it: every LLM call is a step, every score a reward, every
 *    task a prompt group;
 * 3. a trainer leases the groups with GRPO advantages (nacks one batch to show it comes back first),
 *    acks them and advances the policy version after each simulated weight sync;
 * 4. the verified successes are exported as an SFT dataset.
 */
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
  const server = await startServer({
    dbPath: join(out, 'stepwise.db'),
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
      `stepwise serving on ${server.url} (store: SQLite at ${join(out, 'stepwise.db')}; engine: built-in sim)`,
    );
    say(`tasks     synthesized ${tasks.length}: ${[...new Set(tasks.map((t) => t.category))].join(', ')}`);
    const runId = `demo-${o.seed}`;
    const gym = runGym({
      tasks,
      samples: o.rollouts,
      concurrency: o.concurrency,
      gatewayUrl: server.url,
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
    });
    // The trainer leases while the agents work: groups are served as they complete.
    let consumedGroups = 0;
    let consumedSteps = 0;
    let nacked = false;
    let version = 0;
    let gymDone = false;
    const finished = gym.then(
      (r) => {
        gymDone = true;
        return r;
      },
      (error: unknown) => {
        gymDone = true;
        throw error;
      },
    );
    while (consumedGroups < tasks.length) {
      const size = Math.min(o.batchSize, tasks.length - consumedGroups);
      const batch = await client.lease({
        batchSize: size,
        nRollouts: o.rollouts,
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
      say(
        `trainer   leased ${batch.groups.length} groups, ${steps} steps; GRPO advantages ${advantages.join(' ')}`,
      );
      if (!nacked) {
        nacked = true;
        await client.nack(batch.lease_id);
        say('trainer   nacked it (simulated failed update): the same groups are served again first');
        continue;
      }
      await client.ack(batch.lease_id);
      consumedGroups += batch.groups.length;
      consumedSteps += steps;
      version++;
      await client.setPolicyVersion(version);
      say(`trainer   acked; weights synced, policy version -> ${version}`);
    }
    const { results } = await finished;
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
    };
  } finally {
    await client.close();
    await server.close();
    if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  }
}
