import { z } from 'zod';

/** A JSON object as it crosses a boundary: keys are strings, values anything JSON can hold. */
export const JsonObject = z.record(z.string(), z.unknown());
export type JsonObject = z.infer<typeof JsonObject>;

/**
 * The most bytes, as JSON, of one free-form object the API stores: a trajectory's or a step's
 * metadata, a signal's details (docs/security.md). Every list and detail view reads it, and parsing
 * it costs the event loop about 10 ms per MiB of small objects; 256 KiB keeps that under 3 ms.
 */
export const MAX_METADATA_BYTES = 256 * 1024;

/**
 * Metadata a list view carries inline per row; a bigger one is a `metadata_truncated` marker there,
 * whole in the detail view (a page of 50 rows then parses at most 800 KiB of metadata).
 */
export const LIST_METADATA_BYTES = 16 * 1024;

/** Fields the API stores as free-form JSON, wherever they sit in a body; each at most MAX_METADATA_BYTES. */
export const FREE_FORM_FIELDS: ReadonlySet<string> = new Set(['metadata', 'details']);

/** The UTF-8 bytes of `value` as JSON. */
export const jsonBytes = (value: unknown): number => Buffer.byteLength(JSON.stringify(value) ?? '');

/** The message of a free-form object past the cap. */
export const tooBigMessage = (bytes: number) =>
  `larger than ${MAX_METADATA_BYTES} bytes as JSON (${bytes}); keep big payloads in steps or files and link them`;

/** A free-form JSON object the API stores: at most MAX_METADATA_BYTES as JSON. */
export const StoredJsonObject = JsonObject.superRefine((value, ctx) => {
  const bytes = jsonBytes(value);
  if (bytes > MAX_METADATA_BYTES) ctx.addIssue({ code: 'custom', message: tooBigMessage(bytes) });
});
