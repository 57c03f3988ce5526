import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import {
  fromZodError,
  Quality,
  StepwiseError,
  TrajectoryStatus,
  ValidationError,
} from '@stepwise/core/domain/index.js';
import { checkImport, type ImportResult, importTrajectories } from '@stepwise/core/export/import.js';
import { type ExportManifest, MANIFEST_FILE } from '@stepwise/core/export/manifest.js';
import { EXPORT_KINDS, ExportRequest } from '@stepwise/core/export/request.js';
import { runExport } from '@stepwise/core/export/run-export.js';
import { poolOps } from '@stepwise/core/pool/core.js';
import { ADVANTAGE_ESTIMATORS } from '@stepwise/core/serving/advantages.js';
import { describeLocation, openStore } from '@stepwise/core/store/open-store.js';
import { progressReporter } from '@stepwise/core/util/progress.js';
import { type Command, InvalidArgumentError, Option } from 'commander';
import { addStoreOptions, existingStoreOf, storeOf } from './store-options.js';

function finite(flag: string) {
  return (value: string) => {
    const n = Number(value);
    if (value.trim() === '' || !Number.isFinite(n))
      throw new InvalidArgumentError(`${flag} must be a number`);
    return n;
  };
}

/** A request field as the flag a user typed (`min_reward` → `--min-reward`). */
function flagOf(field: string | undefined): string {
  if (!field || field === 'body') return 'arguments';
  const top = field.split('.')[0]!;
  return top === 'kind' ? '<kind>' : `--${top.replace(/_/g, '-')}`;
}

/** `stepwise export <kind>` and `stepwise import <file>`. */
export function registerExportCommands(program: Command): void {
  const exportCommand = program
    .command('export')
    .description(
      'write a dataset from the store: sft (chat JSONL), dpo (preference pairs JSONL), rl (Parquet with tokens and advantages) or trajectories (full-fidelity JSONL for stepwise import); a manifest.json with filters, counts and sha256 digests is written beside it',
    )
    .argument('<kind>', `what to export: ${EXPORT_KINDS.join(', ')}`);
  addStoreOptions(exportCommand)
    .requiredOption(
      '--out <dir>',
      'directory for <kind>.jsonl or rl.parquet and manifest.json (created if missing)',
    )
    .option('--force', 'replace an export already in --out')
    .option('--channel <name>', 'only this channel')
    .addOption(
      new Option('--status <status>', 'trajectory status (default: complete; trajectories: any)').choices([
        ...TrajectoryStatus.options,
        'any',
      ]),
    )
    .option('--min-reward <x>', 'only trajectories with reward >= x', finite('--min-reward'))
    .option('--max-reward <x>', 'only trajectories with reward <= x', finite('--max-reward'))
    .addOption(
      new Option(
        '--trainable <bool>',
        'only trajectories labelled (or with steps labelled) trainable so',
      ).choices(['true', 'false']),
    )
    .addOption(
      new Option('--quality <q>', 'only trajectories labelled with this quality').choices(Quality.options),
    )
    .option('--tag <name>', 'only trajectories labelled with this tag')
    .option('--group <id>', 'only this prompt group')
    .option('--task <id>', 'only this task')
    .option(
      '--min-margin <x>',
      'dpo: smallest reward gap of a pair (a pair always needs a gap > 0)',
      finite('--min-margin'),
    )
    .addOption(
      new Option('--advantage <estimator>', 'rl: advantage estimator (default grpo)').choices(
        ADVANTAGE_ESTIMATORS,
      ),
    )
    .action(exportDataset);

  const importCommand = program
    .command('import')
    .description(
      'load a trajectories.jsonl written by `stepwise export trajectories` into a store (checked whole first)',
    )
    .argument('<file>', 'trajectories.jsonl (a manifest.json beside it is checked against the file)');
  addStoreOptions(importCommand).action(importDataset);
}

/** `stepwise export <kind>`: the request checked as flags, the dataset and its manifest written. */
// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
async function exportDataset(kind: string, opts: any): Promise<void> {
  const parsed = ExportRequest.safeParse({
    kind,
    channel: opts.channel,
    status: opts.status,
    min_reward: opts.minReward,
    max_reward: opts.maxReward,
    trainable: opts.trainable === undefined ? undefined : opts.trainable === 'true',
    quality: opts.quality,
    tag: opts.tag,
    group: opts.group,
    task: opts.task,
    min_margin: opts.minMargin,
    advantage: opts.advantage,
  });
  if (!parsed.success) {
    const error = fromZodError(parsed.error);
    throw new ValidationError(error.message.replace(/^[^:]*:/, `${flagOf(error.field)}:`), error.field);
  }
  const location = existingStoreOf(opts);
  if (existsSync(opts.out) && !statSync(opts.out).isDirectory())
    throw new ValidationError(`--out: ${opts.out} is not a directory`, 'out');
  const store = await openStore(location, { existing: true });
  const progress = progressReporter(`export ${kind}`, 'trajectories');
  let manifest: ExportManifest;
  try {
    manifest = await runExport({
      store: poolOps(store),
      request: parsed.data,
      outDir: opts.out,
      overwrite: opts.force === true,
      onProgress: (done, total) => progress.update(done, total),
    });
  } catch (error) {
    // The CLI speaks in flags.
    if (error instanceof StepwiseError && error.field === 'out')
      throw new StepwiseError(error.message.replace(/^out:/, '--out:'), error.status, error.code, 'out');
    throw error;
  } finally {
    progress.stop();
    await store.close();
  }
  const file = manifest.files[0]!;
  const skipped = Object.entries(manifest.counts.skipped)
    .map(([reason, n]) => `${reason} ${n}`)
    .join(', ');
  console.log(
    `exported ${file.records} ${kind === 'rl' ? 'row' : 'line'}${file.records === 1 ? '' : 's'} from ${manifest.counts.trajectories} trajectories (${manifest.counts.steps} steps) to ${join(opts.out, file.name)}${skipped ? `; skipped: ${skipped}` : ''}`,
  );
  console.log(`manifest: ${join(opts.out, MANIFEST_FILE)} (sha256 ${file.sha256})`);
}

/** `stepwise import <file>`: a checked trajectories.jsonl loaded into the store. */
// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
async function importDataset(file: string, opts: any): Promise<void> {
  if (!existsSync(file) || !statSync(file).isFile())
    throw new ValidationError(`<file>: ${file} does not exist`, 'file');
  const location = storeOf(opts);
  // A new SQLite database is created only for a file that passed the checks.
  const checked =
    location.kind === 'sqlite' && !existsSync(location.path) ? await checkImport(file, null) : undefined;
  // A bulk load: commits need not wait for the disk (a crash mid-import means running it again).
  const store = await openStore(location, { synchronous: 'NORMAL' });
  const progress = progressReporter('import', 'trajectories');
  let result: ImportResult;
  try {
    result = await importTrajectories({
      store: poolOps(store),
      file,
      checked,
      onProgress: (done, total) => progress.update(done, total),
    });
  } finally {
    progress.stop();
    await store.close();
  }
  console.log(
    `imported ${result.trajectories} trajectories (${result.steps} steps, ${result.labels} labels) into ${describeLocation(location)}${result.verified ? '; sha256 matches the manifest' : ''}`,
  );
}
