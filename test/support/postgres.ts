import { randomBytes } from 'node:crypto';
import pg from 'pg';
import {
  openPostgresStore,
  type PostgresStore,
} from '../../packages/core/src/store/postgres/postgres-store.js';

/** The PostgreSQL that tests run against (CI sets it); suites skip themselves when it is unset. */
export const pgUrl = process.env.STEPWISE_TEST_PG_URL;

/** A schema name no other test uses: each test gets a database of its own inside the shared one. */
export function freshSchema(prefix = 'stepwise_test'): string {
  return `${prefix}_${randomBytes(6).toString('hex')}`;
}

/** Drops a test schema and everything in it. */
export async function dropSchema(schema: string): Promise<void> {
  if (!pgUrl) return;
  const client = new pg.Client({ connectionString: pgUrl });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  } finally {
    await client.end();
  }
}

/** A Postgres store in a fresh schema, with what closes it and drops the schema. */
export async function openTestPgStore(
  options: { schema?: string; poolSize?: number } = {},
): Promise<{ store: PostgresStore; schema: string; cleanup(): Promise<void> }> {
  if (!pgUrl) throw new Error('STEPWISE_TEST_PG_URL is not set');
  const schema = options.schema ?? freshSchema();
  const store = await openPostgresStore({ url: pgUrl, schema, poolSize: options.poolSize ?? 4 });
  return {
    store,
    schema,
    async cleanup() {
      await store.close();
      await dropSchema(schema);
    },
  };
}
