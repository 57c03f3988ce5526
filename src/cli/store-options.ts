import { existsSync, statSync } from 'node:fs';
import { ValidationError } from '@stepwise/core/domain/index.js';
import { type StoreLocation, storeLocation } from '@stepwise/core/store/open-store.js';
import { type Command, Option } from 'commander';

// The store a command reads or writes, as `stepwise serve` names it: --db, a SQLite file or a PostgreSQL URL.

const DB_HELP = 'the store: a SQLite database file or a PostgreSQL URL (postgres://user@host:5432/db)';

/** `--db` and `--pg-schema` on a command that opens a store (`serve` and `gateway` create it when missing). */
export function addStoreOptions(command: Command): Command {
  return command
    .addOption(new Option('--db <path|url>', DB_HELP).default(process.env.STEPWISE_DB ?? 'stepwise.db'))
    .addOption(pgSchemaOption());
}

const pgSchemaOption = () =>
  new Option(
    '--pg-schema <name>',
    'with a PostgreSQL store: the schema of its tables (created when missing)',
  ).default(process.env.STEPWISE_PG_SCHEMA ?? 'public');

/**
 * `--db` and `--pg-schema` on a command that starts its own server (`gym run`, `demo`, `train`):
 * without `--db` the store is a SQLite file in the command's output folder, `fileName`.
 */
export function addEmbeddedStoreOptions(command: Command, fileName: string): Command {
  return command
    .addOption(new Option('--db <path|url>', `${DB_HELP} (default: <out>/${fileName})`))
    .addOption(pgSchemaOption());
}

/** Where `--db` and `--pg-schema` point. */
export const storeOf = (opts: { db: string; pgSchema?: string }): StoreLocation =>
  storeLocation(opts.db, opts.pgSchema);

/** The store a command reads: a SQLite file must be there (it is not created); a PostgreSQL schema is made if missing. */
export function existingStoreOf(opts: { db: string; pgSchema?: string }): StoreLocation {
  const location = storeOf(opts);
  if (location.kind === 'sqlite' && !(existsSync(location.path) && statSync(location.path).isFile()))
    throw new ValidationError(`--db: ${opts.db} does not exist`, 'db');
  return location;
}
