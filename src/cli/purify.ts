import { purifyStore } from '@stepwise/core/curation/cleaner/derive.js';
import { StepwiseError } from '@stepwise/core/domain/index.js';
import { poolOps } from '@stepwise/core/pool/core.js';
import { openStore } from '@stepwise/core/store/open-store.js';
import { progressReporter } from '@stepwise/core/util/progress.js';
import { type Command, InvalidArgumentError } from 'commander';
import { addStoreOptions, existingStoreOf } from './store-options.js';

const unit = (flag: string) => (value: string) => {
  const n = Number(value);
  if (value.trim() === '' || !(n >= 0 && n <= 1))
    throw new InvalidArgumentError(`${flag} must be a number from 0 to 1`);
  return n;
};

const count = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new InvalidArgumentError(`${flag} must be an integer >= 0`);
  return n;
};

/** `stepwise purify`: offline CLEANER over a store (docs/cleaner.md). */
export function registerPurifyCommand(program: Command): void {
  const command = program
    .command('purify')
    .description(
      'offline CLEANER: roll self-corrected tool errors out of stored trajectories, written as derived trajectories in <channel>-purified (originals kept); prints a JSON summary',
    );
  addStoreOptions(command)
    .option('--channel <name>', 'only this channel (default: every channel)')
    .option('--trajectory <id>', 'only this trajectory')
    .option('--into <channel>', 'channel of the derived trajectories (default: <channel>-purified)')
    .option('--p <p>', 'chance rollback is on for a trajectory (default 1)', unit('--p'))
    .option(
      '--max-retries <n>',
      'rollbacks of one turn before its error stays (default 3)',
      count('--max-retries'),
    )
    .option(
      '--max-attempts <n>',
      'tool attempts after which rollback stops (default 30)',
      count('--max-attempts'),
    )
    .option(
      '--threshold <s>',
      'similarity at or above which a repair is shallow (default 0.5)',
      unit('--threshold'),
    )
    .option('--dry-run', 'purify and report, write nothing')
    .option('--details', 'list every trajectory in the summary')
    .action(async (opts) => {
      const location = existingStoreOf(opts);
      const store = await openStore(location, { existing: true });
      const progress = progressReporter('purify', 'trajectories', process.stderr);
      try {
        const summary = await purifyStore(poolOps(store), {
          channel: opts.channel,
          trajectoryId: opts.trajectory,
          into: opts.into,
          dryRun: opts.dryRun === true,
          cleaner: {
            ...(opts.p !== undefined ? { p: opts.p } : {}),
            ...(opts.maxRetries !== undefined ? { maxRetries: opts.maxRetries } : {}),
            ...(opts.maxAttempts !== undefined ? { maxAttempts: opts.maxAttempts } : {}),
            ...(opts.threshold !== undefined ? { threshold: opts.threshold } : {}),
          },
          onProgress: (done, total) => progress.update(done, total),
        });
        progress.stop();
        const { trajectories, ...rest } = summary;
        console.log(JSON.stringify(opts.details ? summary : rest, null, 2));
      } catch (error) {
        // The CLI speaks in flags.
        if (error instanceof StepwiseError && error.field && /^(trajectory|into|channel)$/.test(error.field))
          throw new StepwiseError(
            error.message.replace(new RegExp(`^${error.field}:`), `--${error.field}:`),
            error.status,
            error.code,
            error.field,
          );
        throw error;
      } finally {
        progress.stop();
        await store.close();
      }
    });
}
