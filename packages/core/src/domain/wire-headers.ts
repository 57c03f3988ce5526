/*
 * The header names of the wire, one list for both languages (lower case, as node and HTTP/2 spell
 * them; matching is case-insensitive). `npm run gen:wire` writes them into the JSON Schema and the
 * Python client's constants; tests check that the server sends what this list names.
 */

/** Headers on a leased batch's answer (the `padded` and `arrow` formats carry the lease here). */
export const LEASE_HEADERS = {
  /** The lease id to ack or nack. */
  leaseId: 'x-lease-id',
  /** When the lease runs out, in ms since the epoch. */
  leaseExpiresAt: 'x-lease-expires-at',
  /** The policy version in force when the batch was leased. */
  policyVersion: 'x-stepwise-policy-version',
  /** Rows (steps) in the batch. */
  rows: 'x-stepwise-rows',
  /** Steps cut by the `overlong` policy. */
  truncatedSteps: 'x-stepwise-truncated-steps',
  /** Steps dropped by the `overlong` policy. */
  droppedSteps: 'x-stepwise-dropped-steps',
  /** Guided steps left out for want of a hint-free training prompt. */
  untrainableSteps: 'x-stepwise-untrainable-steps',
  /** What curation did while the lease was filled (JSON: dropped groups, reward metrics). */
  curation: 'x-stepwise-curation',
  /** The `padded` format's prompt and response widths. */
  promptLength: 'x-stepwise-prompt-length',
  responseLength: 'x-stepwise-response-length',
} as const;

/** Headers an agent's LLM call may carry at the fixed base_url (docs/gateway.md). */
export const AGENT_HEADERS = {
  /** The trajectory a call belongs to. */
  trajectory: 'x-stepwise-trajectory',
  /** An online session's key: the gateway finds or opens its trajectory. */
  session: 'x-stepwise-session',
  /** An online session's channel (an operator's choice; agent-only keys cannot pick `train`). */
  channel: 'x-stepwise-channel',
} as const;
