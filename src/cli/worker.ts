import type { Command } from 'commander';
import { registerRolloutWorkerCommand } from '../gym/distributed/cli.js';

/*
 * `stepwise worker ...`: processes that work a PostgreSQL-backed (pg-boss) queue, any number of them
 * on any machines. `rollouts` runs gym samples (docs/distributed.md).
 */

export function registerWorkerCommands(program: Command): Command {
  const worker = program
    .command('worker')
    .description('queue workers over PostgreSQL (pg-boss): rollouts (gym samples)');
  registerRolloutWorkerCommand(worker);
  // `worker rewards` (reward jobs from the queue) registers here, beside `rollouts`.
  return worker;
}
