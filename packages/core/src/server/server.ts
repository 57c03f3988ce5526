import type { IncomingMessage } from 'node:http';
import type { Logger } from 'pino';
import type { ChannelConfig } from '../domain/index.js';
import { createEngineRouter } from '../engines/index.js';
import type { SimServerOptions } from '../engines/sim/serve.js';
import { inCallShape, llmCallListener } from '../gateway/direct.js';
import { Gateway, type GatewayOptions } from '../gateway/gateway.js';
import { isLoopback, parseApiKey } from '../http/auth.js';
import { DEFAULT_RATE_LIMITS, KeyRates, type RateLimits } from '../http/key-rates.js';
import { requestGuard } from '../http/request-guard.js';
import type { PoolOps } from '../pool/core.js';
import { DataPool } from '../pool/data-pool.js';
import { WorkerPool } from '../pool/worker-pool.js';
import type { RewardsConfig } from '../rewards/config.js';
import { RewardService } from '../rewards/service.js';
import { openStore, type StoreLocation, storeLocation } from '../store/open-store.js';
import type { Store } from '../store/store.js';
import { type Listening, listen, type Refusal } from '../util/http-server.js';
import { createApp } from './app.js';
import { callMiddleware } from './call-middleware.js';
import { Telemetry, type TelemetryOptions } from './otel.js';

export interface ServerOptions {
  /** SQLite database file (the default store), or a PostgreSQL URL (store/open-store.ts); ignored with `pg`. */
  dbPath: string;
  /** PostgreSQL instead of SQLite: every process given the same database shares one pool. */
  pg?: { url: string; schema?: string };
  host?: string;
  port?: number;
  /** `KEY:scope,scope` specs; required when binding to anything but loopback. */
  apiKeys?: string[];
  synchronous?: 'FULL' | 'NORMAL';
  channelDefaults?: Partial<ChannelConfig>;
  maxBodyBytes?: number;
  /** Connections open at once (default 4,096). */
  maxConnections?: number;
  /** Request body bytes buffered at once, over all requests (default 256 MiB). */
  maxBodiesInFlightBytes?: number;
  /** Per-key rates, with keys configured (default DEFAULT_RATE_LIMITS; 0 turns one off). */
  rateLimits?: Partial<RateLimits>;
  commitWindowMs?: number;
  /** Where SQLite runs: the event-loop thread (default) or its own worker thread. */
  storeThread?: 'main' | 'worker';
  logger?: Logger;
  /** Inference engines behind the gateway: `sim`, `vllm=URL`, `sglang=URL`, `openai=URL`; none: LLM routes answer 503. */
  engines?: readonly string[];
  /** Settings of the built-in sim engine. */
  sim?: SimServerOptions;
  /** Bearer key sent to `openai` engines. */
  upstreamApiKey?: string;
  upstreamTimeoutMs?: number;
  /** Origin written into base_urls (default: the origin each request came to). */
  publicUrl?: string;
  /** Session and drain tuning of the gateway. */
  gatewayOptions?: Pick<
    GatewayOptions,
    | 'drainTimeoutMs'
    | 'switchTimeoutMs'
    | 'sessionCacheMs'
    | 'sessionIdleMs'
    | 'maxSessions'
    | 'maxSessionsPerKey'
    | 'sessionChannel'
    | 'sessionRecheckMs'
    | 'generateMaxTokens'
    | 'tokenContinuity'
  >;
  /** `gateway`: only the agent routes (a gateway beside a `stepwise serve` sharing the store). */
  role?: 'all' | 'gateway';
  /** Reward functions (docs/rewards.md): jobs run in this process, `/compute_reward` answers. */
  rewards?: RewardsConfig;
  /** Overrides the config's worker count (0: queue reward jobs here, run them elsewhere). */
  rewardWorkers?: number;
  /** Steps and trajectories as OpenTelemetry spans over OTLP/HTTP (docs/telemetry.md); unset: none. */
  telemetry?: TelemetryOptions;
}

export interface RunningServer {
  url: string;
  port: number;
  pool: DataPool;
  gateway: Gateway;
  rewards: RewardService | null;
  telemetry: Telemetry | null;
  close(): Promise<void>;
}

/** The request guard, its refusals of LLM calls in the shape of the call's API (gateway/direct.ts). */
const guardIn =
  (guard: ReturnType<typeof requestGuard>) =>
  (req: IncomingMessage, path: string): Refusal | null => {
    const refused = guard(req, path);
    return refused === null ? null : inCallShape(path, refused);
  };

/** The store the options name (SQLite, on its own thread or not, or PostgreSQL) and its DataPool, started. */
async function openPool(options: ServerOptions): Promise<{ pool: DataPool; pg?: ServerOptions['pg'] }> {
  const location: StoreLocation = options.pg
    ? { kind: 'postgres', ...options.pg }
    : storeLocation(options.dbPath);
  const pg = location.kind === 'postgres' ? { url: location.url, schema: location.schema } : undefined;
  const storeOptions = { synchronous: options.synchronous, channelDefaults: options.channelDefaults };
  const onWorker = options.storeThread === 'worker' && location.kind === 'sqlite';
  const store: Store | PoolOps =
    onWorker && location.kind === 'sqlite'
      ? await WorkerPool.open({ path: location.path, ...storeOptions })
      : await openStore(location, storeOptions);
  const pool = new DataPool({
    store,
    commitWindowMs: options.commitWindowMs,
    // A worker applies batches in order: keep the next one queued there while this one commits.
    // PostgreSQL runs several transactions at once, each on its own connection.
    commitsInFlight: pg ? 4 : onWorker ? 2 : 1,
    logger: options.logger,
  }).start();
  return { pool, pg };
}

/** Opens the store, starts the pool and serves the HTTP API; close() shuts all of it down in order. */
export async function startServer(options: ServerOptions): Promise<RunningServer> {
  const host = options.host ?? '127.0.0.1';
  const apiKeys = (options.apiKeys ?? []).map(parseApiKey);
  if (apiKeys.length === 0 && !isLoopback(host)) {
    throw new Error(
      `refusing to listen on ${host} without API keys: pass --api-key KEY:scopes (or STEPWISE_API_KEYS), or bind to 127.0.0.1`,
    );
  }
  const { pool, pg } = await openPool(options);
  let gateway: Gateway;
  let listening: Listening;
  let rewards: RewardService | null = null;
  let telemetry: Telemetry | null = null;
  try {
    if (options.telemetry)
      telemetry = await new Telemetry({ logger: options.logger, ...options.telemetry }).start(pool);
    if (options.rewards) {
      rewards = (
        await RewardService.open({
          pool,
          config: options.rewards,
          pg,
          concurrency: options.rewardWorkers,
          logger: options.logger,
        })
      ).start();
    }
    const router = createEngineRouter({
      engines: options.engines ?? [],
      sim: options.sim,
      apiKey: options.upstreamApiKey,
      upstreamTimeoutMs: options.upstreamTimeoutMs,
      logger: options.logger,
    });
    await router?.start();
    gateway = new Gateway({
      // Over a database other gateways share, a trajectory's calls may reach any of them: check
      // the stored trajectory before each call.
      ...(pg ? { sessionRecheckMs: 0 } : {}),
      ...options.gatewayOptions,
      middleware: callMiddleware({ tokenContinuity: options.gatewayOptions?.tokenContinuity }),
      pool,
      router,
      logger: options.logger,
      ...(telemetry ? { tracer: telemetry } : {}),
    });
    const app = createApp({
      pool,
      gateway,
      apiKeys,
      logger: options.logger,
      publicUrl: options.publicUrl,
      role: options.role,
      rewards: rewards ?? undefined,
    });
    listening = await listen(app.fetch, host, options.port ?? 8100, {
      maxBodyBytes: options.maxBodyBytes,
      maxConnections: options.maxConnections,
      maxBodiesInFlightBytes: options.maxBodiesInFlightBytes,
      direct: llmCallListener(gateway, apiKeys),
      guard: guardIn(
        requestGuard(host, {
          publicUrl: options.publicUrl,
          keys: apiKeys,
          rates: new KeyRates({ ...DEFAULT_RATE_LIMITS, ...options.rateLimits }),
        }),
      ),
    });
  } catch (error) {
    await rewards?.close();
    await telemetry?.close(0);
    await pool.close(); // e.g. the port is taken: leave no store or timer behind
    throw error;
  }
  return {
    url: listening.url,
    port: listening.port,
    pool,
    gateway,
    rewards,
    telemetry,
    // Captured steps are written and the pool commits queued submissions and releases long-polls
    // before connections close; running reward jobs go back to the queue.
    close: () =>
      listening.close(async () => {
        await gateway.close();
        await rewards?.close();
        await telemetry?.close();
        await pool.close();
      }),
  };
}
