import { join } from 'node:path';
import { StepwiseError, ValidationError } from '@stepwise/core/domain/errors.js';
import { progressReporter } from '@stepwise/core/util/progress.js';
import { CATEGORIES } from '@stepwise/gym/tasks/schema.js';
import { MAX_TASKS, parseSeed, type SynthSeed, synthesize, TEMPLATES } from '@stepwise/gym-synth/index.js';
import { llmManifestOf, synthesizeWithLlm, writeLlmManifest } from '@stepwise/gym-synth/llm.js';
import {
  checkOutDir,
  MANIFEST_FILE,
  SYNTH_FORMATS,
  type SynthFormat,
  TASKS_FILE,
  writeSynthOutput,
} from '@stepwise/gym-synth/output.js';
import { type Command, InvalidArgumentError, Option } from 'commander';

/*
 * `stepwise gym synth`: synthesize tasks and write them as tasks.jsonl or ClawGym folders, with a
 * manifest. A thin handler: parse flags, call synthesize and writeSynthOutput, report.
 */

function countFlag(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < 1 || n > MAX_TASKS) {
      throw new InvalidArgumentError(`${flag} must be an integer from 1 to ${MAX_TASKS}`);
    }
    return n;
  };
}

function seedFlag(value: string): SynthSeed {
  try {
    return parseSeed(value);
  } catch (error) {
    throw new InvalidArgumentError(`--seed: ${(error as Error).message.replace(/^seed /, '')}`);
  }
}

function rangeFlag(flag: string, min: number, max: number) {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isInteger(n) || n < min || n > max) {
      throw new InvalidArgumentError(`${flag} must be an integer from ${min} to ${max}`);
    }
    return n;
  };
}

function secondsFlag(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 3600) {
      throw new InvalidArgumentError(`${flag} must be a number of seconds above 0, at most 3600`);
    }
    return n;
  };
}

/** The flags of `--mode llm`. */
interface LlmFlags {
  mode: 'procedural' | 'llm';
  llmUrl?: string;
  llmModel?: string;
  llmApiKey?: string;
  llmTimeout: number;
  repairRounds: number;
  concurrency: number;
}

/** Adds `synth` under the `gym` command. */
export function registerSynthCommand(gym: Command): Command {
  return gym
    .command('synth')
    .description(
      `synthesize Claw-style tasks (persona × category × operation template; ${TEMPLATES.length} templates over ${CATEGORIES.length} categories) with generated input files, check-DSL verifiers and reference actions; writes ${TASKS_FILE} or ClawGym task folders, and ${MANIFEST_FILE}`,
    )
    .option('--n <count>', 'number of tasks', countFlag('--n'), 200)
    .option(
      '--seed <seed>',
      'seed: a non-negative integer or a short label (same seed, same tasks)',
      seedFlag,
      0 as SynthSeed,
    )
    .requiredOption('--out <dir>', 'output directory (created; must be absent or empty)')
    .addOption(
      new Option('--format <format>', `${TASKS_FILE} (one task per line) or one ClawGym folder per task`)
        .choices([...SYNTH_FORMATS])
        .default('jsonl'),
    )
    .addOption(
      new Option(
        '--mode <mode>',
        'procedural: the templates; llm: an OpenAI-compatible model writes each task (request, input files, checks, reference actions), gated and deduplicated',
      )
        .choices(['procedural', 'llm'])
        .default('procedural'),
    )
    .option('--llm-url <url>', 'with --mode llm: OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1)')
    .option('--llm-model <model>', 'with --mode llm: the model name')
    .option('--llm-api-key <key>', 'with --mode llm: API key (default: env STEPWISE_LLM_API_KEY)')
    .option('--llm-timeout <seconds>', 'with --mode llm: per request', secondsFlag('--llm-timeout'), 120)
    .option(
      '--repair-rounds <count>',
      'with --mode llm: follow-up turns per stage (unusable reply, gate failure)',
      rangeFlag('--repair-rounds', 0, 10),
      2,
    )
    .option('--concurrency <count>', 'with --mode llm: tasks in flight', rangeFlag('--concurrency', 1, 64), 4)
    .action(async (opts: { n: number; seed: SynthSeed; out: string; format: SynthFormat } & LlmFlags) => {
      if (opts.mode === 'llm') {
        if (!opts.llmUrl) throw new ValidationError('--llm-url is required with --mode llm', 'llm-url');
        if (!opts.llmModel) throw new ValidationError('--llm-model is required with --mode llm', 'llm-model');
      } else if (opts.llmUrl !== undefined || opts.llmModel !== undefined) {
        throw new ValidationError('--llm-url and --llm-model need --mode llm', 'mode');
      }
      try {
        await checkOutDir(opts.out);
      } catch (error) {
        if (error instanceof ValidationError)
          throw new ValidationError(error.message.replace(/^out:/, '--out:'), 'out');
        throw error;
      }
      if (opts.mode === 'llm') return synthLlmCommand(opts);
      const building = progressReporter('synth', 'tasks');
      let tasks: ReturnType<typeof synthesize>;
      try {
        tasks = synthesize({ n: opts.n, seed: opts.seed }, (done, total) => building.update(done, total));
      } finally {
        building.stop();
      }
      const manifest = await writeTasks(tasks, opts);
      const where = opts.format === 'jsonl' ? join(opts.out, TASKS_FILE) : `${opts.out}/<task id>/`;
      console.log(
        `synthesized ${manifest.n} tasks (${manifest.templates_used} templates, ${Object.keys(manifest.counts.by_category).length} categories) to ${where}`,
      );
      console.log(`manifest: ${join(opts.out, MANIFEST_FILE)} (${manifest.content_hash})`);
    });
}

/** Writes the tasks and the manifest with a progress bar; errors about the output name `--out`. */
async function writeTasks(
  tasks: Parameters<typeof writeSynthOutput>[0]['tasks'],
  opts: { seed: SynthSeed; out: string; format: SynthFormat },
): Promise<Awaited<ReturnType<typeof writeSynthOutput>>> {
  const writing = progressReporter('write', 'tasks');
  try {
    return await writeSynthOutput({
      tasks,
      outDir: opts.out,
      format: opts.format,
      seed: opts.seed,
      onProgress: (done, total) => writing.update(done, total),
    });
  } catch (error) {
    if (error instanceof StepwiseError && error.field === 'out') {
      throw new StepwiseError(error.message.replace(/^out:/, '--out:'), error.status, error.code, 'out');
    }
    throw error;
  } finally {
    writing.stop();
  }
}

/** `--mode llm`: the model writes the tasks; the manifest counts accepted and dropped candidates. */
async function synthLlmCommand(
  opts: { n: number; seed: SynthSeed; out: string; format: SynthFormat } & LlmFlags,
): Promise<void> {
  const model = opts.llmModel!;
  const building = progressReporter('synth', 'tasks');
  let result: Awaited<ReturnType<typeof synthesizeWithLlm>>;
  try {
    result = await synthesizeWithLlm({
      n: opts.n,
      seed: opts.seed,
      llm: {
        baseURL: opts.llmUrl!,
        apiKey: opts.llmApiKey ?? process.env.STEPWISE_LLM_API_KEY ?? 'EMPTY',
        model,
        timeoutMs: Math.round(opts.llmTimeout * 1000),
      },
      repairRounds: opts.repairRounds,
      concurrency: opts.concurrency,
      onProgress: (done, total) => building.update(done, total),
    });
  } finally {
    building.stop();
  }
  const { tasks, stats } = result;
  const base = await writeTasks(tasks, opts);
  const manifest = llmManifestOf(base, tasks, stats, { model, repairRounds: opts.repairRounds });
  await writeLlmManifest(opts.out, MANIFEST_FILE, manifest);
  const dropped = Object.entries(stats.dropped)
    .filter(([, count]) => count > 0)
    .map(([reason, count]) => `${reason} ${count}`)
    .join(', ');
  const where = opts.format === 'jsonl' ? join(opts.out, TASKS_FILE) : `${opts.out}/<task id>/`;
  console.log(
    `accepted ${stats.accepted}/${stats.requested} tasks from ${model} (${stats.llmCalls} requests) to ${where}`,
  );
  console.log(`dropped: ${dropped || 'none'}`);
  console.log(`manifest: ${join(opts.out, MANIFEST_FILE)} (${manifest.content_hash})`);
}
