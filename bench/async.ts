/**
 * Fully asynchronous RL, a scale model of the loop (issue 40): the real gateway, pool and trainer
 * protocol over loopback HTTP, with sims standing in for GPU engines and a trainer stand-in.
 *
 *   npm run bench:async              the three rhythms side by side, recorded in bench/results/async.jsonl
 *   npm run bench:async -- --quick   fewer versions; its row says quick
 *
 * - Engines: sims whose running sequences share a decode budget (a GPU's throughput: each sequence
 *   at most PER_SEQUENCE tokens/s, all of them at most BUDGET together).
 * - Agents: multi-turn episodes (1 to 6 turns) with long-tailed response lengths (log-normal, as
 *   agent rollouts are) and tool latencies between turns, through the gateway with the official
 *   openai client; a task's rollouts are one group.
 * - Trainer: leases a batch of groups, "trains" for a time that grows with the batch's tokens, acks,
 *   and switches the fleet to the next version through the gateway.
 * Rhythms: synchronous (a version's rollouts start once it is in force; the switch drains),
 * one-step-off (rollouts one version ahead; the switch drains), and fully asynchronous (admission
 * control with max_staleness 1 and partial rollouts: the switch aborts and the gateway continues the
 * cut generations). Reported per rhythm: samples/s, engine busy fraction, trainer idle fraction, the
 * staleness histogram of served groups, partial steps, and whether every served token is within the
 * staleness budget.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { type RunningSimServer, startSimServer } from '../packages/core/src/engines/sim/serve.js';
import { StepwiseClient } from '../packages/core/src/sdk/client.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { seededRandom } from '../packages/core/src/util/random.js';
import { codeVersion, exitOnHelp, fix, log, recordRun, round } from './support.js';

exitOnHelp(import.meta.url);
const quick = process.argv.includes('--quick');
const flag = (name: string, fallback: number) => {
  const at = process.argv.indexOf(name);
  return at === -1 ? fallback : Number(process.argv[at + 1]);
};

const SHAPE = {
  engines: 2,
  perSequence: 400, // tokens/s of one sequence alone
  budget: 3_200, // tokens/s all running sequences of an engine share
  groupsPerBatch: flag('--groups', 8),
  rollouts: 4,
  versions: quick ? 4 : 10,
  agents: flag('--agents', 64),
  maxTurns: 6,
  medianWords: 30, // a turn's response: log-normal around this many words (about 1.5 tokens each)
  sigma: 1.0,
  maxWords: 600,
  toolMedianMs: 60,
  trainBaseMs: flag('--train-base-ms', 1_500),
  trainPerTokenMs: flag('--train-per-token-ms', 0.1),
  maxStaleness: flag('--max-staleness', 1),
  /** How long one lease waits (for stragglers too) before taking what is ready: the trainer's knob. */
  leaseWaitMs: flag('--lease-wait-ms', 1_000),
};

type Rhythm = 'synchronous' | 'one-step-off' | 'async-partial';

interface Figures {
  rhythm: Rhythm;
  seconds: number;
  samples: number;
  samplesPerS: number;
  engineBusy: number;
  trainerIdle: number;
  staleness: Record<string, number>;
  partialSteps: number;
  withinBudget: boolean;
  dropped: number;
}

function logNormal(random: () => number, median: number, sigma: number): number {
  const u = Math.max(random(), 1e-12);
  const v = random();
  return median * Math.exp(sigma * Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v));
}

const sleep = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/** The version a group's rollouts may start under, by rhythm (null: admission control decides). */
function gate(rhythm: Rhythm, group: number): number | null {
  const batch = Math.floor(group / SHAPE.groupsPerBatch);
  if (rhythm === 'synchronous') return batch;
  if (rhythm === 'one-step-off') return batch - 1;
  return null;
}

/** One agent: episodes, one after another, on the next rollout slot, until stopped. */
async function agent(
  id: number,
  c: {
    server: RunningServer;
    sdk: StepwiseClient;
    rhythm: Rhythm;
    nextSlot: () => number;
    version: () => number;
    stop: AbortSignal;
  },
): Promise<void> {
  const random = seededRandom('agent', id);
  while (!c.stop.aborted) {
    const slot = c.nextSlot();
    const group = Math.floor(slot / SHAPE.rollouts);
    const needed = gate(c.rhythm, group);
    while (needed !== null && c.version() < needed && !c.stop.aborted) await sleep(10, c.stop);
    if (c.stop.aborted) return;
    try {
      await episode(c, group, random);
    } catch (error) {
      if (!c.stop.aborted) throw error;
    }
  }
}

async function episode(
  c: { server: RunningServer; sdk: StepwiseClient; stop: AbortSignal },
  group: number,
  random: () => number,
): Promise<void> {
  const t = await c.sdk.initTrajectory({ groupId: `g${group}`, nRollouts: SHAPE.rollouts, signal: c.stop });
  const client = new OpenAI({ baseURL: t.base_url, apiKey: 'x', maxRetries: 0 });
  const messages: OpenAI.Chat.ChatCompletionMessageParam[] = [];
  const turns = 1 + Math.floor(random() * SHAPE.maxTurns);
  for (let turn = 0; turn < turns; turn++) {
    const words = Math.min(
      SHAPE.maxWords,
      Math.max(1, Math.round(logNormal(random, SHAPE.medianWords, SHAPE.sigma))),
    );
    // The sim's echo policy answers with the last user message: its length is the response's.
    messages.push({ role: 'user', content: Array.from({ length: words }, (_, i) => `w${i % 97}`).join(' ') });
    const answer = await client.chat.completions.create({ model: 'sim', messages }, { signal: c.stop });
    messages.push({ role: 'assistant', content: answer.choices[0]!.message.content ?? '' });
    await sleep(logNormal(random, SHAPE.toolMedianMs, 0.8), c.stop);
    if (c.stop.aborted) return;
  }
  await c.sdk.completeTrajectory(t.trajectory_uid, { reward: random() < 0.5 ? 1 : 0 });
}

async function usage(sims: RunningSimServer[]): Promise<{ busy: number; total: number }> {
  let busy = 0;
  let total = 0;
  for (const s of sims) {
    const u = (await (await fetch(`${s.url}/sim/usage`)).json()) as { busy_ms: number; total_ms: number };
    busy += u.busy_ms;
    total += u.total_ms;
  }
  return { busy, total };
}

/** The trainer stand-in: lease, "train" for a time that grows with the batch's tokens, ack, switch. */
async function trainer(
  c: { server: RunningServer; sdk: StepwiseClient; rhythm: Rhythm; setVersion: (v: number) => void },
  figures: {
    idleMs: number;
    staleness: Record<string, number>;
    partialSteps: number;
    withinBudget: boolean;
    samples: number;
  },
): Promise<void> {
  for (let version = 0; version < SHAPE.versions; version++) {
    const waited = performance.now();
    const batch = await c.sdk.lease({
      batchSize: SHAPE.groupsPerBatch,
      waitMs: 120_000,
      maxStaleness: SHAPE.maxStaleness,
    });
    figures.idleMs += performance.now() - waited;
    if (!batch) throw new Error(`no batch for version ${version + 1} within 120 s`);
    let tokens = 0;
    for (const g of batch.groups) {
      figures.staleness[g.staleness] = (figures.staleness[g.staleness] ?? 0) + 1;
      for (const t of g.trajectories) {
        figures.samples++;
        for (const s of t.steps) {
          tokens += s.response_ids.length;
          const oldest = s.version_spans?.[0]?.[0] ?? s.policy_version;
          if (batch.policy_version - oldest > SHAPE.maxStaleness) figures.withinBudget = false;
          if (s.version_spans) figures.partialSteps++;
        }
      }
    }
    await sleep(SHAPE.trainBaseMs + SHAPE.trainPerTokenMs * tokens);
    await c.sdk.ack(batch.lease_id);
    const mode = c.rhythm === 'async-partial' ? 'abort' : 'wait';
    const res = await fetch(`${c.server.url}/v1/policy-version`, {
      method: 'PUT',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ version: version + 1, mode }),
    });
    if (res.status !== 200) throw new Error(`switch to ${version + 1}: ${res.status} ${await res.text()}`);
    c.setVersion(version + 1);
  }
}

async function runRhythm(rhythm: Rhythm): Promise<Figures> {
  const dir = mkdtempSync(join(os.tmpdir(), 'stepwise-bench-async-'));
  const sims = await Promise.all(
    Array.from({ length: SHAPE.engines }, () =>
      startSimServer({
        port: 0,
        policy: 'echo',
        ttftMs: 20,
        tokensPerSecond: SHAPE.perSequence,
        tokenBudget: SHAPE.budget,
      }),
    ),
  );
  const server = await startServer({
    dbPath: join(dir, 'pool.db'),
    port: 0,
    engines: sims.map((s) => `vllm=${s.url}`),
    channelDefaults: {
      n_rollouts: SHAPE.rollouts,
      max_staleness: SHAPE.maxStaleness,
      stale_policy: 'drop',
      ...(rhythm === 'async-partial' ? { batch_groups: SHAPE.groupsPerBatch } : {}),
    },
  });
  const sdk = new StepwiseClient({ baseUrl: server.url });
  const stop = new AbortController();
  let version = 0;
  let slot = 0;
  const figures = {
    idleMs: 0,
    staleness: {} as Record<string, number>,
    partialSteps: 0,
    withinBudget: true,
    samples: 0,
  };
  try {
    const before = await usage(sims);
    const started = performance.now();
    const agents = Array.from({ length: SHAPE.agents }, (_, i) =>
      agent(i, { server, sdk, rhythm, nextSlot: () => slot++, version: () => version, stop: stop.signal }),
    );
    await trainer(
      {
        server,
        sdk,
        rhythm,
        setVersion: (v) => {
          version = v;
        },
      },
      figures,
    );
    const seconds = (performance.now() - started) / 1000;
    const after = await usage(sims);
    stop.abort();
    await Promise.allSettled(agents);
    const dropped = (await sdk.stats()).dropped?.stale ?? 0;
    return {
      rhythm,
      seconds,
      samples: figures.samples,
      samplesPerS: figures.samples / seconds,
      engineBusy: (after.busy - before.busy) / (after.total - before.total),
      trainerIdle: figures.idleMs / 1000 / seconds,
      staleness: figures.staleness,
      partialSteps: figures.partialSteps,
      withinBudget: figures.withinBudget,
      dropped,
    };
  } finally {
    stop.abort();
    await sdk.close();
    await server.close();
    await Promise.all(sims.map((s) => s.close()));
    rmSync(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  log(
    `bench:async ${quick ? '(quick) ' : ''}at ${codeVersion()}: ${SHAPE.versions} versions of ${SHAPE.groupsPerBatch} groups × ${SHAPE.rollouts} rollouts, ${SHAPE.engines} engines`,
  );
  const results: Figures[] = [];
  for (const rhythm of ['synchronous', 'one-step-off', 'async-partial'] as const) {
    const f = await runRhythm(rhythm);
    results.push(f);
    log(
      `${rhythm.padEnd(13)} ${fix(f.samplesPerS)} samples/s (${f.samples} in ${fix(f.seconds, 1)} s), engines busy ${fix(f.engineBusy * 100, 0)}%, trainer idle ${fix(f.trainerIdle * 100, 0)}%, staleness ${JSON.stringify(f.staleness)}, partial steps ${f.partialSteps}, within budget ${f.withinBudget}, stale drops ${f.dropped}`,
    );
  }
  const sync = results[0]!.samplesPerS;
  const speedup = results.map((r) => round(r.samplesPerS / sync));
  log(
    `speed-up over synchronous: one-step-off ${fix(speedup[1]!)}×, fully async ${fix(speedup[2]!)}× (target ≥ 2.5×)`,
  );
  recordRun('async', {
    quick,
    shape: SHAPE,
    machine: { cores: os.cpus().length, load: os.loadavg().map((l) => round(l)) },
    rhythms: results.map((r) => ({
      ...r,
      samplesPerS: round(r.samplesPerS),
      engineBusy: round(r.engineBusy),
      trainerIdle: round(r.trainerIdle),
      seconds: round(r.seconds, 1),
    })),
    speedup_over_sync: { one_step_off: speedup[1], async_partial: speedup[2] },
  });
}

await main();
