import { readFileSync } from 'node:fs';
import { startSimServer } from '@stepwise/core/engines/sim/serve.js';
import { DEFAULT_RATE_LIMITS } from '@stepwise/core/http/key-rates.js';
import { loadRewardsConfig } from '@stepwise/core/rewards/config.js';
import { otlpEndpointFromEnv, tracesUrl } from '@stepwise/core/server/otel.js';
import { startServer } from '@stepwise/core/server/server.js';
import { type StoreLocation, storeLocation } from '@stepwise/core/store/open-store.js';
import { redactUrl } from '@stepwise/core/store/postgres/postgres-store.js';
import { DEFAULT_MAX_CONNECTIONS } from '@stepwise/core/util/http-server.js';
import { createLogger } from '@stepwise/core/util/logger.js';
import { loadTasks, referenceTasks, TASK_SET_HELP } from '@stepwise/gym/tasks/index.js';
import { Command, InvalidArgumentError, Option } from 'commander';
import { registerBenchCommand } from './bench.js';
import { registerCodexCommand } from './codex.js';
import { runDemo } from './demo.js';
import { registerExportCommands } from './export.js';
import { errorKinds } from './flags.js';
import { registerGymCommands } from './gym.js';
import { registerOpenClawCommand } from './openclaw.js';
import { registerPurifyCommand } from './purify.js';
import { rewardPlugins } from './reward-plugins.js';
import { registerRewardsCommands } from './rewards.js';
import { addEmbeddedStoreOptions, addStoreOptions } from './store-options.js';
import { registerToolsCommand } from './tools.js';
import { registerTrainCommand } from './train.js';
import { registerWorkerCommands } from './worker.js';

function int(name: string, min = 0) {
  return (value: string) => {
    const n = Number(value);
    if (!Number.isInteger(n) || n < min)
      throw new InvalidArgumentError(`${name} must be an integer >= ${min}`);
    return n;
  };
}

function rate(value: string): number {
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0 || n > 1) throw new InvalidArgumentError('must be a number from 0 to 1');
  return n;
}

const collect = (value: string, previous: string[]) => previous.concat(value);

function httpUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(tracesUrl(value));
  } catch {
    throw new InvalidArgumentError('must be an http:// or https:// URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:')
    throw new InvalidArgumentError('must be an http:// or https:// URL');
  return value;
}

export function buildCli(): Command {
  const program = new Command('stepwise')
    .description('Stepwise: the data layer of agentic RL (gateway + step-level DataPool)')
    .showHelpAfterError('(run with --help for usage)');

  const serve = program
    .command('serve')
    .description('serve the gateway and the DataPool HTTP API (one port) over SQLite or PostgreSQL')
    .option('--port <port>', 'port to listen on', int('--port'), 8100);
  const gateway = program
    .command('gateway')
    .description('serve only the gateway (agent routes) over a store shared with a `stepwise serve`')
    .option('--port <port>', 'port to listen on', int('--port'), 8101);
  for (const command of [serve, gateway]) addServerOptions(command, command === gateway ? 'gateway' : 'all');

  registerSimCommand(program);
  registerDemoCommand(program);
  registerExportCommands(program);
  registerGymCommands(program);
  registerBenchCommand(program);
  registerToolsCommand(program);
  registerOpenClawCommand(program);
  registerCodexCommand(program);
  registerPurifyCommand(program);
  registerRewardsCommands(program);
  registerWorkerCommands(program);
  registerTrainCommand(program);

  return program;
}

/** `stepwise sim`: the built-in sim engine on its own. */
function registerSimCommand(program: Command): void {
  program
    .command('sim')
    .description('serve the built-in sim engine (vLLM OpenAI-compatible API, named sim-*) standalone')
    .option('--host <host>', 'address to bind', '127.0.0.1')
    .option('--port <port>', 'port to listen on', int('--port'), 8200)
    .addOption(
      new Option('--policy <name>', 'what the sim says (scripted needs --script, reference needs --tasks)')
        .choices(['echo', 'random', 'scripted', 'reference'])
        .default('echo'),
    )
    .option('--script <file>', 'JSON list of script steps for --policy scripted')
    .option('--tasks <path>', `${TASK_SET_HELP}, whose reference actions --policy reference follows`)
    .option(
      '--error-rate <p>',
      'scripted/reference: chance of a wrong tool call before the right one',
      rate,
      0,
    )
    .option(
      '--error-kinds <list>',
      'reference: kinds of wrong call, from wrong_argument,unknown_tool (default both; one pins them)',
      errorKinds,
    )
    .option('--give-up-rate <p>', 'reference: chance an episode stops part way', rate, 0)
    .option('--seed <n>', 'engine seed (requests without a seed derive theirs from it)', int('--seed'), 0)
    .option('--ttft-ms <ms>', 'simulated time to first token', int('--ttft-ms'), 0)
    .option('--tokens-per-second <n>', 'simulated decode speed (0: instant)', int('--tokens-per-second'), 0)
    .option('--model <name>', 'served model name (must contain "sim")', 'sim-qwen3')
    .action(async (opts) => {
      if (opts.policy === 'scripted' && !opts.script)
        throw new Error('--policy scripted needs --script FILE');
      if (opts.policy === 'reference' && !opts.tasks)
        throw new Error('--policy reference needs --tasks PATH');
      const server = await startSimServer({
        host: opts.host,
        port: opts.port,
        policy: opts.policy,
        script: opts.script ? JSON.parse(readFileSync(opts.script, 'utf8')) : undefined,
        tasks: opts.tasks ? referenceTasks(await loadTasks(opts.tasks)) : undefined,
        errorRate: opts.errorRate,
        errorKinds: opts.errorKinds,
        giveUpRate: opts.giveUpRate,
        seed: opts.seed,
        ttftMs: opts.ttftMs,
        tokensPerSecond: opts.tokensPerSecond,
        model: opts.model,
      });
      console.log(`stepwise sim serving ${server.model} at ${server.url}/v1`);
      const stop = async () => {
        await server.close();
        process.exit(0);
      };
      process.once('SIGINT', () => void stop());
      process.once('SIGTERM', () => void stop());
    });
}

/** `stepwise demo`: the README's main job. */
function registerDemoCommand(program: Command): void {
  const demo = program.command('demo');
  addEmbeddedStoreOptions(demo, 'stepwise.db');
  demo
    .description(
      'the main job: synthesize tasks, run the built-in agent on them through the gateway (sim engine), verify, lease with GRPO advantages, export SFT data',
    )
    .option('--out <dir>', 'keep the store, run state and SFT export here (default: a temporary directory)')
    .option('--port <port>', 'port to listen on (0: any free port)', int('--port'), 0)
    .option('--tasks <n>', 'synthesized tasks (one prompt group each)', int('--tasks', 1), 6)
    .option('--rollouts <n>', 'samples per task', int('--rollouts', 1), 4)
    .option('--concurrency <n>', 'samples run at once', int('--concurrency', 1), 4)
    .option('--error-rate <p>', 'chance the sim makes a wrong tool call first, then corrects it', rate, 0.3)
    .option('--give-up-rate <p>', 'chance an episode stops part way (a failed rollout)', rate, 0.3)
    .option('--batch-size <n>', 'groups per leased batch', int('--batch-size', 1), 2)
    .option('--seed <n>', 'random seed', int('--seed'), 7)
    .action(async (opts) => {
      const result = await runDemo({ ...opts, print: (line: string) => console.log(line) });
      console.log(
        `demo done: ${result.samples} samples (mean score ${result.meanScore.toFixed(2)}), ${result.consumedGroups} groups / ${result.consumedSteps} steps trained on, ${result.toolErrors} tool errors recorded, ${result.sftLines} SFT conversations`,
      );
    });
}

function addServerOptions(command: Command, role: 'all' | 'gateway'): void {
  for (const add of [
    addListenOptions,
    addGatewayOptions,
    addSimOptions,
    addPoolOptions,
    addLimitOptions,
    addServiceOptions,
  ])
    add(command);
  command.action((opts) => serve(opts, role));
}

/** Options of `serve` and `gateway`: store and listening: where the pool keeps its data, the address and the keys. */
function addListenOptions(command: Command): Command {
  return addStoreOptions(command)
    .option(
      '--pg <url>',
      'PostgreSQL instead of SQLite, as a PostgreSQL --db (default: $STEPWISE_PG_URL); processes given one database share the pool',
    )
    .option('--host <host>', 'address to bind (non-loopback requires API keys)', '127.0.0.1')
    .option('--api-key <key:scopes>', 'API key with scopes agent,trainer,admin (repeatable)', collect, []);
}

/** Options of `serve` and `gateway`: the gateway: engines, upstream limits, online sessions. */
function addGatewayOptions(command: Command): Command {
  return command
    .option(
      '--engine <spec>',
      'inference engine: sim (built in), vllm=http://host:8000, sglang=http://host:30000 or openai=https://host/v1 (repeatable)',
      collect,
      [],
    )
    .option(
      '--upstream-timeout-ms <ms>',
      'longest wait for an engine to start answering, and between its chunks',
      int('--upstream-timeout-ms', 1),
      600_000,
    )
    .option('--public-url <url>', 'origin written into base_urls (default: the one each request came to)')
    .option(
      '--generate-max-tokens <n>',
      "max_tokens of a POST /generate that sets none (Claw-R1's response_length); default: the rest of the engine's context",
      int('--generate-max-tokens', 1),
    )
    .option(
      '--token-continuity',
      "chat calls that continue a trajectory go to vLLM/sim as the previous prompt + response ids + the new turns' ids (/v1/completions), so prompts never break their prefix (docs/gateway.md#token-continuity)",
    )
    .option(
      '--session-idle-ms <ms>',
      'an online session (X-Stepwise-Session) with no call for this long is completed; its next call opens a new trajectory',
      int('--session-idle-ms', 1),
      1_800_000,
    )
    .option(
      '--max-sessions <n>',
      "online sessions kept open at once (past it a key's least recently used idle one is completed; never another key's)",
      int('--max-sessions', 1),
      10_000,
    )
    .option(
      '--max-sessions-per-key <n>',
      'online sessions one API key may hold open (past it its own least recently used idle one is completed)',
      int('--max-sessions-per-key', 1),
      1_000,
    )
    .option(
      '--session-channel <name>',
      "the channel of online sessions' trajectories; an agent's key may name another (X-Stepwise-Channel) only where that channel sets trust_agent_reward",
      'online',
    );
}

/** Options of `serve` and `gateway`: the built-in sim engine. */
function addSimOptions(command: Command): Command {
  return command
    .addOption(
      new Option('--sim-policy <name>', 'what the built-in sim says')
        .choices(['echo', 'random', 'scripted', 'reference'])
        .default('echo'),
    )
    .option('--sim-script <file>', 'JSON script for --sim-policy scripted')
    .option('--sim-tasks <path>', `${TASK_SET_HELP}, whose reference actions --sim-policy reference follows`)
    .option(
      '--sim-error-rate <p>',
      'scripted/reference: chance of a wrong tool call before the right one',
      rate,
      0,
    )
    .option(
      '--sim-error-kinds <list>',
      'reference: kinds of wrong call, from wrong_argument,unknown_tool (default both; one pins them)',
      errorKinds,
    )
    .option('--sim-give-up-rate <p>', 'reference: chance an episode stops part way', rate, 0)
    .option('--sim-seed <n>', 'seed of the built-in sim', int('--sim-seed'), 0)
    .option('--sim-ttft-ms <ms>', 'simulated time to first token', int('--sim-ttft-ms'), 0)
    .option(
      '--sim-tokens-per-second <n>',
      'simulated decode speed (0: instant)',
      int('--sim-tokens-per-second'),
      0,
    );
}

/** Options of `serve` and `gateway`: SQLite durability and the defaults of new channels. */
function addPoolOptions(command: Command): Command {
  return command
    .addOption(
      new Option(
        '--sync <mode>',
        'SQLite durability: full acknowledges a commit once it is flushed to disk (survives power loss), normal once written (survives a crash)',
      )
        .choices(['full', 'normal'])
        .default('full'),
    )
    .option('--n-rollouts <n>', 'default group size for new channels', int('--n-rollouts', 1))
    .option(
      '--max-queue-size <n>',
      'default cap on ready groups per channel (oldest dropped)',
      int('--max-queue-size', 1),
    )
    .option(
      '--max-staleness <n>',
      'default max policy versions a served group may lag',
      int('--max-staleness'),
    )
    .addOption(new Option('--stale-policy <p>', 'what to do with stale groups').choices(['drop', 'flag']))
    .option(
      '--group-timeout-ms <ms>',
      'default time a group may stay incomplete',
      int('--group-timeout-ms', 1),
    )
    .addOption(
      new Option('--incomplete-policy <p>', 'what to do with timed-out groups').choices([
        'drop',
        'serve_partial',
      ]),
    );
}

/** Options of `serve` and `gateway`: bounds on request work: bodies, connections, rates. */
function addLimitOptions(command: Command): Command {
  return command
    .option('--max-body-mb <mb>', 'largest request body accepted', int('--max-body-mb', 1), 64)
    .option(
      '--max-bodies-in-flight-mb <mb>',
      'request bodies buffered at once, over all requests; past it a 503 (retry), the body unread',
      int('--max-bodies-in-flight-mb', 1),
      256,
    )
    .option(
      '--max-connections <n>',
      'connections open at once; past it a new one is closed',
      int('--max-connections', 1),
      DEFAULT_MAX_CONNECTIONS,
    )
    .option(
      '--rate-limit <n>',
      'requests per second per API key, LLM calls included (a burst of 10 s worth; 0: unlimited; no keys: none)',
      int('--rate-limit'),
      DEFAULT_RATE_LIMITS.requestsPerSecond,
    )
    .option(
      '--trajectory-rate-limit <n>',
      'trajectories opened (POST /init_trajectory) per second per API key (a burst of 10 s worth; 0: unlimited)',
      int('--trajectory-rate-limit'),
      DEFAULT_RATE_LIMITS.trajectoriesPerSecond,
    );
}

/** Options of `serve` and `gateway`: the services beside the pool: rewards, the store's thread, telemetry. */
function addServiceOptions(command: Command): Command {
  return command
    .option('--rewards <file>', 'reward functions, combinations and workers (JSON; docs/rewards.md)')
    .option(
      '--reward-workers <n>',
      'reward jobs run at once in this process (default: the config; 0: queue only)',
      int('--reward-workers'),
    )
    .addOption(
      new Option(
        '--store-thread <where>',
        "run SQLite on its own worker thread (default: storing a big batch never holds the event loop) or on the event loop's",
      )
        .choices(['main', 'worker'])
        .default('worker'),
    )
    .option(
      '--otlp-endpoint <url>',
      'send steps and trajectories as OpenTelemetry GenAI spans to this OTLP/HTTP collector (http://host:4318; default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or $OTEL_EXPORTER_OTLP_ENDPOINT, none if unset)',
      httpUrl,
    )
    .option(
      '--otlp-content',
      'put prompts and answers on the spans too (gen_ai.input/output.messages)',
      false,
    );
}

/** `serve` and `gateway`: starts the server the options describe, until SIGINT or SIGTERM. */
// biome-ignore lint/suspicious/noExplicitAny: commander's parsed options, typed by the declarations above.
async function serve(opts: any, role: 'all' | 'gateway'): Promise<void> {
  if (opts.simPolicy === 'scripted' && !opts.simScript)
    throw new InvalidArgumentError('--sim-policy scripted needs --sim-script FILE');
  if (opts.simPolicy === 'reference' && !opts.simTasks)
    throw new InvalidArgumentError('--sim-policy reference needs --sim-tasks PATH');
  const logger = createLogger();
  // Read here, not as the option's default: --help must not print a password.
  const pgUrl: string | undefined = opts.pg ?? (process.env.STEPWISE_PG_URL || undefined);
  const location: StoreLocation = pgUrl
    ? { kind: 'postgres', url: pgUrl, schema: opts.pgSchema }
    : storeLocation(opts.db, opts.pgSchema);
  const envKeys = (process.env.STEPWISE_API_KEYS ?? '').split(/\s+/).filter(Boolean);
  const channelDefaults = Object.fromEntries(
    Object.entries({
      n_rollouts: opts.nRollouts,
      max_queue_size: opts.maxQueueSize,
      max_staleness: opts.maxStaleness,
      stale_policy: opts.stalePolicy,
      group_timeout_ms: opts.groupTimeoutMs,
      incomplete_policy: opts.incompletePolicy,
    }).filter(([, v]) => v !== undefined),
  );
  const server = await startServer({
    dbPath: opts.db,
    pg: location.kind === 'postgres' ? { url: location.url, schema: location.schema } : undefined,
    host: opts.host,
    port: opts.port,
    apiKeys: [...opts.apiKey, ...envKeys],
    synchronous: opts.sync === 'normal' ? 'NORMAL' : 'FULL',
    channelDefaults,
    maxBodyBytes: opts.maxBodyMb * 1024 * 1024,
    maxBodiesInFlightBytes: opts.maxBodiesInFlightMb * 1024 * 1024,
    maxConnections: opts.maxConnections,
    rateLimits: {
      requestsPerSecond: opts.rateLimit,
      requestBurst: opts.rateLimit * 10,
      trajectoriesPerSecond: opts.trajectoryRateLimit,
      trajectoryBurst: opts.trajectoryRateLimit * 10,
    },
    storeThread: opts.storeThread,
    logger,
    role,
    engines: opts.engine,
    sim: {
      policy: opts.simPolicy,
      script: opts.simScript ? JSON.parse(readFileSync(opts.simScript, 'utf8')) : undefined,
      tasks: opts.simTasks ? referenceTasks(await loadTasks(opts.simTasks)) : undefined,
      errorRate: opts.simErrorRate,
      errorKinds: opts.simErrorKinds,
      giveUpRate: opts.simGiveUpRate,
      seed: opts.simSeed,
      ttftMs: opts.simTtftMs,
      tokensPerSecond: opts.simTokensPerSecond,
    },
    upstreamApiKey: process.env.STEPWISE_UPSTREAM_API_KEY,
    upstreamTimeoutMs: opts.upstreamTimeoutMs,
    publicUrl: opts.publicUrl,
    gatewayOptions: {
      sessionIdleMs: opts.sessionIdleMs,
      maxSessions: opts.maxSessions,
      maxSessionsPerKey: opts.maxSessionsPerKey,
      sessionChannel: opts.sessionChannel,
      generateMaxTokens: opts.generateMaxTokens,
      tokenContinuity: opts.tokenContinuity === true,
    },
    rewards: opts.rewards ? await loadRewardsConfig(opts.rewards, rewardPlugins()) : undefined,
    rewardWorkers: opts.rewardWorkers,
    telemetry:
      opts.otlpEndpoint || otlpEndpointFromEnv()
        ? { endpoint: opts.otlpEndpoint, content: opts.otlpContent }
        : undefined,
  });
  logger.info(
    {
      url: server.url,
      ...(location.kind === 'postgres'
        ? { pg: redactUrl(location.url), schema: location.schema }
        : { db: location.path }),
      role,
      engines: opts.engine,
    },
    role === 'gateway' ? 'stepwise gateway serving' : 'stepwise serving',
  );
  const stop = async (signal: string) => {
    logger.info({ signal }, 'shutting down');
    await server.close();
    process.exit(0);
  };
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));
}

/** Runs the CLI; errors print one line and exit non-zero. */
export async function main(argv: string[] = process.argv): Promise<void> {
  try {
    await buildCli().parseAsync(argv);
  } catch (error) {
    console.error(`stepwise: ${error instanceof Error ? error.message : String(error)}`);
    process.exit(1);
  }
}

if (process.argv[1] && /cli[\\/]main\.(ts|js)$/.test(process.argv[1])) void main();
