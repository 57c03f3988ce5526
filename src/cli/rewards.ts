import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { ValidationError } from '@stepwise/core/domain/index.js';
import { DataPool } from '@stepwise/core/pool/data-pool.js';
import { openStore } from '@stepwise/core/store/open-store.js';
import { progressReporter } from '@stepwise/core/util/progress.js';
import { type ReverifyReport, reverify } from '@stepwise/gym/reverify.js';
import { sandboxRoot } from '@stepwise/gym/run.js';
import { requireSandbox } from '@stepwise/gym/sandbox/index.js';
import { loadTasks, TASK_SET_HELP } from '@stepwise/gym/tasks/index.js';
import type { Command } from 'commander';
import { positiveInt } from './flags.js';
import { addStoreOptions, existingStoreOf } from './store-options.js';

/*
 * `stepwise rewards ...`: offline work on a store's rewards. `reverify` scores stored gym episodes
 * again under a new verifier version, from the evidence their run kept (docs/gym.md#re-verification).
 */

interface ReverifyCliOptions {
  db: string;
  pgSchema?: string;
  tasks: string;
  channel?: string;
  verifierVersion?: string;
  against?: string;
  dryRun?: boolean;
  force?: boolean;
  pin?: boolean;
  concurrency: number;
  workDir?: string;
  judgeUrl?: string;
  judgeModel?: string;
  judgeApiKey?: string;
  unsafeNoSandbox?: boolean;
  rootfs?: string | true;
  toolsDir?: string;
  details?: boolean;
}

export function registerRewardsCommands(program: Command): Command {
  const rewards = program.command('rewards').description("offline work on a store's rewards");
  const command = rewards
    .command('reverify')
    .description(
      'score stored gym episodes again under a new verifier version, from the evidence their run kept, without inference; the new scores are signals of that version beside the old ones; prints a JSON report',
    );
  addStoreOptions(command)
    .requiredOption('--tasks <source>', `${TASK_SET_HELP}; its verifiers are the new version`)
    .option('--channel <name>', 'only this channel (default: every trajectory with evidence)')
    .option(
      '--verifier-version <label>',
      "the version the new signals carry (default: a digest of the task set's verifiers, vf-...)",
    )
    .option('--against <version>', "compare with this version's scores (default: each one's current score)")
    .option('--dry-run', 'score and report, write nothing')
    .option('--force', 'score again episodes that already have a score of this version')
    .option('--pin', "then serve --channel with this version's scores (its reward_pin)")
    .option('--concurrency <n>', 'episodes verified at once', positiveInt('--concurrency'), 2)
    .option('--work-dir <dir>', 'where rebuilt workspaces go while verified (default: a temporary folder)')
    .option('--judge-url <url>', 'OpenAI-compatible endpoint of an LLM judge for tasks with rubrics')
    .option('--judge-model <name>', 'model of the LLM judge (needed with --judge-url)')
    .option('--judge-api-key <key>', 'bearer key of the LLM judge', process.env.STEPWISE_JUDGE_API_KEY)
    .option('--unsafe-no-sandbox', 'run verifiers WITHOUT isolation (only for trusted tasks)')
    .option('--rootfs [dir]', 'verify in the hermetic sandbox root (as `stepwise gym run --rootfs`)')
    .option('--details', 'list every changed score in the report')
    .action(async (opts: ReverifyCliOptions) => {
      console.log(JSON.stringify(await reverifyCommand(opts), null, 2));
    });
  return rewards;
}

async function reverifyCommand(opts: ReverifyCliOptions): Promise<Record<string, unknown>> {
  if (opts.pin && (opts.dryRun || !opts.channel))
    throw new ValidationError('--pin needs --channel and no --dry-run', 'pin');
  if (opts.judgeUrl && !opts.judgeModel)
    throw new ValidationError('--judge-url needs --judge-model', 'judge-model');
  const tasks = await loadTasks(opts.tasks);
  const rootfs = sandboxRoot(opts);
  if (!opts.unsafeNoSandbox) requireSandbox(rootfs);
  const location = existingStoreOf(opts);
  const pool = new DataPool({ store: await openStore(location, { existing: true }) });
  const ownDir = opts.workDir === undefined ? mkdtempSync(join(tmpdir(), 'stepwise-reverify-')) : null;
  const progress = progressReporter('reverify', 'episodes', process.stderr);
  try {
    const report = await reverify(pool, {
      tasks,
      ...(opts.verifierVersion ? { version: opts.verifierVersion } : {}),
      channel: opts.channel ?? null,
      against: opts.against ?? null,
      dryRun: opts.dryRun === true,
      force: opts.force === true,
      concurrency: opts.concurrency,
      workDir: ownDir ?? resolve(opts.workDir!),
      unsafeNoSandbox: opts.unsafeNoSandbox,
      ...(rootfs !== undefined ? { rootfs } : {}),
      ...(opts.judgeUrl
        ? {
            judge: {
              baseURL: opts.judgeUrl,
              model: opts.judgeModel!,
              apiKey: opts.judgeApiKey || 'none',
              maxRetries: 0,
            },
          }
        : {}),
      onProgress: (done, total) => progress.update(done, total),
    });
    progress.stop();
    if (opts.pin)
      await pool.configureChannel(opts.channel!, {
        reward_pin: { signal: 'score', source: 'verifier', version: report.version },
      });
    return summary(report, opts);
  } finally {
    progress.stop();
    await pool.close();
    if (ownDir) rmSync(ownDir, { recursive: true, force: true });
  }
}

/** The report as printed: the changes listed only with --details, the pin when one was set. */
function summary(report: ReverifyReport, opts: ReverifyCliOptions): Record<string, unknown> {
  const { changes, ...rest } = report;
  return {
    ...rest,
    changed: changes.length,
    ...(opts.details ? { changes } : {}),
    ...(opts.pin
      ? { pinned: { channel: opts.channel, signal: 'score', source: 'verifier', version: report.version } }
      : {}),
  };
}
