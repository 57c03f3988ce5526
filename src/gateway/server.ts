import type { Logger } from 'pino';
import type { ChannelConfig } from '../domain/index.js';
import { DataPool } from '../pool/data-pool.js';
import { openSqliteStore } from '../store/sqlite/sqlite-store.js';
import { WorkerStore } from '../store/sqlite/worker-store.js';
import { type Listening, listen } from '../util/http-server.js';
import { createApp } from './app.js';
import { isLoopback, parseApiKey } from './auth.js';

export interface ServerOptions {
  dbPath: string;
  host?: string;
  port?: number;
  /** `KEY:scope,scope` specs; required when binding to anything but loopback. */
  apiKeys?: string[];
  synchronous?: 'FULL' | 'NORMAL';
  channelDefaults?: Partial<ChannelConfig>;
  maxBodyBytes?: number;
  commitWindowMs?: number;
  /** Where SQLite runs: the event-loop thread (default) or its own worker thread. */
  storeThread?: 'main' | 'worker';
  logger?: Logger;
}

export interface RunningServer {
  url: string;
  port: number;
  pool: DataPool;
  close(): Promise<void>;
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
  const storeOptions = {
    path: options.dbPath,
    synchronous: options.synchronous,
    channelDefaults: options.channelDefaults,
  };
  const onWorker = options.storeThread === 'worker';
  const store = onWorker ? await WorkerStore.open(storeOptions) : await openSqliteStore(storeOptions);
  const pool = new DataPool({
    store,
    commitWindowMs: options.commitWindowMs,
    // A worker applies batches in order: keep the next one queued there while this one commits.
    commitsInFlight: onWorker ? 2 : 1,
    logger: options.logger,
  }).start();
  const app = createApp({ pool, apiKeys, maxBodyBytes: options.maxBodyBytes, logger: options.logger });
  let listening: Listening;
  try {
    listening = await listen(app.fetch, host, options.port ?? 8100);
  } catch (error) {
    await pool.close(); // e.g. the port is taken: leave no store or timer behind
    throw error;
  }
  return {
    url: listening.url,
    port: listening.port,
    pool,
    // pool.close() commits queued submissions and releases long-polls before connections close.
    close: () => listening.close(() => pool.close()),
  };
}
