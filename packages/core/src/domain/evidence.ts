import { z } from 'zod';

/*
 * What a verifier read of a finished episode (docs/datapool.md#evidence): its final workspace as a
 * manifest of content-addressed files, and the agent's final message. Kept once per trajectory, so a
 * new verifier can score the episode again without any inference (`stepwise rewards reverify`).
 */

/** At most this many entries in one manifest. */
export const MAX_EVIDENCE_ENTRIES = 100_000;
/** At most this many bytes in one blob (the server's default body limit is 64 MiB). */
export const MAX_EVIDENCE_BLOB_BYTES = 64 * 1024 * 1024;
/** At most this many characters in an entry's path. */
export const MAX_EVIDENCE_PATH = 4_096;

export const Sha256Hex = z.string().regex(/^[0-9a-f]{64}$/, 'must be 64 lowercase hex digits (sha256)');

/** A relative POSIX path inside the workspace: no `..`, no `.`, no empty segment, no NUL. */
const EntryPath = z
  .string()
  .min(1, 'must not be empty')
  .max(MAX_EVIDENCE_PATH, `must be at most ${MAX_EVIDENCE_PATH} characters`)
  .refine(
    (p) => !p.includes('\0') && p.split('/').every((seg) => seg !== '' && seg !== '.' && seg !== '..'),
    'must be a relative path inside the workspace (no "..", ".", empty segment or NUL)',
  );

const Mode = z.number().int().min(0).max(0o7777);

export const EvidenceEntry = z.discriminatedUnion('type', [
  z.strictObject({
    type: z.literal('file'),
    path: EntryPath,
    mode: Mode,
    size: z.number().int().min(0).max(MAX_EVIDENCE_BLOB_BYTES),
    sha256: Sha256Hex,
  }),
  z.strictObject({ type: z.literal('dir'), path: EntryPath, mode: Mode }),
  z.strictObject({
    type: z.literal('symlink'),
    path: EntryPath,
    target: z.string().min(1).max(MAX_EVIDENCE_PATH),
  }),
]);
export type EvidenceEntry = z.infer<typeof EvidenceEntry>;

/** `PUT /v1/trajectories/{uid}/evidence`: the manifest (its blobs already stored) and the final message. */
export const EvidenceBody = z.strictObject({
  entries: z
    .array(EvidenceEntry)
    .max(MAX_EVIDENCE_ENTRIES, `at most ${MAX_EVIDENCE_ENTRIES} entries`)
    .refine((list) => new Set(list.map((e) => e.path)).size === list.length, 'paths must be distinct'),
  final_message: z
    .string()
    .max(4 * 1024 * 1024)
    .nullable()
    .default(null),
});
export type EvidenceBody = z.infer<typeof EvidenceBody>;

/** A trajectory's kept evidence. */
export interface Evidence {
  trajectoryId: string;
  channel: string;
  entries: EvidenceEntry[];
  finalMessage: string | null;
  /** Files in the manifest, and the bytes they hold. */
  files: number;
  bytes: number;
  createdAt: number;
}

/** One row of a listing: which trajectory has evidence, without its manifest. */
export type EvidenceSummary = Omit<Evidence, 'entries' | 'finalMessage'>;
