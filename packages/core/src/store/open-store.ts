import type { ChannelConfig } from '../domain/index.js';
import { redactUrl } from './postgres/connect.js';
import { openPostgresStore } from './postgres/postgres-store.js';
import { openSqliteStore } from './sqlite/sqlite-store.js';
import type { Store } from './store.js';

/*
 * Where a store lives, as a person writes it (`--db`): a `postgres://` (or `postgresql://`) URL is
 * PostgreSQL, anything else a SQLite file. The server and every command that opens a store
 * (`stepwise export`, `import`, `purify`) open it here.
 */

export type StoreLocation =
  | { kind: 'sqlite'; path: string }
  | {
      kind: 'postgres';
      url: string;
      /** Schema of the tables (created when missing); default `public`. */
      schema?: string;
    };

const POSTGRES_URL = /^postgres(?:ql)?:\/\//i;

/** A `--db` value (and, for PostgreSQL, the schema) as a location. */
export function storeLocation(target: string, schema?: string): StoreLocation {
  return POSTGRES_URL.test(target)
    ? { kind: 'postgres', url: target, ...(schema !== undefined ? { schema } : {}) }
    : { kind: 'sqlite', path: target };
}

export interface OpenStoreOptions {
  /** SQLite's durability (FULL, the default, fsyncs every commit); PostgreSQL's is the server's. */
  synchronous?: 'FULL' | 'NORMAL';
  /** Channel settings used when a channel is first seen. */
  channelDefaults?: Partial<ChannelConfig>;
  /** Connections of a PostgreSQL store (default 10). */
  poolSize?: number;
  /** A command that reads a store: a PostgreSQL schema without one is refused, not created. */
  existing?: boolean;
}

/** Opens (and migrates) the store at `location`. */
export async function openStore(
  location: StoreLocation | string,
  options: OpenStoreOptions = {},
): Promise<Store> {
  const where = typeof location === 'string' ? storeLocation(location) : location;
  if (where.kind === 'postgres')
    return openPostgresStore({
      url: where.url,
      schema: where.schema,
      channelDefaults: options.channelDefaults,
      ...(options.poolSize !== undefined ? { poolSize: options.poolSize } : {}),
      ...(options.existing ? { existing: true } : {}),
    });
  return openSqliteStore({
    path: where.path,
    synchronous: options.synchronous,
    channelDefaults: options.channelDefaults,
  });
}

/** A location for messages and logs: a SQLite path as is, a PostgreSQL URL without its password. */
export function describeLocation(location: StoreLocation): string {
  if (location.kind === 'sqlite') return location.path;
  const url = redactUrl(location.url);
  return location.schema && location.schema !== 'public' ? `${url} (schema ${location.schema})` : url;
}
