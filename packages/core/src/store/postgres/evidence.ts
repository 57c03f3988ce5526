import type { EvidenceRow, EvidenceTx, RewardPin } from '../evidence.js';
import type { GroupRow } from '../rows.js';
import type { Rule } from '../tx.js';

/* Re-verification's primitives (store/evidence.ts) on PostgreSQL: each yields its query. */

/** What they use of a PgTx (its type is not imported: tx.ts imports this file). */
interface PgQueries {
  rows<T>(text: string, values?: unknown[]): Promise<T[]>;
  run(text: string, values?: unknown[]): Promise<number>;
}

type EvidenceSummaryRow = Omit<EvidenceRow, 'entries' | 'final_message'>;

export function postgresEvidenceTx(tx: PgQueries): EvidenceTx {
  return {
    *missingBlobs(sha256s: readonly string[]): Rule<string[]> {
      const rows = (yield tx.rows<{ sha256: string }>(
        `SELECT u.sha256 FROM unnest($1::text[]) AS u(sha256)
         WHERE NOT EXISTS (SELECT 1 FROM evidence_blobs b WHERE b.sha256 = u.sha256)`,
        [[...new Set(sha256s)]],
      )) as { sha256: string }[];
      return rows.map((r) => r.sha256);
    },
    *putBlob(sha256: string, content: Uint8Array, now: number): Rule<boolean> {
      const added = (yield tx.run(
        `INSERT INTO evidence_blobs (sha256, size, content, added_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (sha256) DO NOTHING`,
        [
          sha256,
          content.byteLength,
          Buffer.from(content.buffer, content.byteOffset, content.byteLength),
          now,
        ],
      )) as number;
      return added > 0;
    },
    *evidence(trajectoryId: string): Rule<EvidenceRow | null> {
      const rows = (yield tx.rows<EvidenceRow>('SELECT * FROM evidence WHERE trajectory_id = $1', [
        trajectoryId,
      ])) as EvidenceRow[];
      return rows[0] ?? null;
    },
    *insertEvidence(row: EvidenceRow): Rule<void> {
      yield tx.run(
        `INSERT INTO evidence (trajectory_id, channel, entries, final_message, files, bytes, created_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)`,
        [
          row.trajectory_id,
          row.channel,
          row.entries,
          row.final_message,
          row.files,
          row.bytes,
          row.created_at,
        ],
      );
    },
    *blobs(sha256s: readonly string[]): Rule<Map<string, Uint8Array>> {
      const rows = (yield tx.rows<{ sha256: string; content: Buffer }>(
        'SELECT sha256, content FROM evidence_blobs WHERE sha256 = ANY($1::text[])',
        [[...new Set(sha256s)]],
      )) as { sha256: string; content: Buffer }[];
      return new Map(rows.map((r) => [r.sha256, new Uint8Array(r.content)]));
    },
    *evidencePage(channel: string | null, after: string | null, limit: number): Rule<EvidenceSummaryRow[]> {
      return (yield tx.rows<EvidenceSummaryRow>(
        `SELECT trajectory_id, channel, files, bytes, created_at FROM evidence
         WHERE ($1::text IS NULL OR channel = $1) AND trajectory_id > $2 ORDER BY trajectory_id LIMIT $3`,
        [channel, after ?? '', limit],
      )) as EvidenceSummaryRow[];
    },
    *pinnedValues(ids: readonly string[], pin: RewardPin): Rule<Map<string, number>> {
      if (ids.length === 0) return new Map();
      const rows = (yield tx.rows<{ trajectory_id: string; value: number }>(
        `SELECT trajectory_id, value FROM signals
         WHERE trajectory_id = ANY($1::text[]) AND step_index IS NULL
           AND name = $2 AND source = $3 AND version = $4
         ORDER BY created_at, id`,
        [[...ids], pin.signal, pin.source, pin.version],
      )) as { trajectory_id: string; value: number }[];
      // Oldest first: the last one per trajectory wins.
      return new Map(rows.map((r) => [r.trajectory_id, r.value]));
    },
    *completeWithoutPinned(row: GroupRow, pin: RewardPin): Rule<number> {
      const rows = (yield tx.rows<{ n: number }>(
        `SELECT count(*) AS n FROM trajectories t
         WHERE t.group_id = $1 AND t.channel = $2 AND t.status = 'complete' AND t.counted = 1
           AND NOT EXISTS (SELECT 1 FROM signals s WHERE s.trajectory_id = t.id AND s.step_index IS NULL
                           AND s.name = $3 AND s.source = $4 AND s.version = $5)`,
        [row.id, row.channel, pin.signal, pin.source, pin.version],
      )) as { n: number }[];
      return Number(rows[0]!.n);
    },
  };
}
