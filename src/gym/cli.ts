import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { type Command, InvalidArgumentError } from 'commander';
import type { ReferenceTask } from '../engines/sim/policies.js';
import { type RunningServer, startServer } from '../server/server.js';
import { progressReporter } from '../util/progress.js';
import { defaultToolsDir, findOpenClaw, OPENCLAW_VERSION } from './agent/openclaw/install.js';
import { checkPgUrl, checkQueueSchema, DEFAULT_QUEUE_SCHEMA, RolloutQueue } from './distributed/queue.js';
import { DEFAULT_JOB_RETRIES, defaultLeaseSeconds, distributedRunner } from './distributed.js';
import { addGuideOptions, type GuideCliOptions, guidedRunner } from './guide-cli.js';
import {
  type AgentSpec,
  defaultRunId,
  type GymRunOptions,
  type GymSummary,
  runGym,
  type SampleResult,
} from './runner.js';
import { checkSandbox } from './sandbox/index.js';
import { findRootfs } from './sandbox/rootfs.js';
import { registerSynthCommand } from './synth/cli.js';
import { gateTasks } from './synth/gate.js';
import { loadTasks, TASK_SET_HELP } from './tasks/index.js';
import type { GymTask } from './tasks/schema.js';

/*
 * `stepwise gym ...`: run tasks through the gateway (`run`), gate a task set (`validate`) and
 * synthesize tasks (`synth`, registered by src/gym/synth/cli.ts).
 */

export function positiveInt(flag: string, min = 1) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${flag} must be an integer >= ${min}`);
    return n;
  };
}

export function probability(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isFinite(n) || n < 0 || n > 1)
      throw new InvalidArgumentError(`${flag} must be a number from 0 to 1`);
    return n;
  };
}

/** The reference actions of the tasks that have them, for the sim's `reference` policy. */
export function referenceTasks(tasks: readonly GymTask[]): ReferenceTask[] {
  return tasks
    .filter((t) => t.referenceActions && t.referenceActions.length > 0)
    .map((t) => ({ prompt: t.prompt, actions: t.referenceActions! }));
}

/** `--agent`: the built-in agent, the installed OpenClaw, or a command template. */
export function agentSpec(opts: {
  agent: string;
  maxTurns: number;
  toolsDir?: string;
  cleaner?: boolean;
  cleanerP?: number;
}): AgentSpec {
  // --cleaner-p alone turns CLEANER on too.
  const cleaner = opts.cleaner || opts.cleanerP !== undefined;
  if (cleaner && opts.agent !== 'builtin')
    throw new InvalidArgumentError('--cleaner works with --agent builtin only');
  if (opts.agent === 'builtin')
    return {
      kind: 'builtin',
      maxTurns: opts.maxTurns,
      ...(cleaner ? { cleaner: opts.cleanerP === undefined ? {} : { p: opts.cleanerP } } : {}),
    };
  if (opts.agent === 'openclaw') {
    const dir = opts.toolsDir ?? defaultToolsDir();
    const install = findOpenClaw(dir);
    if (!install)
      throw new Error(
        `OpenClaw ${OPENCLAW_VERSION} is not installed in ${dir}: run \`stepwise tools install openclaw${opts.toolsDir ? ` --dir ${opts.toolsDir}` : ''}\` first`,
      );
    return { kind: 'openclaw', install };
  }
  return { kind: 'command', template: opts.agent };
}

/** Where the agents' LLM calls go: a running Stepwise (`--gateway`) or one started here over `<out>/stepwise.db`. */
export async function gatewayFor(
  opts: {
    gateway?: string;
    engine: string[];
    out: string;
    errorRate: number;
    giveUpRate: number;
    seed: number;
    simNeedsPlan?: number;
  },
  tasks: readonly GymTask[],
): Promise<{ url: string; server: RunningServer | null }> {
  if (opts.gateway) {
    if (opts.engine.length > 0) throw new InvalidArgumentError('--gateway and --engine exclude each other');
    return { url: opts.gateway.replace(/\/+$/, ''), server: null };
  }
  const engines = opts.engine.length > 0 ? opts.engine : ['sim'];
  const reference = referenceTasks(tasks);
  const server = await startServer({
    dbPath: join(opts.out, 'stepwise.db'),
    port: 0,
    engines,
    sim:
      reference.length > 0
        ? {
            policy: 'reference',
            tasks: reference,
            errorRate: opts.errorRate,
            giveUpRate: opts.giveUpRate,
            needsPlan: opts.simNeedsPlan,
            seed: opts.seed,
          }
        : { policy: 'echo', seed: opts.seed },
  });
  return { url: server.url, server };
}

/**
 * `gym run`'s options (also `guide`'s and `bench`'s). `--pg` falls back to $STEPWISE_PG_URL at run
 * time, not as a default value: --help would print the URL's password.
 */
export function addRunOptions(command: Command): Command {
  return command
    .requiredOption('--tasks <path>', TASK_SET_HELP)
    .option('--out <dir>', 'results, state (for resuming) and the embedded store', 'gym-out')
    .option('--samples <k>', 'samples per task (one group)', positiveInt('--samples'), 4)
    .option('--concurrency <n>', 'samples run at once', positiveInt('--concurrency'), 8)
    .option(
      '--agent <agent>',
      "'builtin', 'openclaw' (stock OpenClaw, see `stepwise tools install openclaw`) or a command template with {prompt_file} {workspace} {task_id} {model}",
      'builtin',
    )
    .option(
      '--tools-dir <dir>',
      'where `stepwise tools install` put OpenClaw (default: $STEPWISE_TOOLS_DIR or .stepwise/tools)',
    )
    .option(
      '--engine <spec>',
      'engine of an in-process gateway: sim (default), vllm=URL, openai=URL (repeatable)',
      (v: string, p: string[]) => p.concat(v),
      [] as string[],
    )
    .option('--gateway <url>', 'a running Stepwise server instead of an in-process one')
    .option('--api-key <key>', 'bearer key for --gateway (agent scope)', process.env.STEPWISE_API_KEY)
    .option('--model <name>', 'model name the agent asks for', 'sim-qwen3')
    .option('--max-turns <n>', 'turns of the built-in agent', positiveInt('--max-turns'), 30)
    .option(
      '--cleaner',
      'built-in agent: CLEANER rollback, failed tool calls are regenerated and rewritten out of the history (docs/cleaner.md)',
    )
    .option(
      '--cleaner-p <p>',
      'chance that CLEANER rollback is on for a sample (default 1; implies --cleaner)',
      probability('--cleaner-p'),
    )
    .option(
      '--sample-timeout-ms <ms>',
      'wall-clock limit of one sample',
      positiveInt('--sample-timeout-ms'),
      600_000,
    )
    .option(
      '--run-id <id>',
      'group ids are <run-id>.<task id>; the same id resumes (default: from the tasks and settings)',
    )
    .option('--channel <name>', 'pool channel of the trajectories')
    .option(
      '--error-rate <p>',
      'sim reference policy: chance of a wrong tool call before the right one',
      probability('--error-rate'),
      0.2,
    )
    .option(
      '--give-up-rate <p>',
      'sim reference policy: chance an episode stops part way',
      probability('--give-up-rate'),
      0.2,
    )
    .option('--seed <n>', 'seed of the sim', positiveInt('--seed', 0), 0)
    .option('--judge-url <url>', 'OpenAI-compatible endpoint of an LLM judge for tasks with rubrics')
    .option('--judge-model <name>', 'model of the LLM judge (needed with --judge-url)')
    .option('--judge-api-key <key>', 'bearer key of the LLM judge', process.env.STEPWISE_JUDGE_API_KEY)
    .option('--keep-workspaces', 'keep each sample workspace under <out>/work')
    .option('--unsafe-no-sandbox', 'run agents and verifiers WITHOUT isolation (never on untrusted tasks)')
    .option('--rootfs [dir]', ROOTFS_HELP)
    .option(
      '--distributed',
      'run the samples on rollout workers (`stepwise worker rollouts`) through the queue in --pg; needs --gateway (docs/distributed.md)',
    )
    .option(
      '--pg <url>',
      'PostgreSQL database of the rollout queue, postgres://user@host:port/db (default: $STEPWISE_PG_URL)',
    )
    .option(
      '--queue-schema <name>',
      'PostgreSQL schema of the rollout queue (pg-boss tables and ours)',
      process.env.STEPWISE_QUEUE_SCHEMA ?? DEFAULT_QUEUE_SCHEMA,
    )
    .option(
      '--lease-seconds <s>',
      '--distributed: a started sample not reported within this goes to another worker (default: --sample-timeout-ms + 300 s)',
      positiveInt('--lease-seconds'),
    )
    .option(
      '--job-retries <n>',
      '--distributed: attempts after the first at a sample whose worker died or whose infrastructure failed',
      positiveInt('--job-retries', 0),
      DEFAULT_JOB_RETRIES,
    );
}

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
  sampleTimeoutMs: number;
  runId?: string;
  channel?: string;
  errorRate: number;
  giveUpRate: number;
  seed: number;
  keepWorkspaces?: boolean;
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
}

type GymRunner = (options: GymRunOptions) => Promise<{ results: SampleResult[]; summary: GymSummary }>;

/** `--distributed` needs a queue and a gateway every worker can reach; checked before anything is made. */
function checkDistributed(opts: RunCommandOptions): string | null {
  if (!opts.distributed) return null;
  const pg = opts.pg || process.env.STEPWISE_PG_URL;
  if (!pg)
    throw new InvalidArgumentError(
      '--distributed needs --pg <url> (or STEPWISE_PG_URL): the PostgreSQL database of the rollout queue',
    );
  checkPgUrl(pg, '--pg');
  checkQueueSchema(opts.queueSchema ?? DEFAULT_QUEUE_SCHEMA);
  if (!opts.gateway)
    throw new InvalidArgumentError(
      '--distributed needs --gateway <url>: a Stepwise server every worker can reach (an in-process one lives on this machine, only as long as this command)',
    );
  if (opts.unsafeNoSandbox)
    throw new InvalidArgumentError(
      "--unsafe-no-sandbox is each worker's choice under --distributed: pass it to `stepwise worker rollouts`",
    );
  return pg;
}

/**
 * Runs the task set and returns what happened; prints progress to stderr. `run` (e.g. the guided
 * runner) gets the options and the runner of the samples: runGym, or the queue's under --distributed.
 */
export async function runCommand(
  opts: RunCommandOptions,
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
  const pgUrl = checkDistributed(opts);
  if (pgUrl) {
    // The samples run on the workers: their sandboxes are checked there.
    if (opts.rootfs !== undefined)
      throw new InvalidArgumentError(
        '--rootfs is not passed to rollout workers; run --distributed without it',
      );
  } else if (!opts.unsafeNoSandbox) {
    const check = checkSandbox(sandboxRoot(opts));
    if (!check.ok)
      throw new Error(
        `the sandbox is unavailable (${check.reason}); install bubblewrap, or pass --unsafe-no-sandbox`,
      );
  } else {
    print('WARNING: --unsafe-no-sandbox: agents and verifiers run on this machine WITHOUT isolation');
  }
  if ((opts.judgeUrl === undefined) !== (opts.judgeModel === undefined))
    throw new InvalidArgumentError('--judge-url and --judge-model go together');
  const judge = opts.judgeUrl
    ? { baseURL: opts.judgeUrl, model: opts.judgeModel!, apiKey: opts.judgeApiKey ?? 'EMPTY' }
    : undefined;
  const tasks = await loadTasks(opts.tasks);
  if (tasks.length === 0) throw new Error(`no tasks in ${opts.tasks}`);
  const out = resolve(opts.out);
  mkdirSync(out, { recursive: true });
  const agent = agentSpec(opts);
  const runId = opts.runId ?? defaultRunId(tasks, opts.samples, agent);
  const { url, server } = await gatewayFor(opts, tasks);
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
    const runner: GymRunner = run ? (options) => run(options, base) : base;
    const { results, summary } = await runner({
      tasks,
      samples: opts.samples,
      concurrency: opts.concurrency,
      gatewayUrl: url,
      apiKey: opts.apiKey,
      model: opts.model,
      agent,
      runId,
      channel: opts.channel,
      stateFile: join(out, `state-${runId}.jsonl`),
      workDir: join(out, 'work'),
      keepWorkspaces: opts.keepWorkspaces,
      sampleTimeoutMs: opts.sampleTimeoutMs,
      unsafeNoSandbox: opts.unsafeNoSandbox,
      ...(opts.rootfs !== undefined ? { rootfs: sandboxRoot(opts) } : {}),
      judge,
      onSample: (r, done, total) => {
        sum += r.score;
        count++;
        progress.update(done, total);
      },
    });
    progress.stop();
    print(`gym: mean score ${count === 0 ? '-' : (sum / count).toFixed(3)} over ${count} samples run now`);
    writeFileSync(join(out, 'summary.json'), `${JSON.stringify({ runId, summary }, null, 2)}\n`);
    return { tasks, results, summary, runId, gatewayUrl: url };
  } finally {
    progress.stop();
    await queue?.close();
    await server?.close();
  }
}

export function formatSummary(summary: GymSummary): string {
  const g = summary.groups;
  return [
    `samples: ${summary.samples} (${summary.skipped} already done), mean score ${summary.meanScore.toFixed(3)}`,
    `groups: ${g.mixed} mixed, ${g.allZero} all-zero, ${g.allOne} all-one`,
    `failures: ${summary.agentFailed} agent, ${summary.infraFailed} infrastructure (masked from training), ${summary.verifierFailed} verifier`,
  ].join('\n');
}

export function registerGymCommands(program: Command): Command {
  const gym = program
    .command('gym')
    .description('Claw-style tasks: run them through the gateway, validate, synthesize');
  addGuideOptions(
    addRunOptions(
      gym
        .command('run')
        .description(
          'run every task × --samples through the gateway (one group per task), verify, store rewards',
        ),
    ),
  ).action(async (opts: RunCommandOptions & GuideCliOptions) => {
    const print = (line: string) => console.error(line);
    const { summary, runId } = await runCommand(opts, print, guidedRunner(opts, print));
    console.log(`run ${runId}\n${formatSummary(summary)}`);
  });
  // `stepwise guide`: the same run with ActGuide on (adaptive unless --guide names a strategy).
  // Pointed at a finished run (same tasks, --out and --run-id), it resumes it, so no unguided
  // sample runs again, and only the hard groups' probes and guided rollouts are new.
  addGuideOptions(
    addRunOptions(
      program
        .command('guide')
        .description(
          'ActGuide-RL on a gym run: run (or resume) the tasks, then replace every hard group (no rollout above the threshold) by rollouts guided with the first k reference actions, k chosen by probes',
        ),
    ),
  ).action(async (opts: RunCommandOptions & GuideCliOptions) => {
    const print = (line: string) => console.error(line);
    const guided = { ...opts, guide: opts.guide ?? ('adaptive' as const) };
    const { summary, runId } = await runCommand(guided, print, guidedRunner(guided, print));
    console.log(`run ${runId}\n${formatSummary(summary)}`);
  });
  gym
    .command('validate')
    .description(
      "ClawGym's gate: a no-op scores 0 on the untouched workspace, verifiers do not crash, a native task's reference actions score 1; a scaffold workspace (empty files at the paths the prompt names) that scores above 0 is a warning",
    )
    .argument('<tasks>', TASK_SET_HELP)
    .option(
      '--json',
      'print {"tasks": [{task_id, ok, noop_score, scaffold_score, reference_score, problems, warnings}], "summary": {tasks, passed, failed, scaffold_warnings}}',
    )
    .option('--concurrency <n>', 'tasks checked at once', positiveInt('--concurrency'), 4)
    .option('--unsafe-no-sandbox', 'run verifiers and reference actions WITHOUT isolation')
    .option('--rootfs [dir]', ROOTFS_HELP)
    .option(
      '--tools-dir <dir>',
      'where `stepwise tools install rootfs` put the root (default: $STEPWISE_TOOLS_DIR or .stepwise/tools)',
    )
    .action(async (source: string, opts: ValidateOptions) => {
      const failed = await validateCommand(source, opts, (line) => console.log(line));
      if (failed > 0) process.exitCode = 1;
    });
  registerSynthCommand(gym);
  return gym;
}

const ROOTFS_HELP =
  "run the sandbox on the hermetic root filesystem that `stepwise tools install rootfs` built (or on the root at dir) instead of the host's /usr: the same python, pytest and CLI tools on every host (docs/gym-sandbox.md)";

/** The root a `--rootfs [dir]` option names: dir, else the built one (an error says how to build it). */
export function sandboxRoot(opts: {
  rootfs?: string | true;
  toolsDir?: string;
  unsafeNoSandbox?: boolean;
}): string | undefined {
  if (opts.rootfs === undefined) return undefined;
  if (opts.unsafeNoSandbox)
    throw new InvalidArgumentError('--rootfs needs the sandbox: drop --unsafe-no-sandbox');
  if (typeof opts.rootfs === 'string') return resolve(opts.rootfs);
  const dir = opts.toolsDir ?? defaultToolsDir();
  const found = findRootfs(dir);
  if (!found)
    throw new Error(
      `the sandbox rootfs is not built in ${dir}: run \`stepwise tools install rootfs${opts.toolsDir ? ` --dir ${opts.toolsDir}` : ''}\` first`,
    );
  return found.root;
}

/** `stepwise gym validate`'s options. */
export interface ValidateOptions {
  json?: boolean;
  concurrency: number;
  unsafeNoSandbox?: boolean;
  rootfs?: string | true;
  toolsDir?: string;
}

/** `stepwise gym validate`: prints the offenders (or JSON) and returns how many tasks failed. */
export async function validateCommand(
  source: string,
  opts: ValidateOptions,
  print: (line: string) => void,
): Promise<number> {
  const rootfs = sandboxRoot(opts);
  if (!opts.unsafeNoSandbox) {
    const check = checkSandbox(rootfs);
    if (!check.ok)
      throw new Error(
        `the sandbox is unavailable (${check.reason}); install bubblewrap, or pass --unsafe-no-sandbox`,
      );
  }
  const tasks = await loadTasks(source);
  const results = await gateTasks(tasks, {
    concurrency: opts.concurrency,
    sandbox: opts.unsafeNoSandbox ? { unsafeNoSandbox: true } : rootfs ? { rootfs } : {},
    // Native tasks must be solvable by their reference actions; ClawGym's come without any.
    requireReference: false,
    // The scaffold probe is our heuristic, not ClawGym's gate: it warns (half of ClawGym-Bench's
    // checkers give partial credit for a file at a named path) and does not fail a task.
    scaffoldAsWarning: true,
    onResult: (task, result, done) => {
      if (!opts.json && !result.ok) print(`${task.id}: ${result.problems.join('; ')}`);
      if (!opts.json && result.warnings.length > 0)
        print(`${task.id}: warning: ${result.warnings.join('; ')}`);
      if (!opts.json && done % 10 === 0) process.stderr.write(`validated ${done}/${tasks.length}\n`);
    },
  });
  const rows = tasks.map((task, i) => {
    const r = results[i]!;
    const problems = [...r.problems];
    if (task.verifier.kind === 'checks' && (task.referenceActions?.length ?? 0) === 0)
      problems.push('a native task needs reference actions that score 1');
    return {
      task_id: task.id,
      ok: r.ok && problems.length === r.problems.length,
      noop_score: r.noopScore,
      scaffold_score: r.scaffoldScore,
      reference_score: r.referenceScore,
      problems,
      warnings: r.warnings,
    };
  });
  const failed = rows.filter((r) => !r.ok).length;
  const warned = rows.filter((r) => r.warnings.length > 0).length;
  const summary = `${rows.length - failed} of ${rows.length} tasks pass the gate; ${failed} fail; ${warned} with scaffold warnings (placeholder files at the paths the prompt names score above 0)`;
  if (opts.json)
    print(
      JSON.stringify({
        tasks: rows,
        summary: { tasks: rows.length, passed: rows.length - failed, failed, scaffold_warnings: warned },
      }),
    );
  else print(summary);
  return failed;
}
