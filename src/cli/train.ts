import { type Command, InvalidArgumentError } from 'commander';
import { COMPARE_TARGET, compareSchedulers } from '../train/compare.js';
import {
  DEFAULT_ADAM_EPS,
  DEFAULT_CLIP,
  DEFAULT_GROUPS,
  DEFAULT_LR,
  DEFAULT_PROMPTS_PER_KIND,
  runTrain,
  type TrainOptions,
} from '../train/loop.js';
import { SCHEDULE_POLICIES } from '../train/schedule.js';
import { addEmbeddedStoreOptions } from './store-options.js';

const int =
  (flag: string, min: number, max = Number.MAX_SAFE_INTEGER) =>
  (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new InvalidArgumentError(
        max === Number.MAX_SAFE_INTEGER
          ? `${flag} must be an integer >= ${min}`
          : `${flag} must be an integer from ${min} to ${max}`,
      );
    return n;
  };
const positive = (flag: string) => (value: string) => {
  const n = Number(value);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`${flag} must be a number > 0`);
  return n;
};
const choice = (flag: string, values: readonly string[]) => (value: string) => {
  if (!values.includes(value)) throw new InvalidArgumentError(`${flag} must be one of ${values.join(', ')}`);
  return value;
};

/** `stepwise train`: the RL loop on this machine (docs/trainers.md, "stepwise train"). */
export function registerTrainCommand(program: Command): void {
  const command = program
    .command('train')
    .description(
      'the RL loop end to end: a gateway, the reference engine (a tiny Qwen3-architecture model), a warm-up on exported reference rollouts, then asynchronous rollouts of copy tasks and policy-gradient updates; writes the reward curve (needs the Python train extra: docs/trainers.md)',
    )
    .option(
      '--out <dir>',
      'stores, SFT export, train.json, reward.html and the final policy go here',
      'train-out',
    )
    .option('--seed <n>', 'seed of the model, the tasks and the sampling', int('--seed', 0), 7)
    .option('--versions <n>', 'policy versions to train (one batch of groups each)', int('--versions', 1), 12)
    .option(
      '--target-reward <r>',
      "stop once a round's mean reward reaches this (0 to 1); the update of that round's batch is the final policy",
      (value: string) => {
        const n = Number(value);
        if (!Number.isFinite(n) || n < 0 || n > 1)
          throw new InvalidArgumentError('--target-reward must be a number from 0 to 1');
        return n;
      },
    )
    .option('--groups <n>', 'copy tasks (groups) per round', int('--groups', 1), DEFAULT_GROUPS)
    .option('--rollouts <n>', 'samples per task: the group size', int('--rollouts', 2), 8)
    .option(
      '--warmup-steps <n>',
      'SFT steps on the exported reference rollouts before RL',
      int('--warmup-steps', 0),
      200,
    )
    .option(
      '--init <dir>',
      "start from this model folder (e.g. an earlier run's OUT/warmup) instead of the tiny preset and a warm-up",
    )
    .option('--warmup-lr <lr>', 'learning rate of the warm-up', positive('--warmup-lr'), 1e-2)
    .option('--lr <lr>', 'learning rate of the RL updates', positive('--lr'), DEFAULT_LR)
    .option(
      '--adam-eps <eps>',
      "AdamW's eps for the RL updates (larger keeps the LM head's rarely-seen ids still)",
      positive('--adam-eps'),
      DEFAULT_ADAM_EPS,
    )
    .option('--clip <eps>', 'PPO clip range of the RL loss', positive('--clip'), DEFAULT_CLIP)
    .option('--epochs <n>', 'optimizer steps per leased batch', int('--epochs', 1), 2)
    .option(
      '--max-staleness <n>',
      'policy versions a served group may lag (rollouts run ahead by this much)',
      int('--max-staleness', 0),
      1,
    )
    .option('--concurrency <n>', 'samples run at once', int('--concurrency', 1), 2)
    .option(
      '--async <mode>',
      'fully asynchronous: rollouts never wait for a version (admission control bounds their lead) and each update switches the engines in flight, cutting running generations (abort, continued as partial rollouts) or freezing them (keep)',
      choice('--async', ['abort', 'keep']),
    )
    .option('--no-update', 'the control run: the same loop without optimizer steps')
    .option('--port <port>', 'port of the gateway (0: any free port)', int('--port', 0), 0);
  addEmbeddedStoreOptions(withScheduleOptions(command), 'train.db').action(train);
}

/** The options of the prompt scheduler, the mixed task set and the schedulers' comparison. */
function withScheduleOptions(command: Command): Command {
  return command
    .option(
      '--schedule <policy>',
      "take each round's groups from the pool's prompt scheduler under this policy, over a task set registered once (default: rounds walk their list)",
      choice('--schedule', SCHEDULE_POLICIES),
    )
    .option(
      '--tasks <set>',
      'copy: the copy task; mixed: always-solved, learnable (copy) and never-solved tasks, --target-reward read on the learnable ones',
      choice('--tasks', ['copy', 'mixed']),
      'copy',
    )
    .option(
      '--prompts-per-kind <n>',
      'tasks of each kind in the registered set (--schedule, --tasks mixed)',
      int('--prompts-per-kind', 1),
      DEFAULT_PROMPTS_PER_KIND,
    )
    .option(
      '--zero-variance <policy>',
      'keep, or drop the groups whose rewards are all equal at lease time (no GRPO signal)',
      choice('--zero-variance', ['keep', 'drop']),
      'keep',
    )
    .option(
      '--max-rollouts <n>',
      'stop once the training rounds have generated this many rollouts',
      int('--max-rollouts', 1),
    )
    .option(
      '--compare-schedulers',
      `run the loop on the mixed set with zero-variance drops twice from one warm-up, in_order then difficulty, and report the rollouts each spent to reach --target-reward (default ${COMPARE_TARGET}) on the learnable prompts (OUT/compare.json)`,
    );
}

/** Runs the loop the options describe (or the schedulers' comparison), and says where its results are. */
// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
async function train(opts: any): Promise<void> {
  const options = trainOptions(opts);
  if (opts.compareSchedulers) {
    await compareSchedulers(options);
    console.log(`train done: the comparison is in ${options.out}/compare.json`);
    return;
  }
  const result = await runTrain(options);
  const first = result.rewardByVersion[0];
  const last = result.rewardByVersion.at(-1);
  console.log(
    `train done: mean reward ${first?.meanReward.toFixed(2)} at version ${first?.version} -> ${last?.meanReward.toFixed(2)} at version ${last?.version}; curve in ${result.out}/reward.html`,
  );
}

// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
function trainOptions(opts: any): TrainOptions {
  return {
    out: opts.out,
    ...(opts.db !== undefined ? { db: opts.db, pgSchema: opts.pgSchema } : {}),
    seed: opts.seed,
    versions: opts.versions,
    targetReward: opts.targetReward,
    groups: opts.groups,
    rollouts: opts.rollouts,
    warmupSteps: opts.warmupSteps,
    warmupLr: opts.warmupLr,
    init: opts.init,
    lr: opts.lr,
    adamEps: opts.adamEps,
    clip: opts.clip,
    epochs: opts.epochs,
    maxStaleness: opts.maxStaleness,
    concurrency: opts.concurrency,
    ...(opts.async ? { async: opts.async } : {}),
    ...(opts.schedule ? { schedule: opts.schedule } : {}),
    tasks: opts.tasks,
    promptsPerKind: opts.promptsPerKind,
    zeroVariance: opts.zeroVariance,
    ...(opts.maxRollouts !== undefined ? { maxRollouts: opts.maxRollouts } : {}),
    update: opts.update,
    port: opts.port,
    print: (line) => console.log(line),
  };
}
