import {
  ConflictError,
  type Evidence,
  type EvidenceBody,
  type EvidenceEntry,
  type EvidenceSummary,
  NotFoundError,
  ValidationError,
} from '../domain/index.js';
import type { EvidenceRow } from '../store/evidence.js';
import type { PoolTx, Rule } from '../store/tx.js';

// Re-verification's rules (docs/datapool.md#evidence): a trajectory's evidence is kept once, whole
// (every blob it names already stored), and never changed after.

/** Keeps what a trajectory's verifier read; a second keep of the same trajectory is a conflict. */
export function* keepEvidence(
  tx: PoolTx,
  trajectoryId: string,
  body: EvidenceBody,
  now: number,
): Rule<Evidence> {
  const trajectory = yield* tx.trajectory(trajectoryId, true);
  if (!trajectory) throw new NotFoundError(`trajectory ${trajectoryId} not found`);
  if (yield* tx.evidence.evidence(trajectoryId))
    throw new ConflictError(
      `trajectory ${trajectoryId} already has evidence: it is kept once and never replaced`,
      'trajectory_uid',
    );
  const files = body.entries.flatMap((e, i) => (e.type === 'file' ? [{ e, i }] : []));
  const missing = new Set(yield* tx.evidence.missingBlobs(files.map((f) => f.e.sha256)));
  const first = files.find((f) => missing.has(f.e.sha256));
  if (first)
    throw new ValidationError(
      `entries.${first.i}.sha256: blob ${first.e.sha256} is not stored (${missing.size} missing in all); PUT /v1/evidence/blobs/{sha256} first`,
      `entries.${first.i}.sha256`,
    );
  const row: EvidenceRow = {
    trajectory_id: trajectoryId,
    channel: trajectory.channel,
    entries: JSON.stringify(body.entries),
    final_message: body.final_message,
    files: files.length,
    bytes: files.reduce((sum, f) => sum + (f.e as { size: number }).size, 0),
    created_at: now,
  };
  yield* tx.evidence.insertEvidence(row);
  tx.emit(
    'evidence_kept',
    trajectory.channel,
    { trajectory_id: trajectoryId, files: row.files, bytes: row.bytes },
    now,
  );
  return toEvidence(row);
}

export function toEvidence(row: EvidenceRow): Evidence {
  return {
    ...toSummary(row),
    entries: JSON.parse(row.entries) as EvidenceEntry[],
    finalMessage: row.final_message,
  };
}

export function toSummary(row: Omit<EvidenceRow, 'entries' | 'final_message'>): EvidenceSummary {
  return {
    trajectoryId: row.trajectory_id,
    channel: row.channel,
    files: Number(row.files),
    bytes: Number(row.bytes),
    createdAt: Number(row.created_at),
  };
}
