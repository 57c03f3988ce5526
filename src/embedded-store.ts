import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { ValidationError } from '@stepwise/core/domain/index.js';
import {
  describeLocation,
  openStore,
  type StoreLocation,
  storeLocation,
} from '@stepwise/core/store/open-store.js';

// The store of a command that starts its own server (`gym run`, `demo`, `train`): `--db`, else a
// SQLite file in its output folder.

/** The store an embedded server opens: `--db`, else `<out>/<fileName>`. */
export const embeddedStoreOf = (
  opts: { db?: string; pgSchema?: string },
  out: string,
  fileName: string,
): StoreLocation => storeLocation(opts.db ?? join(out, fileName), opts.pgSchema);

/** A location as `startServer`'s store options. */
export const serverStore = (
  location: StoreLocation,
): { dbPath: string; pg?: { url: string; schema?: string } } =>
  location.kind === 'sqlite'
    ? { dbPath: location.path }
    : { dbPath: location.url, pg: { url: location.url, schema: location.schema } };

/**
 * A command that starts its own run (`demo`, `train`) reads back what the run made: a store that
 * already holds trajectories would mix another run's into its figures, so it is refused before the
 * run starts. A SQLite file that is not there yet is new; a PostgreSQL schema is looked into.
 */
export async function requireNewStore(location: StoreLocation): Promise<void> {
  if (location.kind === 'sqlite' && !existsSync(location.path)) return;
  const store = await openStore(location);
  try {
    const { items } = await store.listTrajectories({ limit: 1, offset: 0 });
    if (items.length > 0)
      throw new ValidationError(
        `db: ${describeLocation(location)} already holds another run's trajectories; give a new --out, or --db a new SQLite file or an empty PostgreSQL schema (--pg-schema)`,
        'db',
      );
  } finally {
    await store.close();
  }
}
