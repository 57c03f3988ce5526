import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { InjectedErrorKind, ModelRef } from '@stepwise/core';
import {
  createModelAdapter,
  type ModelAdapter,
  parseEngineSpec,
  progressReporter,
  ValidationError,
} from '@stepwise/core';
import { isInstalledKind, requireInstall } from './agent/installs.js';
import { checkPgUrl, checkQueueSchema, DEFAULT_QUEUE_SCHEMA, RolloutQueue } from './distributed/queue.js';
import { defaultLeaseSeconds, distributedRunner } from './distributed.js';
import { DEFAULT_EVIDENCE_BOUNDS } from './evidence.js';
import { defaultToolsDir } from './install-kit/index.js';
import {
  type AgentSpec,
  defaultRunId,
  type GymRunOptions,
  type GymSummary,
  runGym,
  type SampleResult,
} from './runner.js';
import { requireSandbox } from './sandbox/index.js';
import { findRootfs } from './sandbox/rootfs.js';
import { scheduledRunner } from './scheduled.js';
import { serverClient } from './server-client.js';
import { loadTasks } from './tasks/index.js';
import type { GymTask } from './tasks/schema.js';

/*
 * A gym run as `stepwise gym run`, `guide` and `bench` make it, in two steps: `planGymRun` checks
 * the options and loads the tasks, then the caller finds a gateway and `runGymPlan` runs the samples.
 * Errors name the flags, as the commands print them.
 */

/**
 * The built-in agent's model, which only CLEANER reads: `--model-dir` (and `--model-family`), else
 * the folder every in-process engine names; null for the built-in Qwen3, and whenever CLEANER is off
 * (the agent then needs no folder, a run id does not change with one, and rollout workers are not
 * sent a path). A folder that cannot serve CLEANER is refused here, naming the model, before any
 * sample runs.
 */
function builtinModel(
  opts: { modelDir?: string; modelFamily?: string; engine?: readonly string[] },
  cleaner: boolean,
): ModelRef | null {
  let model: ModelRef | null = null;
  if (opts.modelDir !== undefined && !cleaner)
    throw new ValidationError('--model-dir is what CLEANER grafts with: give it with --cleaner', 'model-dir');
  if (opts.modelDir !== undefined) {
    model = { dir: resolve(opts.modelDir), ...(opts.modelFamily ? { family: opts.modelFamily } : {}) };
  } else {
    if (opts.modelFamily !== undefined)
      throw new ValidationError('--model-family names the family of --model-dir: give both', 'model-family');
    const specs = (opts.engine ?? []).map(parseEngineSpec);
    const named = new Set(
      specs.map((e) => JSON.stringify([e.modelDir ? resolve(e.modelDir) : null, e.family ?? null])),
    );
    if (named.size > 1 && cleaner)
      throw new ValidationError(
        "the engines serve different models: name the built-in agent's with --model-dir",
        'model-dir',
      );
    const first = specs[0];
    if (named.size === 1 && first?.modelDir)
      model = { dir: resolve(first.modelDir), ...(first.family ? { family: first.family } : {}) };
  }
  if (!cleaner) return null;
  if (model) {
    let adapter: ModelAdapter;
    try {
      adapter = createModelAdapter(model.dir, model.family === undefined ? {} : { family: model.family });
    } catch (error) {
      throw new ValidationError(`--model-dir ${model.dir}: ${(error as Error).message}`, 'model-dir');
    }
    adapter.toolCallOpenId();
  }
  return model;
}

/** `--agent`: the built-in agent, the installed OpenClaw, Codex or Claude Code, or a command template. */
export function agentSpec(opts: {
  agent: string;
  maxTurns: number;
  toolsDir?: string;
  cleaner?: boolean;
  cleanerP?: number;
  modelDir?: string;
  modelFamily?: string;
  engine?: readonly string[];
}): AgentSpec {
  // --cleaner-p alone turns CLEANER on too.
  const cleaner = opts.cleaner || opts.cleanerP !== undefined;
  if (cleaner && opts.agent !== 'builtin')
    throw new ValidationError('--cleaner works with --agent builtin only', 'cleaner');
  if (opts.agent !== 'builtin' && (opts.modelDir !== undefined || opts.modelFamily !== undefined))
    throw new ValidationError(
      "--model-dir is the built-in agent's: an installed agent reads nothing of the model",
      'model-dir',
    );
  if (opts.agent === 'builtin') {
    const model = builtinModel(opts, cleaner);
    return {
      kind: 'builtin',
      maxTurns: opts.maxTurns,
      ...(cleaner ? { cleaner: opts.cleanerP === undefined ? {} : { p: opts.cleanerP } } : {}),
      ...(model ? { model } : {}),
    };
  }
  if (isInstalledKind(opts.agent)) {
    const kind = opts.agent;
    const install = requireInstall(kind, { dir: opts.toolsDir });
    return { kind, install } as AgentSpec;
  }
  return { kind: 'command', template: opts.agent };
}

/** The options of `gym run` (also `guide`'s and `bench`'s), as parsed values. */
export interface RunCommandOptions {
  tasks: string;
  out: string;
  samples: number;
  concurrency: number;
  agent: string;
  toolsDir?: string;
  engine: string[];
  gateway?: string;
  apiKey?: string;
  model: string;
  maxTurns: number;
  cleaner?: boolean;
  cleanerP?: number;
  /** The built-in agent's model folder and family (`--model-dir`, `--model-family`). */
  modelDir?: string;
  modelFamily?: string;
  sampleTimeoutMs: number;
  runId?: string;
  channel?: string;
  errorRate: number;
  /** Sim reference policy: kinds of injected error (`gym run --error-kinds`). */
  errorKinds?: InjectedErrorKind[];
  giveUpRate: number;
  seed: number;
  keepWorkspaces?: boolean;
  /** Keep what each verifier read, up to this many MiB a sample (0: keep none). */
  evidenceMb?: number;
  /** The version the verifier's signals carry (default: the task set's `verifierVersion`). */
  verifierVersion?: string;
  unsafeNoSandbox?: boolean;
  rootfs?: string | true;
  judgeUrl?: string;
  judgeModel?: string;
  judgeApiKey?: string;
  /** Sim reference policy: share of a task's actions a plan in the prompt must show (`gym run --sim-needs-plan`). */
  simNeedsPlan?: number;
  distributed?: boolean;
  pg?: string;
  queueSchema?: string;
  leaseSeconds?: number;
  jobRetries?: number;
  /** Take prompts from the pool's scheduler (scheduled.ts) for this many groups instead of walking the tasks. */
  groups?: number;
  /** With `groups`: the channel's schedule policy, set before the run. */
  schedulePolicy?: 'in_order' | 'uniform' | 'difficulty';
  /** With `groups`: the task set the run's tasks are registered under. */
  taskSet?: string;
}

export type GymRunner = (options: GymRunOptions) => Promise<{ results: SampleResult[]; summary: GymSummary }>;

/** `--distributed` needs a queue and a gateway every worker can reach; checked before anything is made. */
function checkDistributed(opts: RunCommandOptions): string | null {
  if (!opts.distributed) return null;
  const pg = opts.pg || process.env.STEPWISE_PG_URL;
  if (!pg)
    throw new ValidationError(
      '--distributed needs --pg <url> (or STEPWISE_PG_URL): the PostgreSQL database of the rollout queue',
      'pg',
    );
  checkPgUrl(pg, '--pg');
  checkQueueSchema(opts.queueSchema ?? DEFAULT_QUEUE_SCHEMA);
  if (!opts.gateway)
    throw new ValidationError(
      '--distributed needs --gateway <url>: a Stepwise server every worker can reach (an in-process one lives on this machine, only as long as this command)',
      'gateway',
    );
  if (opts.unsafeNoSandbox)
    throw new ValidationError(
      "--unsafe-no-sandbox is each worker's choice under --distributed: pass it to `stepwise worker rollouts`",
      'unsafe-no-sandbox',
    );
  return pg;
}

/** What a gym run checked and decided before it needs a gateway. */
export interface GymRunPlan {
  opts: RunCommandOptions;
  tasks: GymTask[];
  agent: AgentSpec;
  runId: string;
  /** `--out`, resolved and made. */
  out: string;
  /** The rollout queue's database under `--distributed`. */
  pgUrl: string | null;
  judge?: GymRunOptions['judge'];
}

/** Checks the options (sandbox, judge, distributed), loads the tasks and makes `--out`. */
export async function planGymRun(
  opts: RunCommandOptions,
  print: (line: string) => void,
): Promise<GymRunPlan> {
  const pgUrl = checkDistributed(opts);
  if (pgUrl) {
    // The samples run on the workers: their sandboxes are checked there.
    if (opts.rootfs !== undefined)
      throw new ValidationError(
        '--rootfs is not passed to rollout workers; run --distributed without it',
        'rootfs',
      );
  } else if (!opts.unsafeNoSandbox) {
    requireSandbox(sandboxRoot(opts));
  } else {
    print('WARNING: --unsafe-no-sandbox: agents and verifiers run on this machine WITHOUT isolation');
  }
  if ((opts.judgeUrl === undefined) !== (opts.judgeModel === undefined))
    throw new ValidationError('--judge-url and --judge-model go together', 'judge-url');
  const judge = opts.judgeUrl
    ? { baseURL: opts.judgeUrl, model: opts.judgeModel!, apiKey: opts.judgeApiKey ?? 'EMPTY' }
    : undefined;
  const tasks = await loadTasks(opts.tasks);
  if (tasks.length === 0) throw new ValidationError(`no tasks in ${opts.tasks}`, 'tasks');
  const out = resolve(opts.out);
  mkdirSync(out, { recursive: true });
  const agent = agentSpec(opts);
  const runId = opts.runId ?? defaultRunId(tasks, opts.samples, agent);
  return { opts, tasks, agent, runId, out, pgUrl, judge };
}

/**
 * Runs the planned samples through the gateway at `gatewayUrl` and returns what happened; prints
 * progress to stderr. `run` (e.g. the guided runner) gets the options and the runner of the samples:
 * runGym, or the queue's under --distributed.
 */
export async function runGymPlan(
  plan: GymRunPlan,
  gatewayUrl: string,
  print: (line: string) => void,
  run?: (
    options: GymRunOptions,
    base: GymRunner,
  ) => Promise<{ results: SampleResult[]; summary: GymSummary }>,
): Promise<{
  tasks: GymTask[];
  results: SampleResult[];
  summary: GymSummary;
  runId: string;
  gatewayUrl: string;
}> {
  const { opts, tasks, agent, runId, out, pgUrl } = plan;
  let queue: RolloutQueue | null = null;
  const progress = progressReporter('gym', 'samples', process.stderr);
  let sum = 0;
  let count = 0;
  try {
    let base: GymRunner = runGym;
    if (pgUrl) {
      queue = await RolloutQueue.open({ url: pgUrl, schema: opts.queueSchema });
      const schema = queue.schema;
      base = distributedRunner({
        queue,
        leaseSeconds: opts.leaseSeconds ?? defaultLeaseSeconds(opts.sampleTimeoutMs),
        retryLimit: opts.jobRetries,
        onEnqueued: ({ pending, created, existing }) =>
          print(
            `gym: ${pending} samples in the rollout queue (${schema}): ${created} enqueued now, ${existing} already there; run \`stepwise worker rollouts --pg ... --queue-schema ${schema}\` on any machine to work them`,
          ),
      });
    }
    if (opts.groups !== undefined) base = await scheduled(opts, gatewayUrl, print);
    const runner: GymRunner = run ? (options) => run(options, base) : base;
    const { results, summary } = await runner({
      tasks,
      samples: opts.samples,
      concurrency: opts.concurrency,
      gatewayUrl,
      apiKey: opts.apiKey,
      model: opts.model,
      agent,
      runId,
      channel: opts.channel,
      stateFile: join(out, `state-${runId}.jsonl`),
      workDir: join(out, 'work'),
      keepWorkspaces: opts.keepWorkspaces,
      ...(opts.evidenceMb !== undefined
        ? {
            evidence:
              opts.evidenceMb === 0
                ? false
                : { ...DEFAULT_EVIDENCE_BOUNDS, maxBytes: Math.round(opts.evidenceMb * 1024 * 1024) },
          }
        : {}),
      ...(opts.verifierVersion !== undefined ? { verifierVersion: opts.verifierVersion } : {}),
      sampleTimeoutMs: opts.sampleTimeoutMs,
      unsafeNoSandbox: opts.unsafeNoSandbox,
      ...(opts.rootfs !== undefined ? { rootfs: sandboxRoot(opts) } : {}),
      judge: plan.judge,
      onSample: (r, done, total) => {
        sum += r.score;
        count++;
        progress.update(done, total);
      },
    });
    progress.stop();
    print(`gym: mean score ${count === 0 ? '-' : (sum / count).toFixed(3)} over ${count} samples run now`);
    writeFileSync(join(out, 'summary.json'), `${JSON.stringify({ runId, summary }, null, 2)}\n`);
    return { tasks, results, summary, runId, gatewayUrl };
  } finally {
    progress.stop();
    await queue?.close();
  }
}

/**
 * The scheduled runner: the channel's schedule hands out prompts of --samples rollouts each (and
 * takes --schedule-policy when given).
 */
async function scheduled(
  opts: RunCommandOptions,
  gatewayUrl: string,
  print: (line: string) => void,
): Promise<GymRunner> {
  if (!opts.channel)
    throw new ValidationError('--groups needs --channel: the channel whose prompts are scheduled', 'channel');
  if (opts.distributed)
    throw new ValidationError(
      '--groups and --distributed: pick one (rollout workers walk the queue)',
      'groups',
    );
  await serverClient(gatewayUrl, opts.apiKey).configureChannel(opts.channel, {
    schedule: {
      n_rollouts: opts.samples,
      ...(opts.schedulePolicy ? { policy: opts.schedulePolicy } : {}),
    },
  });
  return scheduledRunner({
    groups: opts.groups!,
    ...(opts.taskSet ? { taskSet: opts.taskSet } : {}),
    onIdle: (groups) =>
      print(
        `gym: stopped after ${groups} of ${opts.groups} groups: the channel's schedule has no prompt left to hand out (every one retired or in flight elsewhere)`,
      ),
  });
}

export function formatSummary(summary: GymSummary): string {
  const g = summary.groups;
  return [
    `samples: ${summary.samples} (${summary.skipped} already done), mean score ${summary.meanScore.toFixed(3)}`,
    `groups: ${g.mixed} mixed, ${g.allZero} all-zero, ${g.allOne} all-one`,
    `failures: ${summary.agentFailed} agent, ${summary.infraFailed} infrastructure (masked from training), ${summary.verifierFailed} verifier`,
  ].join('\n');
}

/** The root a `--rootfs [dir]` option names: dir, else the built one (an error says how to build it). */
export function sandboxRoot(opts: {
  rootfs?: string | true;
  toolsDir?: string;
  unsafeNoSandbox?: boolean;
}): string | undefined {
  if (opts.rootfs === undefined) return undefined;
  if (opts.unsafeNoSandbox)
    throw new ValidationError('--rootfs needs the sandbox: drop --unsafe-no-sandbox', 'rootfs');
  if (typeof opts.rootfs === 'string') return resolve(opts.rootfs);
  const dir = opts.toolsDir ?? defaultToolsDir();
  const found = findRootfs(dir);
  if (!found)
    throw new ValidationError(
      `the sandbox rootfs is not built in ${dir}: run \`stepwise tools install rootfs${opts.toolsDir ? ` --dir ${opts.toolsDir}` : ''}\` first`,
      'rootfs',
    );
  return found.root;
}
