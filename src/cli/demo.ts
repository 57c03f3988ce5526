import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { newTrajectoryId } from '../domain/index.js';
import { startServer } from '../gateway/server.js';
import { StepwiseClient } from '../sdk/client.js';
import { seededRandom, syntheticTrajectory } from './synthetic.js';

export interface DemoOptions {
  db?: string;
  port: number;
  groups: number;
  rollouts: number;
  steps: number;
  batchSize: number;
  seed: number;
  print: (line: string) => void;
}

/**
 * The end-to-end loop on the embedded default: a white-box producer submits multi-step rollouts
 * over HTTP while a trainer leases complete groups, acks them and advances the policy version.
 */
export async function runDemo(o: DemoOptions): Promise<{ consumedGroups: number; consumedSteps: number }> {
  const tempDir = o.db ? null : mkdtempSync(join(tmpdir(), 'stepwise-demo-'));
  const dbPath = o.db ?? join(tempDir!, 'demo.db');
  const server = await startServer({ dbPath, port: o.port, channelDefaults: { n_rollouts: o.rollouts } });
  const client = new StepwiseClient({ baseUrl: server.url });
  const say = o.print;
  say(`stepwise serving on ${server.url} (store: SQLite at ${dbPath})`);
  const random = seededRandom(o.seed);
  let version = 0;

  const producer = (async () => {
    for (let g = 0; g < o.groups; g++) {
      const promptUid = `prompt-${g}`;
      await Promise.all(
        Array.from({ length: o.rollouts }, async () => {
          const trajectoryUid = newTrajectoryId();
          const steps = syntheticTrajectory({
            trajectoryUid,
            promptUid,
            steps: o.steps,
            systemTokens: 48,
            observationTokens: 24,
            responseTokens: 16,
            breakProbability: 0.1,
            policyVersion: version,
            withLogprobs: true,
            random,
          });
          // Submit step by step, as an agent does while it runs.
          for (const step of steps) await client.submitSteps([step]);
        }),
      );
      say(`producer  prompt-${g}: ${o.rollouts} rollouts x ${o.steps} steps submitted`);
    }
  })();

  let consumedGroups = 0;
  let consumedSteps = 0;
  let nacked = false;
  const totalBatches = Math.ceil(o.groups / o.batchSize);
  for (let b = 0; b < totalBatches; b++) {
    const size = Math.min(o.batchSize, o.groups - consumedGroups);
    const batch = await client.lease({
      batchSize: size,
      nRollouts: o.rollouts,
      waitMs: 10_000,
      consumer: 'demo-trainer',
    });
    if (!batch) {
      say('trainer   no batch within 10 s; stopping');
      break;
    }
    const steps = batch.groups.reduce(
      (n, g) => n + g.trajectories.reduce((m, t) => m + t.steps.length, 0),
      0,
    );
    const rewards = batch.groups.map((g) => g.trajectories.map((t) => t.reward ?? 0).join(','));
    say(
      `trainer   leased ${batch.lease_id.slice(0, 14)}…: ${batch.groups.length} groups [${batch.groups
        .map((g) => g.group_id)
        .join(', ')}], ${steps} steps, rewards ${rewards.map((r) => `[${r}]`).join(' ')}`,
    );
    if (!nacked) {
      nacked = true;
      await client.nack(batch.lease_id);
      say('trainer   nacked it (simulated failed step): the same groups are served again first');
      b--;
      continue;
    }
    await client.ack(batch.lease_id);
    consumedGroups += batch.groups.length;
    consumedSteps += steps;
    version++;
    await client.setPolicyVersion(version);
    say(`trainer   acked; weights synced, policy version -> ${version}`);
  }
  await producer;
  const stats = await client.stats('train');
  say(
    `stats     produced ${stats.produced.steps} steps / ${stats.produced.trajectories} trajectories, consumed ${stats.consumed.groups} groups / ${stats.consumed.steps} steps, prefix breaks ${stats.prefixBreaks}, queue depth ${stats.queueDepth}`,
  );
  await client.close();
  await server.close();
  if (tempDir) rmSync(tempDir, { recursive: true, force: true });
  return { consumedGroups, consumedSteps };
}
