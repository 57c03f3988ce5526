import { type Command, InvalidArgumentError } from 'commander';
import { DEFAULT_ADAM_EPS, DEFAULT_CLIP, DEFAULT_GROUPS, runTrain } from '../train/loop.js';

/** `stepwise train`: the RL loop on this machine (docs/trainers.md, "stepwise train"). */
export function registerTrainCommand(program: Command): void {
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
    if (!values.includes(value))
      throw new InvalidArgumentError(`${flag} must be one of ${values.join(', ')}`);
    return value;
  };
  program
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
    .option('--lr <lr>', 'learning rate of the RL updates', positive('--lr'), 2e-3)
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
    .option('--port <port>', 'port of the gateway (0: any free port)', int('--port', 0), 0)
    .action(train);
}

/** Runs the loop the options describe, and says where its curve is. */
// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
async function train(opts: any): Promise<void> {
  const result = await runTrain({
    out: opts.out,
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
    update: opts.update,
    port: opts.port,
    print: (line) => console.log(line),
  });
  const first = result.rewardByVersion[0];
  const last = result.rewardByVersion.at(-1);
  console.log(
    `train done: mean reward ${first?.meanReward.toFixed(2)} at version ${first?.version} -> ${last?.meanReward.toFixed(2)} at version ${last?.version}; curve in ${result.out}/reward.html`,
  );
}
