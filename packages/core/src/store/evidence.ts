import type { EvidenceEntry } from '../domain/evidence.js';
import type { GroupRow } from './rows.js';
import type { Rule } from './rule.js';

/*
 * Re-verification's rows and the primitives its rules run on (pool/evidence.ts, and the pinned
 * serving of pool/groups.ts and pool/lease.ts), inside a transaction of either backend
 * (sqlite/evidence.ts, postgres/evidence.ts). No rule lives here.
 */

/** An `evidence` row: what the verifier of one trajectory read. */
export interface EvidenceRow {
  trajectory_id: string;
  channel: string;
  /** The manifest, as JSON. */
  entries: string;
  final_message: string | null;
  files: number;
  bytes: number;
  created_at: number;
}

/** A channel's served reward read from one signal version (ChannelConfig.reward_pin). */
export interface RewardPin {
  signal: string;
  source: string;
  version: string;
}

export interface EvidenceTx {
  /** Which of these blobs the store lacks. */
  missingBlobs(sha256s: readonly string[]): Rule<string[]>;
  /** Stores a blob (its hash already checked) unless one with that hash is stored; true when new. */
  putBlob(sha256: string, content: Uint8Array, now: number): Rule<boolean>;
  /** The evidence row of a trajectory, or null. */
  evidence(trajectoryId: string): Rule<EvidenceRow | null>;
  insertEvidence(row: EvidenceRow): Rule<void>;
  /** Blobs by hash (those stored). */
  blobs(sha256s: readonly string[]): Rule<Map<string, Uint8Array>>;
  /** Evidence rows after `after` (trajectory id order), of one channel or all, without manifests. */
  evidencePage(
    channel: string | null,
    after: string | null,
    limit: number,
  ): Rule<Omit<EvidenceRow, 'entries' | 'final_message'>[]>;
  /** Each trajectory's latest trajectory-level signal of the pin's name, source and version. */
  pinnedValues(ids: readonly string[], pin: RewardPin): Rule<Map<string, number>>;
  /** Complete counted rollouts of a group that have no signal of the pin. */
  completeWithoutPinned(row: GroupRow, pin: RewardPin): Rule<number>;
}

export type { EvidenceEntry };
