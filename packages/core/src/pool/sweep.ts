import type { PoolTx, Rule } from '../store/tx.js';
import { sweepCollecting, sweepGuidanceHolds } from './groups.js';
import { expireLeases } from './leases.js';
import { abortIdle } from './trajectories.js';
import type { GroupSweepResult } from './types.js';

/** The periodic sweep: overdue leases, idle trajectories, guidance holds, then collecting timeouts. */
export function* sweep(tx: PoolTx, now: number): Rule<GroupSweepResult> {
  const expiredLeases = yield* expireLeases(tx, now);
  const idleAborted = yield* abortIdle(tx, now);
  const guidanceReleased = yield* sweepGuidanceHolds(tx, now);
  return { ...(yield* sweepCollecting(tx, now)), expiredLeases, idleAborted, guidanceReleased };
}
