import {
  MISMATCH_COLUMNS,
  MISMATCH_UPSERT,
  type MismatchRow,
  mismatchRollupSql,
  mismatchValues,
  type StepOrigin,
  type StepRef,
} from '../mismatch.js';
import type { LeaseRow } from '../rows.js';
import { STEP_KEY_SPAN } from '../step-codec.js';
import type { Rule } from '../tx.js';

/* PgTx's mismatch primitives (store/tx.ts): one statement each, whatever the number of steps. */

/** What they use of a PgTx (its type is not imported: tx.ts imports this file). */
interface PgQueries {
  flushSteps(): Rule<void>;
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  run(text: string, values?: unknown[]): Promise<number>;
}

export function* stepOrigins(tx: PgQueries, steps: readonly StepRef[]): Rule<(StepOrigin | undefined)[]> {
  yield* tx.flushSteps();
  const rows = (yield tx.rows<StepOrigin & { i: number }>(
    `SELECT u.i, t.group_id, t.channel, s.key IS NOT NULL AS found, s.engine_id, s.policy_version
     FROM unnest($1::text[], $2::int[]) WITH ORDINALITY AS u(id, idx, i)
     JOIN trajectories t ON t.id = u.id
     LEFT JOIN steps s ON s.key = t.seq * ${STEP_KEY_SPAN} + u.idx`,
    [steps.map((s) => s.trajectoryId), steps.map((s) => s.index)],
  )) as (StepOrigin & { i: number })[];
  const out: (StepOrigin | undefined)[] = steps.map(() => undefined);
  for (const { i, ...origin } of rows) out[Number(i) - 1] = origin;
  return out;
}

export function* saveMismatch(
  tx: PgQueries,
  lease: LeaseRow,
  rows: readonly MismatchRow[],
  now: number,
): Rule<void> {
  // Column by column as arrays: one insert for the whole report.
  const values = rows.map((r) => mismatchValues(lease, r, now));
  const column = (k: number) => values.map((v) => v[k]);
  const types = [
    'text',
    'text',
    'int',
    'text',
    'text',
    'int',
    'int',
    'float8',
    'float8',
    'float8',
    'float8',
    'int8',
  ];
  yield tx.run(
    `INSERT INTO mismatch (${MISMATCH_COLUMNS})
     SELECT * FROM unnest(${types.map((t, k) => `$${k + 1}::${t}[]`).join(', ')}) ${MISMATCH_UPSERT}`,
    types.map((_, k) => column(k)),
  );
  yield tx.run('DELETE FROM mismatch_leases WHERE lease_id = $1', [lease.id]);
  yield tx.run(mismatchRollupSql('$1::bigint', '$2'), [lease.created_at, lease.id]);
}
