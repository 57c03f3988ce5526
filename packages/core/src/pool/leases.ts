import { ConflictError, type Lease, NotFoundError } from '../domain/index.js';
import { type LeaseRow, toLease } from '../store/rows.js';
import type { PoolTx, Rule } from '../store/tx.js';

// A lease is soft state: when it expires or is nacked its groups go back to the ready queue.

/** Expires every overdue lease; their groups are served again. */
export function* expireLeases(tx: PoolTx, now: number): Rule<number> {
  const overdue = yield* tx.overdueLeases(now);
  for (const lease of overdue) yield* expireLease(tx, lease, now);
  return overdue.length;
}

function* expireLease(tx: PoolTx, lease: LeaseRow, now: number): Rule<void> {
  yield* tx.endLeaseRow(lease.id, 'expired', now);
  lease.state = 'expired';
  const back = yield* tx.releaseLeasedGroups(lease.id, 'ready', now);
  tx.log.count(lease.channel, 'leases_expired');
  tx.emit(
    'lease_expired',
    lease.channel,
    { lease_id: lease.id, consumer: lease.consumer, groups_returned: back },
    now,
  );
}

/**
 * Acks (groups consumed) or nacks (groups back to ready) a lease. A lease already past its expiry
 * answers a conflict, returned rather than thrown: its expiry must commit before the caller hears no.
 */
export function* endLease(
  tx: PoolTx,
  leaseId: string,
  outcome: 'acked' | 'nacked',
  now: number,
): Rule<Lease | ConflictError> {
  const lease = yield* tx.lease(leaseId);
  if (!lease) throw new NotFoundError(`lease ${leaseId} does not exist`);
  if (lease.state === outcome) return toLease(lease); // a retried ack or nack
  // Every overdue lease goes, as at a sweep (this one included).
  if (lease.state === 'active' && lease.expires_at < now) {
    yield* expireLeases(tx, now);
    lease.state = 'expired';
  }
  if (lease.state !== 'active')
    return new ConflictError(
      `lease ${leaseId} is ${lease.state}; its groups may be served again`,
      'lease_id',
    );
  yield* tx.endLeaseRow(leaseId, outcome, now);
  const event = { lease_id: leaseId, consumer: lease.consumer };
  if (outcome === 'acked') {
    const consumed = yield* tx.releaseLeasedGroups(leaseId, 'consumed', now);
    tx.log.count(lease.channel, 'groups_consumed', consumed);
    tx.log.count(lease.channel, 'steps_consumed', lease.n_steps);
    tx.log.count(lease.channel, 'batches_acked');
    tx.emit('batch_acked', lease.channel, { ...event, groups: consumed }, now);
  } else {
    const back = yield* tx.releaseLeasedGroups(leaseId, 'ready', now);
    tx.log.count(lease.channel, 'batches_nacked');
    tx.emit('batch_nacked', lease.channel, { ...event, groups: back }, now);
  }
  return toLease({ ...lease, state: outcome, ended_at: now });
}
