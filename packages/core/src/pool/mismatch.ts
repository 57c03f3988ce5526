import { ConflictError, type MismatchReport, NotFoundError, ValidationError } from '../domain/index.js';
import type { MismatchRow } from '../store/mismatch.js';
import type { PoolTx, Rule } from '../store/tx.js';

/**
 * Stores a trainer's mismatch report for a lease (docs/trainers.md#mismatch-telemetry). Every step
 * must belong to a group of the lease (checked here, not trusted); its engine and policy version
 * are read from the stored step. Any lease state is accepted: a trainer may report after its ack.
 */
export function* recordMismatch(
  tx: PoolTx,
  leaseId: string,
  reports: readonly MismatchReport[],
  now: number,
): Rule<{ leaseId: string; steps: number }> {
  const seen = new Set<string>();
  reports.forEach((r, i) => {
    const key = `${r.trajectoryId}\u0000${r.stepIndex}`;
    if (seen.has(key))
      throw new ValidationError(
        `steps.${i}: step ${r.trajectoryId}/${r.stepIndex} is reported twice`,
        `steps.${i}`,
      );
    seen.add(key);
  });
  const lease = yield* tx.lease(leaseId);
  if (!lease) throw new NotFoundError(`lease ${leaseId} does not exist`);
  const groups = new Set(JSON.parse(lease.group_ids) as string[]);
  const origins = yield* tx.stepOrigins(
    reports.map((r) => ({ trajectoryId: r.trajectoryId, index: r.stepIndex })),
  );
  const rows = reports.map((r, i): MismatchRow => {
    const origin = origins[i];
    if (!origin || origin.channel !== lease.channel || !groups.has(origin.group_id))
      throw new ConflictError(
        `steps.${i}: trajectory ${r.trajectoryId} is not in a group of lease ${leaseId}`,
        `steps.${i}.trajectory_uid`,
      );
    if (!origin.found || origin.policy_version === null)
      throw new ConflictError(
        `steps.${i}: trajectory ${r.trajectoryId} has no step ${r.stepIndex}`,
        `steps.${i}.step_index`,
      );
    return {
      trajectory_id: r.trajectoryId,
      step_index: r.stepIndex,
      engine_id: origin.engine_id,
      policy_version: origin.policy_version,
      tokens: r.tokens,
      k1: r.k1,
      k3: r.k3,
      max_abs_diff: r.maxAbsDiff,
      masked_fraction: r.maskedFraction,
    };
  });
  yield* tx.saveMismatch(lease, rows, now);
  return { leaseId, steps: rows.length };
}
