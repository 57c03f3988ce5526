import { type NewStep, parseOrThrow, StepWire, SubmitStepsBody, stepFromWire } from '../domain/index.js';
import { parseJsonText } from './json-parse.js';

/*
 * A step batch (`POST /v1/steps`, `/submit_steps`) is the API's biggest body by design: thousands of
 * steps of token ids, up to --max-body-mb. Parsing and checking one is about 15 ms of CPU per MiB, so
 * a big one is parsed on the offload thread (http/steps.ts) and its ids come back as moved Uint32Arrays
 * (the stores read token arrays as ArrayLike); a small one costs less than the hop and is parsed here.
 */

/** Bodies from this size on are parsed off the event loop. */
export const OFFLOAD_BODY_BYTES = 256 * 1024;

export interface ParsedSteps {
  steps: NewStep[];
  channel: string | undefined;
  nRollouts: number | null;
}

/** A step batch's text, parsed and checked: a 400 naming the field on the first problem. */
export function parseStepsBody(text: string): ParsedSteps {
  const body = parseJsonText(text, true, true).value;
  // Claw-R1 clients may post a bare array of steps.
  const envelope = parseOrThrow(SubmitStepsBody, Array.isArray(body) ? { steps: body } : body);
  return {
    steps: envelope.steps.map((raw, i) => stepFromWire(parseOrThrow(StepWire, raw, `steps.${i}`))),
    channel: envelope.channel,
    nRollouts: envelope.n_rollouts ?? null,
  };
}
