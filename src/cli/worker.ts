import type { Command } from 'commander';
import { registerRolloutWorkerCommand } from '../gym/distributed/cli.js';
import { registerRewardWorkerCommand } from '../rewards/worker-cli.js';

/*
 * `stepwise worker ...`: processes that work a PostgreSQL-backed queue, any number of them on any
 * machines. `rollouts` runs gym samples (pg-boss, docs/distributed.md); `rewards` runs reward jobs of a
 * PostgreSQL store (docs/rewards.md).
 */

export function registerWorkerCommands(program: Command): Command {
  const worker = program
    .command('worker')
    .description('queue workers over PostgreSQL: rollouts (gym samples), rewards (reward jobs)');
  registerRolloutWorkerCommand(worker);
  registerRewardWorkerCommand(worker);
  return worker;
}
