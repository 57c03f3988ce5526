import type { NewStep } from '../domain/index.js';
import type { EngineKind } from '../engines/upstream.js';
import type { CallKind } from './call-request.js';

/*
 * What the gateway tells a tracer (server/otel.ts) of each LLM call whose step it stored: enough
 * to make the call's span without another read of the store.
 */

/** Where an LLM call came from: when it arrived and the agent's W3C `traceparent`, if it sent one. */
export interface CallOrigin {
  /** Epoch milliseconds, fractional. */
  receivedAt: number;
  traceparent: string | null;
}

/** A stored step and its call. */
export interface StoredCall {
  step: NewStep;
  channel: string;
  kind: CallKind;
  /** The agent's request as the engine saw it (sampling fields, messages). */
  request: Record<string, unknown>;
  origin: CallOrigin;
  /** Epoch milliseconds when its commit was durable. */
  storedAt: number;
  engineKind: EngineKind;
  /** The engine's id of its answer (`chatcmpl-...`), when it sent one. */
  responseId: string | null;
}

/** Told of every step the gateway stores; must not throw or block (the agent's answer waits). */
export interface CallTracer {
  stepStored(call: StoredCall): void;
}

/** Now, in the clock of CallOrigin.receivedAt. */
export const epochNow = (): number => performance.timeOrigin + performance.now();
