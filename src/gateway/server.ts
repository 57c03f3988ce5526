import type { AddressInfo } from 'node:net';
import { serve } from '@hono/node-server';
import type { Logger } from 'pino';
import type { ChannelConfig } from '../domain/index.js';
import { DataPool } from '../pool/data-pool.js';
import { openSqliteStore } from '../store/sqlite/sqlite-store.js';
import { WorkerStore } from '../store/sqlite/worker-store.js';
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
  let server: ReturnType<typeof serve>;
  try {
    server = await new Promise<ReturnType<typeof serve>>((resolve, reject) => {
      const s = serve({ fetch: app.fetch, hostname: host, port: options.port ?? 8100 }, () => resolve(s));
      s.once('error', reject);
    });
  } catch (error) {
    await pool.close(); // e.g. the port is taken: leave no store or timer behind
    throw error;
  }
  const port = (server.address() as AddressInfo).port;
  const shownHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | null = null;
  return {
    url: `http://${shownHost}:${port}`,
    port,
    pool,
    close() {
      closing ??= (async () => {
        const stopped = new Promise<void>((resolve) => server.close(() => resolve()));
        await pool.close(); // commits queued submissions and releases long-polls
        // Answered connections linger as keep-alive: close each as soon as it is idle, and cut
        // whatever is still busy after a grace period.
        const http = server as unknown as { closeIdleConnections(): void; closeAllConnections(): void };
        http.closeIdleConnections();
        const idle = setInterval(() => http.closeIdleConnections(), 25);
        const grace = setTimeout(() => http.closeAllConnections(), 2_000);
        await stopped;
        clearInterval(idle);
        clearTimeout(grace);
      })();
      return closing;
    },
  };
}
