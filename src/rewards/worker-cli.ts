import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { DataPool } from '../pool/data-pool.js';
import { openPostgresStore, redactUrl } from '../store/postgres/postgres-store.js';
import { createLogger } from '../util/logger.js';
import { loadRewardsConfig } from './config.js';
import { RewardService } from './service.js';

/*
 * `stepwise worker rewards`: runs reward jobs from a PostgreSQL store's job queue, on any machine.
 * Servers given `--rewards FILE --reward-workers 0` queue the jobs; any number of these run them
 * (claims use SKIP LOCKED: no job runs twice at once, a dead worker's job is claimed again after its
 * lease). Each also follows the event log and queues jobs, so it works without such servers too.
 */

interface RewardWorkerCliOptions {
  pg?: string;
  pgSchema: string;
  rewards: string;
  concurrency?: number;
  schedule: boolean;
}

const count = (name: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new InvalidArgumentError(`${name} must be a whole number >= 1`);
  return n;
};

export function registerRewardWorkerCommand(worker: Command): Command {
  return worker
    .command('rewards')
    .description(
      'run reward jobs (rules, verifiers, judges, reward models) from a PostgreSQL store (docs/rewards.md)',
    )
    .option(
      '--pg <url>',
      'PostgreSQL database of the store, postgres://user@host:port/db (default: $STEPWISE_PG_URL)',
    )
    .option('--pg-schema <name>', 'schema of the store in --pg', process.env.STEPWISE_PG_SCHEMA ?? 'public')
    .requiredOption(
      '--rewards <file>',
      'reward functions, combinations and workers (JSON; the servers use the same)',
    )
    .option(
      '--concurrency <n>',
      "jobs run at once (default: the config's workers.concurrency)",
      count('--concurrency'),
    )
    .option('--no-schedule', 'only run queued jobs; leave following the event log to other processes')
    .action(async (opts: RewardWorkerCliOptions) => {
      const url = opts.pg ?? (process.env.STEPWISE_PG_URL || undefined);
      if (!url)
        throw new InvalidArgumentError('--pg (or STEPWISE_PG_URL): the PostgreSQL database of the store');
      const logger = createLogger();
      const config = await loadRewardsConfig(opts.rewards);
      const store = await openPostgresStore({ url, schema: opts.pgSchema });
      const pool = new DataPool({ store, logger });
      let service: RewardService;
      try {
        service = (
          await RewardService.open({
            pool,
            config,
            pg: { url, schema: opts.pgSchema },
            concurrency: opts.concurrency,
            schedule: opts.schedule,
            logger,
          })
        ).start();
      } catch (error) {
        await pool.close();
        throw error;
      }
      logger.info(
        {
          pg: redactUrl(url),
          schema: opts.pgSchema,
          concurrency: opts.concurrency ?? config.workers.concurrency,
        },
        'stepwise reward worker ready',
      );
      let stopping = false;
      const stop = async (signal: string) => {
        if (stopping) process.exit(1); // a second signal: at once
        stopping = true;
        logger.info({ signal }, 'stopping after the running jobs');
        await service.close();
        await pool.close();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop('SIGINT'));
      process.once('SIGTERM', () => void stop('SIGTERM'));
    });
}
