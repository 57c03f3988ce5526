import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { ValidationError } from '@stepwise/core/domain/errors.js';
import { ExportRequest } from '@stepwise/core/export/request.js';
import { runExport } from '@stepwise/core/export/run-export.js';
import { type RunningServer, startServer } from '@stepwise/core/server/server.js';
import { seededRandom } from '@stepwise/core/util/random.js';
import { type AgentSpec, runGym, type SampleResult } from '@stepwise/gym/runner.js';
import { checkSandbox } from '@stepwise/gym/sandbox/index.js';
import { referenceTasks } from '@stepwise/gym/tasks/index.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import {
  PYTHON_CLIENT_DIR,
  type PythonProcess,
  requireTrainPython,
  spawnPython,
  startReferenceEngine,
} from './python.js';
import { rewardCurveHtml } from './report.js';
import {
  configureSchedule,
  RolloutLedger,
  type SchedulePolicy,
  type ScheduleReport,
  scheduledRound,
  scheduleReport,
  starved,
} from './schedule.js';
import { COPY_TARGETS, copyTasks, mixedTasks, taskKind } from './tasks.js';
import { type TrainerEvents, type TrainerUpdate, trainerEvents } from './trainer-events.js';

export type { TrainerUpdate };

// `stepwise train`: the RL loop on one machine, end to end (warm-up data, engine, rollouts, updates):
// docs/trainers.md#stepwise-train-the-loop-as-one-command

export interface TrainOptions {
  /** Where the stores, the SFT export, the manifest and the curve go. */
  out: string;
  seed: number;
  /** Policy versions to train (one leased batch each): the most, when `targetReward` stops sooner. */
  versions: number;
  /**
   * Stop once a round's mean reward reaches this: the trainer's update of that round's batch is the
   * final policy (the eval round still runs on it). Unset: all `versions` are trained.
   */
  targetReward?: number;
  /** Tasks (groups) per round (default `DEFAULT_GROUPS`). */
  groups?: number;
  /** Samples per task: the group size. */
  rollouts: number;
  /** SFT steps of the warm-up (0: none). */
  warmupSteps: number;
  /**
   * Start from this model folder (e.g. an earlier run's `OUT/warmup`) instead of the preset and a
   * warm-up: a control run, or RL with other settings, from the same starting policy.
   */
  init?: string;
  warmupLr: number;
  lr: number;
  /** AdamW's eps for the RL updates (the trainer library's `adam_eps`; default 1e-5). */
  adamEps?: number;
  /** PPO clip range ε of the RL loss (default `DEFAULT_CLIP`). */
  clip?: number;
  /** Optimizer steps per batch. */
  epochs: number;
  maxStaleness: number;
  /** Samples run at once (the engine generates one at a time; tools and verifiers overlap). */
  concurrency: number;
  /** false: the same loop with no optimizer step (the control run). */
  update: boolean;
  /**
   * Fully asynchronous: rounds never wait for a version (the channel's admission control bounds
   * their lead) and each update switches the engines in flight through the gateway, running
   * generations cut and continued (`abort`: partial rollouts) or frozen (`keep`). Unset: rounds
   * wait for the version `maxStaleness` behind them and updates drain (docs/trainers.md).
   */
  async?: 'abort' | 'keep';
  /**
   * Take each round's groups from the pool's prompt scheduler under this policy, over a task set
   * registered once as the channel's prompts. Unset: each round walks a list (fresh copy tasks, or
   * the mixed set in order), as before the scheduler.
   */
  schedule?: SchedulePolicy;
  /**
   * `copy` (default): the copy task. `mixed`: easy, learnable and hard tasks (tasks.ts), and
   * `targetReward` is read on the learnable ones (the mean of their last LEARNABLE_WINDOW rollouts).
   */
  tasks?: 'copy' | 'mixed';
  /** Tasks of each kind in the set a scheduled or mixed run registers (default DEFAULT_PROMPTS_PER_KIND). */
  promptsPerKind?: number;
  /** `drop`: curation drops all-equal groups at lease time (no GRPO signal); default `keep`. */
  zeroVariance?: 'keep' | 'drop';
  /** Stop once the training rounds have generated this many rollouts (a run that may never reach its target). */
  maxRollouts?: number;
  port?: number;
  /** The Python with the `train` extra (default: `requireTrainPython()`). */
  python?: string;
  print: (line: string) => void;
  signal?: AbortSignal;
}

export interface VersionReward {
  version: number;
  rollouts: number;
  meanReward: number;
}

export interface TrainResult {
  out: string;
  /** Mean reward per policy version that generated rollouts, oldest first. */
  rewardByVersion: VersionReward[];
  updates: TrainerUpdate[];
  /** Groups dropped as stale by the pool, from its stats. */
  staleDropped: number;
  /** What the training rounds spent and reached, by task kind (null for the copy task's walk). */
  schedule: ScheduleReport | null;
  /** Mean reward by version over the learnable tasks of the training rounds (mixed runs; else null). */
  learnableByVersion: VersionReward[] | null;
  /** Why the rounds stopped before the trainer's last version (target, rollout cap, nothing to hand out). */
  stopped: string | null;
  /** The eval round's mean reward: the final policy on fresh copy tasks. */
  evalMean: number;
  seconds: number;
}

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
const STEPWISE_VERSION = (
  JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }
).version;
const EVAL_CHANNEL = 'eval';
/**
 * Adam steps every weight by about `lr`, however small its gradient: at 1e-8 (torch's default) the
 * whole tied 151k-id LM head moved with each update and RL at 2e-3 broke the policy (docs/trainers.md).
 */
export const DEFAULT_ADAM_EPS = 1e-5;
/** PPO clip range: each version may move a token's probability by at most this factor of it. */
export const DEFAULT_CLIP = 0.2;
/** Tasks (groups) per round when not given. */
export const DEFAULT_GROUPS = 8;
/** Reference rollouts the warm-up learns from: the targets in turn (tasks.ts). */
const WARMUP_TASKS = 32;
/** Tasks of each kind in a registered set: 48 prompts in the mixed set, 6 rounds of 8 groups. */
export const DEFAULT_PROMPTS_PER_KIND = 16;
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
      `serve     stepwise on ${server.url} (SQLite at ${join(out, 'train.db')}; engine vllm=${engine.url})`,
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
    const result = await summarize(rounds, { events, stopped, started, evalMean });
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
  // A second run in the same folder would continue the first one's store and versions.
  if (existsSync(join(out, 'train.db')))
    throw new ValidationError(
      `out: ${out} already holds a train run (train.db); choose another directory`,
      'out',
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

/** The gateway in front of the engine, its train channel configured (schedule, curation). */
async function startGateway(
  o: TrainOptions,
  c: { out: string; engineUrl: string; groups: number; fixed: GymTask[] | null },
): Promise<RunningServer> {
  const server = await startServer({
    dbPath: join(c.out, 'train.db'),
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

/** What the rounds of rollouts share: the run's options, its server, and the samples so far. */
interface Rounds {
  o: TrainOptions;
  serverUrl: string;
  pool: RunningServer['pool'];
  out: string;
  groups: number;
  unsafeNoSandbox: boolean;
  say: (line: string) => void;
  samples: { result: SampleResult; round: number; channel: string }[];
  /** The registered task set (scheduled or mixed runs), else null: fresh copy tasks each round. */
  fixed: GymTask[] | null;
  /** Training groups made so far. */
  made: number;
  /** The last scheduled round stopped short: the scheduler had nothing to hand out. */
  idle: boolean;
  ledger: RolloutLedger;
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

/** The run's result from its rounds: rewards by version, and for a registered set what was spent. */
async function summarize(
  c: Rounds,
  r: { events: TrainerEvents; stopped: string | null; started: number; evalMean: number },
): Promise<TrainResult> {
  const versions = await versionsOf(c.pool, c.samples);
  const rewardByVersion = rewardsByVersion(c.samples, versions);
  const kinds = new Map((c.fixed ?? []).map((t) => [t.id, taskKind(t)]));
  const learnable = c.samples.filter(
    (s) => s.channel === TRAIN_CHANNEL && kinds.get(s.result.taskId) === 'learnable',
  );
  const staleDropped = (await c.pool.stats(TRAIN_CHANNEL)).dropped.stale ?? 0;
  const schedule =
    c.fixed === null
      ? null
      : await scheduleReport(c.pool, TRAIN_CHANNEL, {
          policy: c.o.schedule ?? 'walk',
          ledger: c.ledger,
          tasks: c.fixed,
        });
  return {
    out: resolve(c.o.out),
    rewardByVersion,
    updates: r.events.updates,
    staleDropped,
    schedule,
    learnableByVersion: c.o.tasks === 'mixed' ? rewardsByVersion(learnable, versions) : null,
    stopped: r.stopped,
    evalMean: r.evalMean,
    seconds: (performance.now() - r.started) / 1000,
  };
}

/** The policy version that generated each complete rollout (its oldest step's), by trajectory. */
async function versionsOf(
  pool: RunningServer['pool'],
  samples: { result: SampleResult }[],
): Promise<Map<string, number>> {
  const versions = new Map<string, number>();
  for (const { result } of samples) {
    if (result.status !== 'complete' || !result.trajectoryUid) continue;
    const steps = await pool.getTrajectorySteps(result.trajectoryUid);
    if (steps.length > 0) versions.set(result.trajectoryUid, Math.min(...steps.map((s) => s.policyVersion)));
  }
  return versions;
}

/** Mean reward by the policy version that generated each complete rollout. */
function rewardsByVersion(
  samples: { result: SampleResult }[],
  versions: ReadonlyMap<string, number>,
): VersionReward[] {
  const byVersion = new Map<number, number[]>();
  for (const { result } of samples) {
    const version = result.trajectoryUid ? versions.get(result.trajectoryUid) : undefined;
    if (version === undefined) continue;
    byVersion.set(version, [...(byVersion.get(version) ?? []), result.score]);
  }
  return [...byVersion.entries()]
    .sort(([a], [b]) => a - b)
    .map(([version, rewards]) => ({
      version,
      rollouts: rewards.length,
      meanReward: rewards.reduce((a, b) => a + b, 0) / rewards.length,
    }));
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

function writeOutputs(
  result: TrainResult,
  o: TrainOptions,
  c: {
    python: string;
    engineUrl: string;
    startVersion: number;
    groups: number;
  },
): void {
  const versions = pythonVersions(c.python);
  const manifest = {
    reward_by_version: result.rewardByVersion.map((v) => v.meanReward),
    versions: result.rewardByVersion.map((v) => v.version),
    rollouts_by_version: result.rewardByVersion.map((v) => v.rollouts),
    seed: o.seed,
    updates: o.update,
    settings: settingsOf(o, c),
    model: versions.model,
    software: {
      stepwise: STEPWISE_VERSION,
      node: process.versions.node,
      ...versions.packages,
    },
    stale_groups_dropped: result.staleDropped,
    trainer_updates: result.updates,
    // A registered task set: what the training rounds spent, by kind, and the learnable curve.
    schedule: result.schedule,
    learnable_by_version: result.learnableByVersion,
    stopped: result.stopped,
    seconds: result.seconds,
  };
  writeFileSync(join(result.out, 'train.json'), `${JSON.stringify(manifest, null, 2)}\n`);
  const points = result.rewardByVersion.map((v) => ({ x: v.version, y: v.meanReward }));
  writeFileSync(
    join(result.out, 'reward.html'),
    rewardCurveHtml(
      `stepwise train: mean reward by policy version (seed ${o.seed})`,
      [
        {
          label: o.update ? 'RL updates' : 'no updates (control)',
          points,
          color: o.update ? '#1f77b4' : '#888',
        },
      ],
      [
        `Copy tasks (${c.groups} per round, ${o.rollouts} rollouts each) with the tiny Qwen3-architecture model; ${o.init === undefined ? `warm-up ${o.warmupSteps} SFT steps` : `started from ${o.init}`}; max_staleness ${o.maxStaleness}.`,
        'Each rollout counts toward the policy version that generated its first step.',
      ],
    ),
  );
}

/** The settings train.json records. */
function settingsOf(o: TrainOptions, c: { startVersion: number; groups: number }) {
  return {
    versions: o.versions,
    target_reward: o.targetReward ?? null,
    rollouts: o.rollouts,
    task:
      o.tasks === 'mixed'
        ? 'mixed: always solved, copy input.txt to answer.md (learnable), never solved (src/train/tasks.ts)'
        : 'copy input.txt to answer.md with one exec call (src/train/tasks.ts)',
    warmup_targets: COPY_TARGETS,
    groups: c.groups,
    warmup_steps: o.init === undefined ? o.warmupSteps : 0,
    init: o.init === undefined ? null : resolve(o.init),
    warmup_lr: o.warmupLr,
    lr: o.lr,
    adam_eps: o.adamEps ?? DEFAULT_ADAM_EPS,
    clip: o.clip ?? DEFAULT_CLIP,
    epochs: o.epochs,
    max_staleness: o.maxStaleness,
    async: o.async ?? null,
    concurrency: o.concurrency,
    start_version: c.startVersion,
    schedule: o.schedule ?? null,
    tasks: o.tasks ?? 'copy',
    prompts_per_kind:
      o.schedule || o.tasks === 'mixed' ? (o.promptsPerKind ?? DEFAULT_PROMPTS_PER_KIND) : null,
    zero_variance: o.zeroVariance ?? 'keep',
    max_rollouts: o.maxRollouts ?? null,
  };
}

/** The model config and package versions of the training side, from its own interpreter. */
function pythonVersions(python: string): { model: unknown; packages: Record<string, string> } {
  const script = [
    'import json, sys, torch, transformers',
    'from stepwise_client.models import PRESETS',
    'print(json.dumps({"model": {"preset": "tiny", **PRESETS["tiny"], "architecture": "Qwen3ForCausalLM"},',
    ' "packages": {"python": sys.version.split()[0], "torch": torch.__version__, "transformers": transformers.__version__}}))',
  ].join('\n');
  const run = spawnSync(python, ['-c', script], { encoding: 'utf8', cwd: PYTHON_CLIENT_DIR });
  if (run.status !== 0) return { model: { preset: 'tiny' }, packages: {} };
  return JSON.parse(run.stdout) as { model: unknown; packages: Record<string, string> };
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
