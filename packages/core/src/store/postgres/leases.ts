import type { LeaseRow } from '../rows.js';
import type { Rule } from '../tx.js';
import { one, type PgQueries, select, update } from './queries.js';

/* PgTx's lease primitives (store/tx.ts): the leases rows and the release of their groups, kept apart from
   the class so postgres/tx.ts stays in size; PgTx delegates to them. */

export function lease(tx: PgQueries, id: string): Rule<LeaseRow | undefined> {
  return one<LeaseRow>(tx, 'SELECT * FROM leases WHERE id = $1 FOR UPDATE', [id]);
}

export function* insertLease(tx: PgQueries, row: LeaseRow): Rule<void> {
  yield* update(
    tx,
    `INSERT INTO leases (id, channel, consumer, state, group_ids, n_steps, created_at, expires_at)
       VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
    [
      row.id,
      row.channel,
      row.consumer,
      row.state,
      row.group_ids,
      row.n_steps,
      row.created_at,
      row.expires_at,
    ],
  );
}

export function overdueLeases(tx: PgQueries, now: number): Rule<LeaseRow[]> {
  return select<LeaseRow>(
    tx,
    "SELECT * FROM leases WHERE state = 'active' AND expires_at < $1 ORDER BY id FOR UPDATE SKIP LOCKED",
    [now],
  );
}

export function* endLeaseRow(tx: PgQueries, id: string, state: LeaseRow['state'], now: number): Rule<void> {
  yield* update(tx, 'UPDATE leases SET state = $1, ended_at = $2 WHERE id = $3', [state, now, id]);
}

export function releaseLeasedGroups(
  tx: PgQueries,
  leaseId: string,
  to: 'consumed' | 'ready',
  now: number,
): Rule<number> {
  return to === 'consumed'
    ? update(
        tx,
        "UPDATE groups SET state = 'consumed', consumed_at = $1, lease_id = NULL WHERE lease_id = $2 AND state = 'leased'",
        [now, leaseId],
      )
    : update(
        tx,
        "UPDATE groups SET state = 'ready', lease_id = NULL WHERE lease_id = $1 AND state = 'leased'",
        [leaseId],
      );
}
