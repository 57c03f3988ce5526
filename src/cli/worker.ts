import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { DataPool } from '@stepwise/core/pool/data-pool.js';
import { loadRewardsConfig } from '@stepwise/core/rewards/config.js';
import { RewardService } from '@stepwise/core/rewards/service.js';
import { openStore } from '@stepwise/core/store/open-store.js';
import { redactUrl } from '@stepwise/core/store/postgres/postgres-store.js';
import { createLogger } from '@stepwise/core/util/logger.js';
import {
  checkPgUrl,
  checkQueueSchema,
  DEFAULT_QUEUE_SCHEMA,
  RolloutQueue,
} from '@stepwise/gym/distributed/queue.js';
import { type RolloutWorkerEvent, startRolloutWorker } from '@stepwise/gym/distributed/worker.js';
import { checkSandbox } from '@stepwise/gym/sandbox/index.js';
import { type Command, InvalidArgumentError } from 'commander';
import { positiveInt } from './flags.js';
import { rewardPlugins } from './reward-plugins.js';

/*
 * `stepwise worker ...`: processes that work a PostgreSQL-backed queue, any number of them on any
 * machines. `rollouts` runs gym samples (the rollout queue, docs/distributed.md); `rewards` runs
 * reward jobs of a PostgreSQL store (docs/rewards.md).
 */

export function registerWorkerCommands(program: Command): Command {
  const worker = program
    .command('worker')
    .description('queue workers over PostgreSQL: rollouts (gym samples), rewards (reward jobs)');
  registerRolloutWorkerCommand(worker);
  registerRewardWorkerCommand(worker);
  return worker;
}

// ---- worker rollouts: a rollout worker process (gym/distributed/worker.ts) with JSON logs on stderr ----

interface RolloutWorkerCliOptions {
  pg?: string;
  queueSchema: string;
  concurrency: number;
  gateway?: string;
  apiKey?: string;
  judgeApiKey?: string;
  workDir: string;
  keepWorkspaces?: boolean;
  toolsDir?: string;
  pollMs: number;
  unsafeNoSandbox?: boolean;
}

function registerRolloutWorkerCommand(worker: Command): Command {
  return worker
    .command('rollouts')
    .description(
      'run gym samples from the rollout queue (`stepwise gym run --distributed`): sandbox, agent, verifier, result back to the queue',
    )
    .option(
      '--pg <url>',
      'PostgreSQL database of the rollout queue, postgres://user@host:port/db (default: $STEPWISE_PG_URL)',
    )
    .option(
      '--queue-schema <name>',
      'PostgreSQL schema of the rollout queue (as given to gym run)',
      process.env.STEPWISE_QUEUE_SCHEMA ?? DEFAULT_QUEUE_SCHEMA,
    )
    .option('--concurrency <n>', 'samples run at once', positiveInt('--concurrency'), 4)
    .option(
      '--gateway <url>',
      "a Stepwise server to use instead of the one each job names (the coordinator's)",
    )
    .option('--api-key <key>', 'bearer key for the gateway (agent scope)', process.env.STEPWISE_API_KEY)
    .option(
      '--judge-api-key <key>',
      'bearer key of the LLM judge that jobs name',
      process.env.STEPWISE_JUDGE_API_KEY,
    )
    .option('--work-dir <dir>', 'sample workspaces are made under here', join(tmpdir(), 'stepwise-rollouts'))
    .option('--keep-workspaces', 'keep each sample workspace under --work-dir')
    .option(
      '--tools-dir <dir>',
      'where `stepwise tools install` put OpenClaw, Codex and Claude Code, for jobs with --agent openclaw, codex or claude-code (default: $STEPWISE_TOOLS_DIR or .stepwise/tools)',
    )
    .option(
      '--poll-ms <ms>',
      'how long an idle slot waits before asking for a job again',
      positiveInt('--poll-ms'),
      1_000,
    )
    .option('--unsafe-no-sandbox', 'run agents and verifiers WITHOUT isolation (never on untrusted tasks)')
    .action(runRolloutWorker);
}

/** `stepwise worker rollouts`: runs the queue's samples until SIGINT or SIGTERM. */
async function runRolloutWorker(opts: RolloutWorkerCliOptions): Promise<void> {
  // From the environment here, not as a default: --help would print its password.
  const pg = opts.pg || process.env.STEPWISE_PG_URL;
  if (!pg) throw new InvalidArgumentError('--pg <url> (or STEPWISE_PG_URL) is required: the rollout queue');
  checkPgUrl(pg, '--pg');
  checkQueueSchema(opts.queueSchema);
  if (opts.gateway) {
    try {
      new URL(opts.gateway);
    } catch {
      throw new InvalidArgumentError(`--gateway: '${opts.gateway}' is not a URL`);
    }
  }
  const logger = createLogger();
  if (opts.unsafeNoSandbox)
    logger.warn('--unsafe-no-sandbox: agents and verifiers run on this machine WITHOUT isolation');
  else {
    const check = checkSandbox();
    if (!check.ok)
      throw new Error(
        `the sandbox is unavailable (${check.reason}); install bubblewrap, or pass --unsafe-no-sandbox`,
      );
  }
  const queue = await RolloutQueue.open({
    url: pg,
    schema: opts.queueSchema,
    maxConnections: opts.concurrency + 4,
    onError: (error) => logger.error({ err: error }, 'rollout queue error'),
  });
  const worker = startRolloutWorker({
    queue,
    concurrency: opts.concurrency,
    gatewayUrl: opts.gateway?.replace(/\/+$/, ''),
    apiKey: opts.apiKey,
    judgeApiKey: opts.judgeApiKey,
    workDir: resolve(opts.workDir),
    keepWorkspaces: opts.keepWorkspaces,
    toolsDir: opts.toolsDir,
    unsafeNoSandbox: opts.unsafeNoSandbox,
    pollMs: opts.pollMs,
    onEvent: (event) => logEvent(logger, event),
  });
  logger.info(
    {
      worker: worker.name,
      schema: queue.schema,
      concurrency: opts.concurrency,
      gateway: opts.gateway ?? null,
    },
    'stepwise rollout worker ready',
  );
  await new Promise<void>((done) => {
    let stopping = false;
    const stop = (signal: string) => {
      // A second signal does not wait: the running samples' jobs go to other workers after their lease.
      if (stopping) process.exit(130);
      stopping = true;
      logger.info({ signal }, 'stopping: finishing the running samples (signal again to quit now)');
      void worker
        .stop()
        .then(() => queue.close())
        .then(() => {
          logger.info(worker.stats, 'stepwise rollout worker stopped');
          done();
        });
    };
    process.on('SIGINT', () => stop('SIGINT'));
    process.on('SIGTERM', () => stop('SIGTERM'));
  });
  process.exit(0);
}

function logEvent(logger: ReturnType<typeof createLogger>, event: RolloutWorkerEvent): void {
  switch (event.kind) {
    case 'started':
      logger.info(
        { job: event.jobId, sample: event.key, attempt: event.attempt, trajectory: event.trajectoryUid },
        'rollout started',
      );
      return;
    case 'finished':
      logger.info(
        {
          job: event.jobId,
          sample: event.key,
          attempt: event.attempt,
          status: event.result.status,
          score: event.result.score,
          trajectory: event.result.trajectoryUid,
          ownResult: event.ownResult,
          completed: event.completed,
        },
        'rollout finished',
      );
      return;
    case 'replayed':
      logger.info(
        {
          job: event.jobId,
          sample: event.key,
          attempt: event.attempt,
          trajectory: event.result.trajectoryUid,
        },
        'rollout result replayed from an earlier attempt',
      );
      return;
    case 'retrying':
      logger.warn(
        { job: event.jobId, sample: event.key, attempt: event.attempt, reason: event.reason },
        'rollout attempt failed; the job goes back to the queue',
      );
      return;
    case 'superseded':
      logger.warn(
        { job: event.jobId, sample: event.key, attempt: event.attempt },
        'rollout attempt outlived its lease and was taken over by a retry; its work is dropped',
      );
      return;
    case 'error':
      logger.error({ job: event.jobId, message: event.message }, 'rollout worker error');
  }
}

// ---- worker rewards ----------------------------------------------------------------------------

/*
 * Runs reward jobs from a PostgreSQL store's job queue, on any machine. Servers given `--rewards FILE
 * --reward-workers 0` queue the jobs; any number of these run them (claims use SKIP LOCKED: no job
 * runs twice at once, a dead worker's job is claimed again after its lease). Each also follows the
 * event log and queues jobs, so it works without such servers too.
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

function registerRewardWorkerCommand(worker: Command): Command {
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
      const config = await loadRewardsConfig(opts.rewards, rewardPlugins());
      const store = await openStore({ kind: 'postgres', url, schema: opts.pgSchema });
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
