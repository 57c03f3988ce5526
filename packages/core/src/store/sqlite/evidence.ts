import type { EvidenceRow, EvidenceTx, RewardPin } from '../evidence.js';
import type { GroupRow } from '../rows.js';
import { done, type Rule } from '../tx.js';
import type { Statement } from './statements.js';

/* Re-verification's primitives (store/evidence.ts) on SQLite: synchronous, in the open transaction. */

export function sqliteEvidenceTx(stmt: (source: string) => Statement): EvidenceTx {
  return {
    missingBlobs(sha256s: readonly string[]): Rule<string[]> {
      const rows = stmt(
        `SELECT value AS sha256 FROM json_each(?)
         WHERE value NOT IN (SELECT sha256 FROM evidence_blobs)`,
      ).all(JSON.stringify([...new Set(sha256s)])) as { sha256: string }[];
      return done(rows.map((r) => r.sha256));
    },
    putBlob(sha256: string, content: Uint8Array, now: number): Rule<boolean> {
      const { changes } = stmt(
        `INSERT INTO evidence_blobs (sha256, size, content, added_at) VALUES (?, ?, ?, ?)
         ON CONFLICT (sha256) DO NOTHING`,
      ).run(sha256, content.byteLength, content, now);
      return done(changes > 0);
    },
    evidence(trajectoryId: string): Rule<EvidenceRow | null> {
      return done(
        (stmt('SELECT * FROM evidence WHERE trajectory_id = ?').get(trajectoryId) as
          | EvidenceRow
          | undefined) ?? null,
      );
    },
    insertEvidence(row: EvidenceRow): Rule<void> {
      stmt(
        `INSERT INTO evidence (trajectory_id, channel, entries, final_message, files, bytes, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        row.trajectory_id,
        row.channel,
        row.entries,
        row.final_message,
        row.files,
        row.bytes,
        row.created_at,
      );
      return done(undefined);
    },
    blobs(sha256s: readonly string[]): Rule<Map<string, Uint8Array>> {
      const rows = stmt(
        'SELECT sha256, content FROM evidence_blobs WHERE sha256 IN (SELECT value FROM json_each(?))',
      ).all(JSON.stringify([...new Set(sha256s)])) as { sha256: string; content: Uint8Array }[];
      return done(new Map(rows.map((r) => [r.sha256, r.content])));
    },
    evidencePage(channel: string | null, after: string | null, limit: number) {
      return done(
        stmt(
          `SELECT trajectory_id, channel, files, bytes, created_at FROM evidence
           WHERE (? IS NULL OR channel = ?) AND trajectory_id > ? ORDER BY trajectory_id LIMIT ?`,
        ).all(channel, channel, after ?? '', limit) as Omit<EvidenceRow, 'entries' | 'final_message'>[],
      );
    },
    pinnedValues(ids: readonly string[], pin: RewardPin): Rule<Map<string, number>> {
      if (ids.length === 0) return done(new Map());
      const rows = stmt(
        `SELECT trajectory_id, value FROM signals
         WHERE trajectory_id IN (SELECT value FROM json_each(?)) AND step_index IS NULL
           AND name = ? AND source = ? AND version = ?
         ORDER BY created_at, id`,
      ).all(JSON.stringify(ids), pin.signal, pin.source, pin.version) as {
        trajectory_id: string;
        value: number;
      }[];
      // Oldest first: the last one per trajectory wins.
      return done(new Map(rows.map((r) => [r.trajectory_id, r.value])));
    },
    completeWithoutPinned(row: GroupRow, pin: RewardPin): Rule<number> {
      const { n } = stmt(
        `SELECT count(*) AS n FROM trajectories t
         WHERE t.group_id = ? AND t.channel = ? AND t.status = 'complete' AND t.counted = 1
           AND NOT EXISTS (SELECT 1 FROM signals s WHERE s.trajectory_id = t.id AND s.step_index IS NULL
                           AND s.name = ? AND s.source = ? AND s.version = ?)`,
      ).get(row.id, row.channel, pin.signal, pin.source, pin.version) as { n: number };
      return done(n);
    },
  };
}
