import { z } from 'zod';
import { LeaseRequest, ValidationError } from '../domain/index.js';
import { LEASE_HEADERS } from '../domain/wire-headers.js';
import type { LeasedBatch } from '../pool/types.js';
import { ADVANTAGE_ESTIMATORS } from './advantages.js';
import { arrowColumns, arrowRows, encodeArrow } from './arrow-batch.js';
import { batchCuration, batchToJson, batchToTrajectoryRowsJson } from './json-batch.js';
import { npzParts } from './npz.js';
import { withoutUntrainableSteps } from './off-policy.js';
import { batchToPadded } from './padded-batch.js';
import { ROW_KINDS } from './trajectory-rows.js';
import type { PartialRollouts } from './versions.js';

/** `POST /v1/batches/lease`: the pool's lease fields plus how the batch is laid out (docs/serving.md). */
export const BatchRequest = LeaseRequest.extend({
  format: z.enum(['json', 'arrow', 'padded']).default('json'),
  /** `trajectory`: each trajectory stitched into one sequence with a loss mask (trajectory-rows.ts) */
  rows: z.enum(ROW_KINDS).default('step'),
  advantage: z.enum(ADVANTAGE_ESTIMATORS).optional(),
  pack: z.enum(['prefix_tree']).optional(),
  share_responses: z.boolean().optional(),
  prompt_length: z.number().int().min(1, 'must be >= 1').max(1_048_576).optional(),
  response_length: z.number().int().min(1, 'must be >= 1').max(1_048_576).optional(),
  overlong: z.enum(['reject', 'truncate', 'drop']).default('reject'),
  pad_token_id: z
    .number()
    .int()
    .min(0)
    .max(2 ** 31 - 1)
    .default(0),
});
export type BatchRequest = z.infer<typeof BatchRequest>;

/** Options that only one format reads are refused elsewhere rather than silently ignored. */
export function checkBatchRequest(request: BatchRequest, raw: Record<string, unknown>): void {
  if (request.pack !== undefined && request.format !== 'json')
    throw new ValidationError(`pack: prefix-tree packing comes with format "json" only`, 'pack');
  if (request.pack !== undefined && request.rows !== 'step')
    throw new ValidationError(
      `pack: prefix-tree packing packs step rows only (rows "trajectory" already sends a trajectory's shared history once)`,
      'pack',
    );
  if (request.share_responses !== undefined && request.pack === undefined)
    throw new ValidationError(`share_responses: applies to pack "prefix_tree" only`, 'share_responses');
  if (request.format !== 'padded') {
    for (const field of ['prompt_length', 'response_length', 'overlong', 'pad_token_id'])
      if (raw[field] !== undefined)
        throw new ValidationError(`${field}: applies to format "padded" only`, field);
  }
}

export interface RenderedBatch {
  contentType: string;
  body: Uint8Array[] | string;
  headers: Record<string, string>;
}

/**
 * Lays a leased batch out in the requested format. Throws OverlongError under `overlong: reject`.
 * `partialRollouts` is the channel's setting (versions.ts): what the loss masks do with the tokens a
 * step generated before its last weight switch.
 */
export async function renderBatch(
  leased: LeasedBatch,
  request: BatchRequest,
  partialRollouts: PartialRollouts = 'train',
): Promise<RenderedBatch> {
  // Guided steps without a hint-free prompt are left out of every format, and counted (off-policy.ts).
  const { batch, untrainable } = withoutUntrainableSteps(leased);
  const lease: Record<string, string> = {
    [LEASE_HEADERS.untrainableSteps]: String(untrainable),
    [LEASE_HEADERS.leaseId]: batch.lease.id,
    [LEASE_HEADERS.leaseExpiresAt]: String(batch.lease.expiresAt),
    // The version the batch was served at: a trainer's staleness reference in the binary formats.
    [LEASE_HEADERS.policyVersion]: String(batch.policyVersion),
  };
  if (request.format !== 'json') {
    // The binary formats carry curation's metrics in a header (the JSON body has the whole record);
    // the dropped groups are counted, not listed, to keep the header small.
    const { dropped_groups, metrics } = batchCuration(batch);
    lease[LEASE_HEADERS.curation] = JSON.stringify({ dropped_groups: dropped_groups.length, metrics });
  }
  if (request.format === 'json') {
    if (request.rows === 'trajectory') {
      const json = batchToTrajectoryRowsJson(batch, {
        advantage: request.advantage,
        untrainableSteps: untrainable,
        partialRollouts,
      });
      return { contentType: 'application/json', body: JSON.stringify(json), headers: lease };
    }
    const json = batchToJson(batch, {
      advantage: request.advantage,
      pack: request.pack,
      shareResponses: request.share_responses,
      untrainableSteps: untrainable,
      partialRollouts,
    });
    return { contentType: 'application/json', body: JSON.stringify(json), headers: lease };
  }
  if (request.format === 'arrow') {
    const columns = arrowColumns(batch, {
      advantage: request.advantage,
      rows: request.rows,
      partialRollouts,
    });
    return {
      contentType: 'application/vnd.apache.arrow.stream',
      body: [await encodeArrow(columns)],
      headers: {
        ...lease,
        [LEASE_HEADERS.rows]: String(arrowRows(columns)),
        [LEASE_HEADERS.truncatedSteps]: '0',
        [LEASE_HEADERS.droppedSteps]: '0',
      },
    };
  }
  const padded = batchToPadded(batch, {
    promptLength: request.prompt_length,
    responseLength: request.response_length,
    overlong: request.overlong,
    padTokenId: request.pad_token_id,
    advantage: request.advantage,
    rows: request.rows,
    partialRollouts,
  });
  return {
    contentType: 'application/zip',
    body: npzParts(padded.arrays).parts,
    headers: {
      ...lease,
      [LEASE_HEADERS.rows]: String(padded.rows),
      [LEASE_HEADERS.truncatedSteps]: String(padded.truncated),
      [LEASE_HEADERS.droppedSteps]: String(padded.dropped),
      [LEASE_HEADERS.promptLength]: String(padded.promptLength),
      [LEASE_HEADERS.responseLength]: String(padded.responseLength),
    },
  };
}
