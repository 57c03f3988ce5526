import { existsSync, mkdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ValidationError } from '@stepwise/core/domain/errors.js';
import { ExportRequest } from '@stepwise/core/export/request.js';
import { runExport } from '@stepwise/core/export/run-export.js';
import { type RunningServer, startServer } from '@stepwise/core/server/server.js';
import { describeLocation } from '@stepwise/core/store/open-store.js';
import { seededRandom } from '@stepwise/core/util/random.js';
import { type AgentSpec, runGym, type SampleResult } from '@stepwise/gym/runner.js';
import { checkSandbox } from '@stepwise/gym/sandbox/index.js';
import { referenceTasks } from '@stepwise/gym/tasks/index.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import { embeddedStoreOf, requireNewStore, serverStore } from '../embedded-store.js';
import { summarize, writeOutputs } from './outputs.js';
import type { Rounds, TrainOptions, TrainResult, VersionReward } from './types.js';

export type { TrainOptions, TrainResult, VersionReward };

import { type PythonProcess, requireTrainPython, spawnPython, startReferenceEngine } from './python.js';
import { configureSchedule, RolloutLedger, scheduledRound, starved } from './schedule.js';
import { COPY_TARGETS, copyTasks, mixedTasks } from './tasks.js';
import { type TrainerEvents, type TrainerUpdate, trainerEvents } from './trainer-events.js';

export type { TrainerUpdate };

// `stepwise train`: the RL loop on one machine, end to end (warm-up data, engine, rollouts, updates):
// docs/trainers.md#stepwise-train-the-loop-as-one-command

/** What the agent sends with every call, and what the warm-up renders its prompts with. */
const CHAT_TEMPLATE_KWARGS = { enable_thinking: false };
export const TRAIN_AGENT: AgentSpec = {
  kind: 'builtin',
  maxTurns: 4,
  turnTimeoutMs: 120_000,
  // The copy task needs one tool (src/train/tasks.ts); short descriptions keep the prompt short.
  tools: ['exec'],
  toolDescriptions: 'short',
  systemPrompt: 'You work in a local workspace.',
  chatTemplateKwargs: CHAT_TEMPLATE_KWARGS,
  temperature: 1,
  // Each turn of a copy task is under 40 tokens; an untrained model would otherwise run to the limit.
  maxTokens: 64,
};
const TRAIN_CHANNEL = 'train';
const EVAL_CHANNEL = 'eval';

import {
  DEFAULT_ADAM_EPS,
  DEFAULT_CLIP,
  DEFAULT_GROUPS,
  DEFAULT_LR,
  DEFAULT_PROMPTS_PER_KIND,
} from './defaults.js';

export { DEFAULT_ADAM_EPS, DEFAULT_CLIP, DEFAULT_GROUPS, DEFAULT_LR, DEFAULT_PROMPTS_PER_KIND };

/** Reference rollouts the warm-up learns from: the targets in turn (tasks.ts). */
const WARMUP_TASKS = 32;
/**
 * With zero-variance drops the trainer's lease can come back empty (the ready groups it waited for
 * were all dropped), and an empty lease uses up one of its `--versions`: it is given this many times
 * more, and the loop stops it once it has published `versions`.
 */
const DROP_LEASE_TRIES = 100;
/** How long the trainer must look stuck (no batch possible, nothing to hand out) before the run stops. */
const STARVED_MS = 10_000;

export async function runTrain(o: TrainOptions): Promise<TrainResult> {
  const started = performance.now();
  const say = o.print;
  const { out, init } = checkOptions(o);
  await requireNewStore(trainStore(o, out));
  const python = o.python ?? requireTrainPython();
  mkdirSync(join(out, 'rounds'), { recursive: true });
  const groups = o.groups ?? DEFAULT_GROUPS;
  const sandbox = checkSandbox();
  if (!sandbox.ok)
    say(`WARNING: no sandbox (${sandbox.reason}): the copy tasks' tools run unsandboxed (they are ours).`);
  const unsafeNoSandbox = !sandbox.ok;

  // 1. Reference rollouts by the sim, exported as SFT data.
  const sftDir = join(out, 'sft');
  // A run started from --init has its warm-up behind it: no reference rollouts to make.
  const warmup = init === undefined && o.warmupSteps > 0;
  if (warmup) {
    const tasks = copyTasks(seededRandom('warmup', o.seed), WARMUP_TASKS, 'warmup', COPY_TARGETS);
    await referenceRollouts({ out, tasks, seed: o.seed, sftDir, unsafeNoSandbox, say });
  }

  // 2. Engine, gateway, trainer.
  const engine = await startReferenceEngine({ python, model: 'tiny', seed: o.seed, threads: 1 });
  let server: RunningServer | null = null;
  let trainer: PythonProcess | null = null;
  try {
    say(`engine    reference engine (tiny Qwen3-architecture model, seed ${o.seed}) on ${engine.url}`);
    const fixed = registeredTasks(o);
    server = await startGateway(o, { out, engineUrl: engine.url, groups, fixed });
    say(
      `serve     stepwise on ${server.url} (store ${describeLocation(trainStore(o, out))}; engine vllm=${engine.url})`,
    );
    const startVersion = await server.pool.policyVersion();
    const args = trainerArgs(o, {
      poolUrl: server.url,
      engineUrl: engine.url,
      init,
      warmup,
      sftDir,
      out,
      groups,
    });
    const proc = spawnPython(python, args);
    trainer = proc;
    // With drops the trainer was given spare versions (DROP_LEASE_TRIES): it ends at `versions` updates.
    const stopAt = (_: TrainerUpdate, count: number) => {
      if (count >= o.versions) proc.child.kill('SIGINT');
    };
    const events = trainerEvents(proc, say, o.zeroVariance === 'drop' ? stopAt : undefined);
    await events.ready;
    say(`trainer   ready at policy version ${startVersion}${o.update ? '' : ' (control run: no updates)'}`);

    // 3. Rollouts, asynchronously with the trainer.
    const rounds: Rounds = {
      o,
      serverUrl: server.url,
      pool: server.pool,
      out,
      groups,
      unsafeNoSandbox,
      say,
      samples: [],
      fixed,
      made: 0,
      idle: false,
      ledger: new RolloutLedger(o.tasks === 'mixed' ? (o.targetReward ?? null) : null),
    };
    const { rounds: made, stopped } = await trainRounds(rounds, { events, proc, startVersion });
    await events.done;
    const evalMean = await runRound(rounds, made, EVAL_CHANNEL, o.signal);

    // 4. Rewards by the version that generated each rollout; what the rounds spent.
    const result = await summarize(rounds, TRAIN_CHANNEL, { events, stopped, started, evalMean });
    writeOutputs(result, o, { python, engineUrl: engine.url, startVersion, groups });
    say(
      `reward    by version: ${result.rewardByVersion.map((v) => `v${v.version} ${v.meanReward.toFixed(2)}`).join(' · ')}`,
    );
    say(
      `wrote     ${join(out, 'train.json')} and ${join(out, 'reward.html')} (${result.seconds.toFixed(0)} s)`,
    );
    return result;
  } finally {
    await trainer?.stop(2000);
    await server?.close();
    await engine.stop(2000);
  }
}

/** The run's folder and starting model, refused before anything starts when they cannot be used. */
function checkOptions(o: TrainOptions): { out: string; init: string | undefined } {
  const out = resolve(o.out);
  // A second run on the same store would continue the first one's versions (a PostgreSQL store is
  // checked once open: requireNewStore).
  const store = trainStore(o, out);
  if (store.kind === 'sqlite' && existsSync(store.path))
    throw new ValidationError(
      o.db === undefined
        ? `out: ${out} already holds a train run (train.db); choose another directory`
        : `db: ${store.path} already exists; a train run starts a new store`,
      o.db === undefined ? 'out' : 'db',
    );
  const init = o.init === undefined ? undefined : resolve(o.init);
  if (init !== undefined && !existsSync(join(init, 'config.json')))
    throw new ValidationError(`init: ${init} is not a model folder (no config.json)`, 'init');
  const perKind = o.promptsPerKind ?? DEFAULT_PROMPTS_PER_KIND;
  if (!Number.isInteger(perKind) || perKind < 1)
    throw new ValidationError('promptsPerKind: must be a positive integer', 'promptsPerKind');
  return { out, init };
}

/** The task set a scheduled or mixed run registers once; null for the copy task's walk (fresh tasks each round). */
function registeredTasks(o: TrainOptions): GymTask[] | null {
  const perKind = o.promptsPerKind ?? DEFAULT_PROMPTS_PER_KIND;
  if (o.tasks === 'mixed') return mixedTasks(seededRandom('mixed', o.seed), perKind);
  if (o.schedule) return copyTasks(seededRandom('train', o.seed, 'set'), perKind, 'copy');
  return null;
}

/** The run's store: `db` (a new SQLite file or an empty PostgreSQL schema), else `<out>/train.db`. */
export const trainStore = (o: TrainOptions, out: string) => embeddedStoreOf(o, out, 'train.db');

/** The gateway in front of the engine, its train channel configured (schedule, curation). */
async function startGateway(
  o: TrainOptions,
  c: { out: string; engineUrl: string; groups: number; fixed: GymTask[] | null },
): Promise<RunningServer> {
  const server = await startServer({
    ...serverStore(trainStore(o, c.out)),
    port: o.port ?? 0,
    engines: [`vllm=${c.engineUrl}`],
    channelDefaults: {
      n_rollouts: o.rollouts,
      max_staleness: o.maxStaleness,
      stale_policy: 'drop',
      // Asynchronous rounds are held by admission control instead of waiting for versions.
      ...(o.async ? { batch_groups: c.groups } : {}),
    },
  });
  const zeroVariance = o.zeroVariance ?? 'keep';
  if (o.schedule && c.fixed)
    await configureSchedule(server.pool, TRAIN_CHANNEL, {
      policy: o.schedule,
      tasks: c.fixed,
      rollouts: o.rollouts,
      zeroVariance,
    });
  else if (zeroVariance === 'drop')
    await server.pool.configureChannel(TRAIN_CHANNEL, { curation: { zero_variance: 'drop' } });
  return server;
}

/** A walked round's tasks: fresh copy tasks, or the next `groups` of the registered set, in order. */
function roundTasks(c: Rounds, round: number, channel: string): GymTask[] {
  const { o, fixed, groups } = c;
  if (channel !== TRAIN_CHANNEL || fixed === null)
    return copyTasks(seededRandom('train', o.seed, round), groups, `r${round}`);
  return Array.from({ length: groups }, (_, i) => fixed[(round * groups + i) % fixed.length]!);
}

/** One round: `groups` groups of `rollouts` samples each, through the gym; its mean reward. */
async function runRound(c: Rounds, round: number, channel: string, signal?: AbortSignal): Promise<number> {
  const { o } = c;
  const runId = `train-${o.seed}-r${round}`;
  const gym = {
    concurrency: o.concurrency,
    gatewayUrl: c.serverUrl,
    model: 'tiny',
    agent: TRAIN_AGENT,
    runId,
    channel,
    stateFile: join(c.out, 'rounds', `${runId}.jsonl`),
    workDir: join(c.out, 'work'),
    sampleTimeoutMs: 300_000,
    unsafeNoSandbox: c.unsafeNoSandbox,
    signal,
  };
  const train = channel === TRAIN_CHANNEL;
  let results: SampleResult[];
  let tasks: GymTask[];
  if (train && o.schedule && c.fixed) {
    tasks = c.fixed;
    ({ results, idle: c.idle } = await scheduledRound({ ...gym, tasks, groups: c.groups }));
  } else {
    tasks = roundTasks(c, round, channel);
    ({ results } = await runGym({ ...gym, tasks, samples: o.rollouts }));
  }
  for (const result of results) c.samples.push({ result, round, channel });
  if (train) {
    c.made += new Set(results.map((r) => r.groupId)).size;
    c.ledger.add(results, tasks);
  }
  const scored = results.filter((r) => r.status === 'complete');
  const mean = scored.reduce((a, r) => a + r.score, 0) / Math.max(scored.length, 1);
  const which =
    channel === EVAL_CHANNEL
      ? ' (final policy)'
      : round < o.versions
        ? `/${o.versions}`
        : ' (for groups the pool dropped)';
  const failed = results.length - scored.length;
  const window = train && o.tasks === 'mixed' ? c.ledger.windowMean() : null;
  c.say(
    `rollouts  round ${round + 1}${which}: mean reward ${mean.toFixed(3)} over ${scored.length} rollouts${failed > 0 ? `, ${failed} infrastructure failures` : ''}` +
      (window === null ? '' : `; learnable: ${window.toFixed(3)} over the last ${c.ledger.windowSize}`),
  );
  return mean;
}

/**
 * Training rounds until the trainer has its batches (or a stop: the target, the rollout cap, a
 * scheduler with nothing left to hand out); the rounds made and why they stopped early. Rounds stop
 * when the trainer ends: one held by admission control would otherwise wait forever.
 */
async function trainRounds(
  c: Rounds,
  t: { events: TrainerEvents; proc: PythonProcess; startVersion: number },
): Promise<{ rounds: number; stopped: string | null }> {
  const { o, groups } = c;
  const { events } = t;
  const trainerEnded = new AbortController();
  void events.done.then(
    () => trainerEnded.abort(),
    () => trainerEnded.abort(),
  );
  const roundSignal = o.signal ? AbortSignal.any([o.signal, trainerEnded.signal]) : trainerEnded.signal;
  /** Polls `ready` until it holds (true) or the trainer has ended (false). */
  const until = async (ready: () => Promise<boolean>): Promise<boolean> => {
    for (;;) {
      if (events.failed()) throw events.error();
      if (trainerEnded.signal.aborted) return false;
      if (await ready()) return true;
      await sleep(200, o.signal);
    }
  };
  const versionAt = async (offset: number) => (await c.pool.policyVersion()) - t.startVersion >= offset;
  // The trainer takes `groups` groups per version; a group the pool drops (stale, timed out, no
  // variance) is made again by a further round, so a drop never leaves the trainer waiting for a batch.
  const kept = async () => {
    const { dropped } = await c.pool.stats(TRAIN_CHANNEL);
    return c.made - Object.values(dropped).reduce((a, n) => a + (n ?? 0), 0);
  };
  let rounds = 0;
  for (let round = 0; ; round++) {
    if (!(await until(async () => (await kept()) < o.versions * groups))) break;
    // Bounded lead: a round waits until the trainer is within max_staleness versions of the groups
    // made, so none is too stale (asynchronously, admission control holds each new group instead).
    const lead = async () => versionAt(Math.floor((await kept()) / groups) - o.maxStaleness);
    if (!o.async && !(await until(lead))) break;
    const mean = await runRound(c, round, TRAIN_CHANNEL, roundSignal);
    rounds = round + 1;
    const stopped = await stopReason(c, { mean, round, until, versionAt });
    if (stopped === undefined) break;
    if (stopped !== null) {
      c.say(`train     ${stopped}`);
      t.proc.child.kill('SIGINT');
      return { rounds, stopped };
    }
  }
  return { rounds, stopped: null };
}

/**
 * Why the rounds stop after `round` (null: they go on; undefined: the trainer ended meanwhile): the
 * target reached, the rollout cap spent, or a scheduler that has nothing to hand out while the
 * trainer cannot reach the version that would bring a retired prompt back.
 */
async function stopReason(
  c: Rounds,
  r: {
    mean: number;
    round: number;
    until: (ready: () => Promise<boolean>) => Promise<boolean>;
    versionAt: (offset: number) => Promise<boolean>;
  },
): Promise<string | null | undefined> {
  const { o, ledger } = c;
  if (o.tasks === 'mixed' && ledger.crossing)
    return `learnable mean reward ${ledger.crossing.mean.toFixed(3)} (last ${ledger.windowSize}) reached --target-reward ${o.targetReward} after ${ledger.crossing.rollouts} rollouts: stopping`;
  if (
    o.tasks !== 'mixed' &&
    o.targetReward !== undefined &&
    r.mean >= o.targetReward &&
    r.round < o.versions - 1
  ) {
    // The update of this round's batch is the last: the trainer finishes it, then ends (SIGINT).
    if (!(await r.until(() => r.versionAt(r.round + 1)))) return undefined;
    return `mean reward ${r.mean.toFixed(3)} reached --target-reward ${o.targetReward}: stopping after version ${r.round + 1}`;
  }
  if (o.maxRollouts !== undefined && ledger.rollouts >= o.maxRollouts)
    return `${ledger.rollouts} rollouts reached --max-rollouts ${o.maxRollouts}: stopping`;
  if (!c.idle) return null;
  // Nothing to hand out: wait for a version (re-tests come with versions) unless none can come.
  const from = await c.pool.policyVersion();
  let since: number | null = null;
  const settled = await r.until(async () => {
    if ((await c.pool.policyVersion()) > from) return true;
    if (!(await starved(c.pool, TRAIN_CHANNEL, c.groups))) since = null;
    else since ??= performance.now();
    return since !== null && performance.now() - since >= STARVED_MS;
  });
  if (!settled) return undefined;
  if ((await c.pool.policyVersion()) > from) return null;
  return `the scheduler has retired every prompt and the trainer, short of a batch, cannot reach the version that would re-test them (version ${from}): stopping`;
}

/** The Python trainer's command line (`python -m stepwise_client.rl ...`). */
function trainerArgs(
  o: TrainOptions,
  c: {
    poolUrl: string;
    engineUrl: string;
    init: string | undefined;
    warmup: boolean;
    sftDir: string;
    out: string;
    groups: number;
  },
): string[] {
  const { init, warmup, sftDir, out, groups } = c;
  return [
    '-m',
    'stepwise_client.rl',
    '--pool',
    c.poolUrl,
    '--engine',
    c.engineUrl,
    '--model',
    init ?? 'tiny',
    '--seed',
    String(o.seed),
    '--threads',
    '1',
    ...(warmup
      ? [
          '--sft',
          join(sftDir, 'sft.jsonl'),
          '--warmup-steps',
          String(o.warmupSteps),
          '--warmup-lr',
          String(o.warmupLr),
          '--save-warmup',
          join(out, 'warmup'),
        ]
      : []),
    '--chat-template-kwargs',
    JSON.stringify(CHAT_TEMPLATE_KWARGS),
    '--versions',
    String(o.zeroVariance === 'drop' ? o.versions * DROP_LEASE_TRIES : o.versions),
    '--batch-groups',
    String(groups),
    '--channel',
    TRAIN_CHANNEL,
    '--max-staleness',
    String(o.maxStaleness),
    '--lr',
    String(o.lr),
    '--adam-eps',
    String(o.adamEps ?? DEFAULT_ADAM_EPS),
    '--epochs',
    String(o.epochs),
    '--clip',
    String(o.clip ?? DEFAULT_CLIP),
    '--checkpoint',
    join(out, 'policy'),
    ...(o.update ? [] : ['--no-update']),
    ...(o.async ? ['--switch', o.async, '--versions-dir', join(out, 'versions')] : []),
  ];
}

/** The sim plays the reference agent on `tasks`; the verified rollouts become `sftDir/sft.jsonl`. */
async function referenceRollouts(c: {
  out: string;
  tasks: GymTask[];
  seed: number;
  sftDir: string;
  unsafeNoSandbox: boolean;
  say: (line: string) => void;
}): Promise<void> {
  const server = await startServer({
    dbPath: join(c.out, 'reference.db'),
    // Any free port: 8100, the default, may be another server's (or another train run's).
    port: 0,
    engines: ['sim'],
    sim: { policy: 'reference', tasks: referenceTasks(c.tasks), seed: c.seed },
  });
  try {
    const { summary } = await runGym({
      tasks: c.tasks,
      samples: 1,
      concurrency: 4,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent: TRAIN_AGENT,
      runId: `reference-${c.seed}`,
      stateFile: join(c.out, `reference-${c.seed}.jsonl`),
      workDir: join(c.out, 'work'),
      sampleTimeoutMs: 120_000,
      unsafeNoSandbox: c.unsafeNoSandbox,
    });
    const manifest = await runExport({
      store: server.pool.store,
      request: ExportRequest.parse({ kind: 'sft', min_reward: 1 }),
      outDir: c.sftDir,
      overwrite: true,
    });
    c.say(
      `warm-up   ${summary.samples} reference rollouts by the sim (mean score ${summary.meanScore.toFixed(2)}) -> ${manifest.counts.records} SFT conversations in ${join(c.sftDir, 'sft.jsonl')}`,
    );
  } finally {
    await server.close();
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((res, rej) => {
    if (signal?.aborted) return rej(signal.reason);
    const timer = setTimeout(res, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      rej(signal.reason);
    });
  });
}
