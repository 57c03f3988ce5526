import { join } from 'node:path';
import { GUIDE_STRATEGIES, INJECTION_MODES } from '@stepwise/core/curation/actguide/index.js';
import type { InjectedErrorKind } from '@stepwise/core/engines/sim/policies.js';
import { type RunningServer, startServer } from '@stepwise/core/server/server.js';
import { DEFAULT_QUEUE_SCHEMA } from '@stepwise/gym/distributed/queue.js';
import { DEFAULT_JOB_RETRIES } from '@stepwise/gym/distributed.js';
import { type GuideCommandOptions, guidedRunner } from '@stepwise/gym/guide-run.js';
import {
  formatSummary,
  type GymRunner,
  planGymRun,
  type RunCommandOptions,
  runGymPlan,
} from '@stepwise/gym/run.js';
import type { GymRunOptions, GymSummary, SampleResult } from '@stepwise/gym/runner.js';
import { referenceTasks, TASK_SET_HELP } from '@stepwise/gym/tasks/index.js';
import type { GymTask } from '@stepwise/gym/tasks/schema.js';
import { type ValidateOptions, validateCommand } from '@stepwise/gym/validate.js';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { embeddedStoreOf, serverStore } from '../embedded-store.js';
import { errorKinds, nonNegative, positiveInt, probability } from './flags.js';
import { registerSynthCommand } from './gym-synth.js';
import { addEmbeddedStoreOptions } from './store-options.js';

/*
 * `stepwise gym ...`: run tasks through the gateway (`run`), gate a task set (`validate`) and
 * synthesize tasks (`synth`, registered by gym-synth.ts); `stepwise guide` is `gym run --guide`.
 */

/** Where the agents' LLM calls go: a running Stepwise (`--gateway`) or one started here over `--db` (default `<out>/stepwise.db`). */
export async function gatewayFor(
  opts: {
    gateway?: string;
    engine: string[];
    out: string;
    db?: string;
    pgSchema?: string;
    errorRate: number;
    errorKinds?: InjectedErrorKind[];
    giveUpRate: number;
    seed: number;
    simNeedsPlan?: number;
  },
  tasks: readonly GymTask[],
): Promise<{ url: string; server: RunningServer | null }> {
  if (opts.gateway) {
    if (opts.engine.length > 0) throw new InvalidArgumentError('--gateway and --engine exclude each other');
    if (opts.db !== undefined)
      throw new InvalidArgumentError("--db is the in-process server's store: --gateway names a running one");
    return { url: opts.gateway.replace(/\/+$/, ''), server: null };
  }
  const engines = opts.engine.length > 0 ? opts.engine : ['sim'];
  const reference = referenceTasks(tasks);
  const server = await startServer({
    ...serverStore(embeddedStoreOf(opts, opts.out, 'stepwise.db')),
    port: 0,
    engines,
    sim:
      reference.length > 0
        ? {
            policy: 'reference',
            tasks: reference,
            errorRate: opts.errorRate,
            errorKinds: opts.errorKinds,
            giveUpRate: opts.giveUpRate,
            needsPlan: opts.simNeedsPlan,
            seed: opts.seed,
          }
        : { policy: 'echo', seed: opts.seed },
  });
  return { url: server.url, server };
}

/**
 * A gym run (packages/gym/src/run.ts) through the gateway `gatewayFor` finds: the one started here lives as
 * long as the run.
 */
export async function runWithGateway(
  opts: RunCommandOptions,
  print: (line: string) => void,
  run?: (
    options: GymRunOptions,
    base: GymRunner,
  ) => Promise<{ results: SampleResult[]; summary: GymSummary }>,
): Promise<Awaited<ReturnType<typeof runGymPlan>>> {
  const plan = await planGymRun(opts, print);
  const { url, server } = await gatewayFor(opts, plan.tasks);
  try {
    return await runGymPlan(plan, url, print, run);
  } finally {
    await server?.close();
  }
}

const ROOTFS_HELP =
  "run the sandbox on the hermetic root filesystem that `stepwise tools install rootfs` built (or on the root at dir) instead of the host's /usr: the same python, pytest and CLI tools on every host (docs/gym-sandbox.md)";

/**
 * `gym run`'s options (also `guide`'s and `bench`'s). `--pg` falls back to $STEPWISE_PG_URL at run
 * time, not as a default value: --help would print the URL's password.
 */
export function addRunOptions(command: Command): Command {
  return addEmbeddedStoreOptions(addEvidenceOptions(command), 'stepwise.db')
    .requiredOption('--tasks <path>', TASK_SET_HELP)
    .option('--out <dir>', 'results, state (for resuming) and the embedded store', 'gym-out')
    .option('--samples <k>', 'samples per task (one group)', positiveInt('--samples'), 4)
    .option('--concurrency <n>', 'samples run at once', positiveInt('--concurrency'), 8)
    .option(
      '--agent <agent>',
      "'builtin', 'openclaw' (stock OpenClaw, see `stepwise tools install openclaw`), 'codex' (Codex CLI, see `stepwise tools install codex`), 'claude-code' (Claude Code, see `stepwise tools install claude-code`) or a command template with {prompt_file} {workspace} {task_id} {model}",
      'builtin',
    )
    .option(
      '--tools-dir <dir>',
      'where `stepwise tools install` put OpenClaw, Codex or Claude Code (default: $STEPWISE_TOOLS_DIR or .stepwise/tools)',
    )
    .option(
      '--engine <spec>',
      'engine of an in-process gateway: sim (default), vllm=URL, sglang=URL, openai=URL (repeatable)',
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
      '--model-dir <dir>',
      "built-in agent with --cleaner: the engine's model folder, whose tool-call token CLEANER grafts at (default: the in-process engines' model-dir, else the built-in Qwen3)",
    )
    .option('--model-family <name>', 'built-in agent: the family of --model-dir (detected when absent)')
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
      '--error-kinds <list>',
      'sim reference policy: kinds of wrong call, from wrong_argument,unknown_tool (default both; one pins them)',
      errorKinds,
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
      'PostgreSQL schema of the rollout queue (its job, task and attempt tables; created on first use)',
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

/** What a run keeps for re-verification (docs/gym.md#re-verification). */
function addEvidenceOptions(command: Command): Command {
  return command
    .option(
      '--evidence-mb <n>',
      'keep what each verifier read (final workspace, final message) in the store for `stepwise rewards reverify`, up to this many MiB a sample (0: keep none)',
      nonNegative('--evidence-mb'),
      16,
    )
    .option(
      '--verifier-version <label>',
      "the version the verifier's signals carry (default: a digest of the task set's verifiers, vf-...)",
    );
}

/** `gym run --groups`: the run's work from the pool's prompt scheduler (docs/gym.md#scheduled-runs). */
function addScheduleOptions(command: Command): Command {
  return command
    .option(
      '--groups <n>',
      "take the work from the pool's prompt scheduler (the channel's): run this many groups of --samples rollouts, each prompt the pool hands out next (docs/gym.md#scheduled-runs)",
      positiveInt('--groups'),
    )
    .addOption(
      new Option(
        '--schedule-policy <policy>',
        "with --groups: set the channel's schedule policy first",
      ).choices(['in_order', 'uniform', 'difficulty']),
    )
    .option(
      '--task-set <name>',
      "with --groups: the task set the run's tasks are registered under (a channel's mixture weighs sets)",
    );
}

/** `stepwise gym run --guide [strategy] ...` (docs/actguide.md). */
function addGuideOptions(command: Command): Command {
  return command
    .addOption(
      new Option(
        '--guide [strategy]',
        'ActGuide: replace hard groups by groups guided with reference actions',
      )
        .choices(GUIDE_STRATEGIES)
        .preset('adaptive'),
    )
    .option('--guide-k <n>', '--guide fixed_k: actions revealed', positiveInt('--guide-k', 0))
    .option(
      '--guide-ratio <r>',
      '--guide fixed_ratio: share of the actions revealed, in (0, 1]',
      (v: string) => {
        const r = Number(v);
        if (!(r > 0 && r <= 1)) throw new InvalidArgumentError('--guide-ratio must be a number in (0, 1]');
        return r;
      },
    )
    .option(
      '--probe-rollouts <n>',
      '--guide adaptive: rollouts per probed k (default 2)',
      positiveInt('--probe-rollouts', 1),
    )
    .option(
      '--max-probe-steps <n>',
      '--guide adaptive: probed k values at most (default 5)',
      positiveInt('--max-probe-steps', 0),
    )
    .option(
      '--sim-needs-plan <share>',
      "sim reference policy: share of a task's actions a reference plan in the prompt must show before it can finish (hard tasks for --guide)",
      (v: string) => {
        const r = Number(v);
        if (!(r >= 0 && r <= 1))
          throw new InvalidArgumentError('--sim-needs-plan must be a number from 0 to 1');
        return r;
      },
    )
    .option(
      '--guide-actions <file>',
      'action logs for tasks without reference actions: JSONL of {"task_id", "actions": [{"name", "arguments" or "args"}]}',
    )
    .addOption(
      new Option('--guide-mode <mode>', 'where the hint goes: the user message, or an assistant prefix')
        .choices(INJECTION_MODES)
        .default('user_prompt'),
    )
    .option(
      '--guide-api-key <key>',
      'key with the admin scope for labelling replaced groups (default --api-key)',
      process.env.STEPWISE_ADMIN_API_KEY,
    );
}

export function registerGymCommands(program: Command): Command {
  const gym = program
    .command('gym')
    .description('Claw-style tasks: run them through the gateway, validate, synthesize');
  addGuideOptions(
    addScheduleOptions(
      addRunOptions(
        gym
          .command('run')
          .description(
            'run every task × --samples through the gateway (one group per task), verify, store rewards',
          ),
      ),
    ),
  ).action(async (opts: RunCommandOptions & GuideCommandOptions) => {
    const print = (line: string) => console.error(line);
    const { summary, runId } = await runWithGateway(opts, print, guidedRunner(opts, print));
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
  ).action(async (opts: RunCommandOptions & GuideCommandOptions) => {
    const print = (line: string) => console.error(line);
    const guided = { ...opts, guide: opts.guide ?? ('adaptive' as const) };
    const { summary, runId } = await runWithGateway(guided, print, guidedRunner(guided, print));
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
