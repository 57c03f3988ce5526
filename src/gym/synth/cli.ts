import { join } from 'node:path';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { StepwiseError, ValidationError } from '../../domain/errors.js';
import { progressReporter } from '../../util/progress.js';
import { CATEGORIES } from '../tasks/schema.js';
import { MAX_TASKS, parseSeed, type SynthSeed, synthesize, TEMPLATES } from './index.js';
import {
  checkOutDir,
  MANIFEST_FILE,
  SYNTH_FORMATS,
  type SynthFormat,
  TASKS_FILE,
  writeSynthOutput,
} from './output.js';

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
    .action(async (opts: { n: number; seed: SynthSeed; out: string; format: SynthFormat }) => {
      try {
        await checkOutDir(opts.out);
      } catch (error) {
        if (error instanceof ValidationError)
          throw new ValidationError(error.message.replace(/^out:/, '--out:'), 'out');
        throw error;
      }
      const building = progressReporter('synth', 'tasks');
      let tasks: ReturnType<typeof synthesize>;
      try {
        tasks = synthesize({ n: opts.n, seed: opts.seed }, (done, total) => building.update(done, total));
      } finally {
        building.stop();
      }
      const writing = progressReporter('write', 'tasks');
      try {
        const manifest = await writeSynthOutput({
          tasks,
          outDir: opts.out,
          format: opts.format,
          seed: opts.seed,
          onProgress: (done, total) => writing.update(done, total),
        });
        writing.stop();
        const where = opts.format === 'jsonl' ? join(opts.out, TASKS_FILE) : `${opts.out}/<task id>/`;
        console.log(
          `synthesized ${manifest.n} tasks (${manifest.templates_used} templates, ${Object.keys(manifest.counts.by_category).length} categories) to ${where}`,
        );
        console.log(`manifest: ${join(opts.out, MANIFEST_FILE)} (${manifest.content_hash})`);
      } catch (error) {
        writing.stop();
        if (error instanceof StepwiseError && error.field === 'out') {
          throw new StepwiseError(error.message.replace(/^out:/, '--out:'), error.status, error.code, 'out');
        }
        throw error;
      }
    });
}
