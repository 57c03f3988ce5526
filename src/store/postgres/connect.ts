import { Kysely, Migrator, PostgresDialect } from 'kysely';
import pg from 'pg';
import { postgresMigrations } from './migrations.js';

/** A schema name used as is in SQL (search_path, CREATE SCHEMA): plain lower-case only. */
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

/** int8 and numeric as JS numbers: every count, key and time Stepwise stores is far below 2^53. */
export const pgTypes = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === 20 || oid === 1700) return (value: string) => Number(value);
    return pg.types.getTypeParser(oid, format);
  },
};

/** The URL without its password, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '<unparsable url>';
  }
}

export interface PostgresDatabaseOptions {
  url: string;
  /** Schema of the tables (created when missing); default `public`. */
  schema?: string;
  poolSize: number;
  /** Names what is opened in error messages ("the store", "the reward job queue"). */
  what: string;
}

/**
 * A connection pool on a schema of a PostgreSQL database, migrated to the latest schema version
 * (the store's migrations: its tables and the reward queue's). Any number of processes may open the
 * same schema at once.
 */
export async function openPostgresDatabase<DB>(
  options: PostgresDatabaseOptions,
): Promise<{ pool: pg.Pool; kysely: Kysely<DB>; schema: string }> {
  const schema = options.schema ?? 'public';
  if (!SCHEMA_NAME.test(schema))
    throw new Error(`schema: '${schema}' is not a plain lower-case SQL name (letters, digits, _)`);
  const pool = new pg.Pool({
    connectionString: options.url,
    max: options.poolSize,
    options: `-c search_path=${schema}`,
    types: pgTypes,
  });
  // A pool client that errors while idle (the server went away) must not crash the process.
  pool.on('error', () => {});
  try {
    if (schema !== 'public') {
      // Processes starting together race to create it: the losers find it made.
      await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch((error: { code?: string }) => {
        if (error.code !== '23505' && error.code !== '42P06') throw error;
      });
    }
  } catch (error) {
    await pool.end();
    throw new Error(`cannot reach PostgreSQL at ${redactUrl(options.url)}: ${(error as Error).message}`);
  }
  const kysely = new Kysely<DB>({ dialect: new PostgresDialect({ pool }) });
  const migrator = new Migrator({ db: kysely, provider: postgresMigrations, migrationTableSchema: schema });
  // Before migrating, the migrator reads every schema's tables and creates its own lock tables; a
  // schema dropped meanwhile by someone else, or another process creating those tables at the same
  // moment, fails that step. Applied migrations are recorded, so running it again is safe.
  for (let attempt = 1; ; attempt++) {
    const { error, results } = await migrator.migrateToLatest();
    const failed = results?.find((r) => r.status === 'Error');
    if (!error && !failed) break;
    if (attempt < 5 && !failed) {
      await new Promise((r) => setTimeout(r, 50 * attempt));
      continue;
    }
    await kysely.destroy();
    throw new Error(
      `migrating ${options.what} at ${redactUrl(options.url)} (schema ${schema}) failed at ${failed?.migrationName ?? '?'}: ${String(error)}`,
    );
  }
  return { pool, kysely, schema };
}
