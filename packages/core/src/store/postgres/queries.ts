import { createHash } from 'node:crypto';
import type pg from 'pg';
import type { Rule } from '../tx.js';

/* How PgTx queries: named prepared statements, and the query steps of its primitive modules (labels.ts,
   leases.ts), which take a PgQueries rather than import tx.ts (tx.ts imports them). */

const statementNames = new Map<string, string>();

/** A named (server-side prepared) statement per SQL text: parsed once per connection. */
export function prepared(text: string, values: unknown[]): pg.QueryConfig {
  let name = statementNames.get(text);
  if (!name) {
    name = `s${createHash('sha1').update(text).digest('hex').slice(0, 20)}`;
    statementNames.set(text, name);
  }
  return { name, text, values };
}

/** What the primitive modules use of a PgTx. */
export interface PgQueries {
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  run(text: string, values?: unknown[]): Promise<number>;
}

export function* select<T>(tx: PgQueries, text: string, values: unknown[] = []): Rule<T[]> {
  return (yield tx.rows<T>(text, values)) as T[];
}

export function* one<T>(tx: PgQueries, text: string, values: unknown[] = []): Rule<T | undefined> {
  return (yield* select<T>(tx, text, values))[0];
}

export function* update(tx: PgQueries, text: string, values: unknown[] = []): Rule<number> {
  return (yield tx.run(text, values)) as number;
}
