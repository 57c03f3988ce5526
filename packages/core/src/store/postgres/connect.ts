import { Kysely, Migrator, PostgresDialect } from 'kysely';
import pg from 'pg';
import { StepwiseError, ValidationError } from '../../domain/index.js';
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

/** How a process's connections to a schema show in pg_stat_activity: `stepwise:<schema>`. */
export function applicationName(schema: string): string {
  return `stepwise:${schema}`;
}

export interface PostgresDatabaseOptions {
  url: string;
  /** Schema of the tables (created when missing); default `public`. */
  schema?: string;
  poolSize: number;
  /** Names what is opened in error messages ("the store", "the reward job queue"). */
  what: string;
  /**
   * The schema must already hold a store (a command that reads one): a mistyped `--pg-schema` is
   * refused, naming the schemas that do, instead of being created empty.
   */
  existing?: boolean;
}

/** Refuses a schema without a store's tables, naming the schemas of this database that have them. */
async function checkExisting(pool: pg.Pool, schema: string, url: string): Promise<void> {
  // A store's schema holds its steps and the migrator's record of them (a foreign `steps` does not count).
  const { rows } = await pool.query<{ table_schema: string }>(
    `SELECT table_schema FROM information_schema.tables WHERE table_name IN ('steps', 'kysely_migration')
     GROUP BY table_schema HAVING count(*) = 2 ORDER BY table_schema`,
  );
  const stores = rows.map((r) => r.table_schema);
  if (stores.includes(schema)) return;
  throw new ValidationError(
    `--pg-schema: the schema ${schema} of ${redactUrl(url)} holds no Stepwise store (${
      stores.length > 0 ? `schemas that do: ${stores.join(', ')}` : 'none of its schemas does'
    })`,
    'pg-schema',
  );
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
    // Names this store's connections in pg_stat_activity (a URL's application_name wins).
    fallback_application_name: applicationName(schema),
    types: pgTypes,
  });
  // A pool client that errors while idle (the server went away) must not crash the process.
  pool.on('error', () => {});
  // Nor one that errors while checked out (its backend terminated mid-transaction): pg emits that
  // as an 'error' event nobody listens to then. Its queries fail (a 503, see unavailable) and the
  // pool discards it on release, as it is no longer queryable.
  pool.on('connect', (client) => client.on('error', () => {}));
  try {
    if (options.existing) await checkExisting(pool, schema, options.url);
    if (schema !== 'public') {
      // Processes starting together race to create it: the losers find it made.
      await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`).catch((error: { code?: string }) => {
        if (error.code !== '23505' && error.code !== '42P06') throw error;
      });
    }
  } catch (error) {
    await pool.end();
    if (error instanceof ValidationError) throw error;
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

/**
 * Errors after which a whole transaction runs again: it lost a race (serialization failure,
 * deadlock, a row another process inserted first) and wrote nothing.
 */
const RETRYABLE = new Set(['40001', '40P01', '23505']);
const MAX_ATTEMPTS = 12;
/** Attempts of a transaction whose connection was lost before its COMMIT went out. */
const LOST_ATTEMPTS = 3;

/**
 * The database is out of reach (down, restarting, the connection cut): a 503 the caller may retry.
 * A commit cut off this way may or may not have applied; callers' writes are safe to send again.
 */
export function unavailable(error: unknown): unknown {
  if (error instanceof StepwiseError) return error;
  const code = (error as { code?: string }).code ?? '';
  const message = (error as Error).message ?? String(error);
  const lost =
    ['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'ENOTFOUND', 'EAI_AGAIN'].includes(code) ||
    code.startsWith('08') || // connection exceptions
    code.startsWith('57P') || // the server is shutting down or restarting
    /Connection terminated|connection timeout|Client has encountered a connection error/i.test(message);
  return lost
    ? new StepwiseError(`database unavailable: ${message}`, 503, 'unavailable', undefined, true)
    : error;
}

/**
 * Runs `body` in one transaction on a pooled connection and commits it. A transaction that lost a
 * race runs again from the start (up to 12 times; not for read-only `begin`s), and so does one whose
 * connection was lost before its COMMIT went out (up to 3 times: it wrote nothing); a lost database
 * becomes a 503. `check` runs before each attempt (e.g. to refuse once closed).
 */
export async function inTransaction<T>(
  pool: pg.Pool,
  body: (client: pg.PoolClient) => Promise<T>,
  options: { begin?: string; retry?: boolean; check?: () => void } = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    options.check?.();
    const client = await pool.connect().catch((error) => {
      throw unavailable(error);
    });
    let committing = false;
    try {
      await client.query(options.begin ?? 'BEGIN');
      const value = await body(client);
      committing = true;
      await client.query('COMMIT');
      client.release();
      return value;
    } catch (error) {
      let broken = false;
      await client.query('ROLLBACK').catch(() => {
        broken = true;
      });
      client.release(broken);
      const code = (error as { code?: string }).code;
      if (options.retry !== false && code && RETRYABLE.has(code) && attempt < MAX_ATTEMPTS) {
        await new Promise((r) => setTimeout(r, Math.random() * 5 * attempt));
        continue;
      }
      const failure = unavailable(error);
      // A connection lost before COMMIT went out took its transaction with it (pg refuses to send
      // on a connection it knows is broken: "not queryable"); one lost during COMMIT may have
      // committed, so only the caller may send that again (as a duplicate, if it did).
      const lost = !(error instanceof StepwiseError) && failure instanceof StepwiseError;
      const unsent = !committing || /not queryable/.test((error as Error).message ?? '');
      if (lost && unsent && attempt < LOST_ATTEMPTS) {
        await new Promise((r) => setTimeout(r, 10 * attempt));
        continue;
      }
      throw failure;
    }
  }
}
