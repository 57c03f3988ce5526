import { MAX_PROMPT_TOKENS, ValidationError } from '../domain/index.js';
import type { Engine } from '../engines/router.js';
import { checkSamplingOptions } from './sampling.js';

/*
 * An LLM call's request: checked just enough to forward and capture it (the engine checks the
 * rest), and the engine's request built from it, the agent's own bytes where they can be kept.
 */

export type CallKind = 'chat' | 'text';

export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The agent's request, checked just enough to forward and capture it; the engine checks the rest. */
export function checkCallRequest(kind: CallKind, body: unknown): Record<string, unknown> {
  if (!isObject(body)) throw new ValidationError('body: must be a JSON object', 'body');
  if (kind === 'chat') {
    if (!Array.isArray(body.messages) || body.messages.length === 0) {
      throw new ValidationError('messages: must be a non-empty array of messages', 'messages');
    }
    body.messages.forEach((m, i) => {
      if (!isObject(m) || typeof m.role !== 'string') {
        throw new ValidationError(`messages.${i}: must be an object with a role`, `messages.${i}`);
      }
    });
    if (body.tools !== undefined && body.tools !== null && !Array.isArray(body.tools)) {
      throw new ValidationError('tools: must be an array', 'tools');
    }
  } else if (typeof body.prompt !== 'string' && !Array.isArray(body.prompt)) {
    throw new ValidationError('prompt: must be a string or an array of token ids', 'prompt');
  } else if (Array.isArray(body.prompt)) {
    checkPromptLength(body.prompt.length, 'prompt');
  }
  if (body.n !== undefined && body.n !== null && body.n !== 1) {
    throw new ValidationError(
      'n: only n=1 is supported (each choice would be its own step; send n separate requests, one trajectory each)',
      'n',
    );
  }
  if (body.stream !== undefined && body.stream !== null && typeof body.stream !== 'boolean') {
    throw new ValidationError('stream: must be a boolean', 'stream');
  }
  checkSamplingOptions(body);
  return body;
}

/** A prompt of ids longer than MAX_PROMPT_TOKENS is a 400 naming `field`. */
export function checkPromptLength(length: number, field: string): void {
  if (length > MAX_PROMPT_TOKENS)
    throw new ValidationError(
      `${field}: ${length} token ids; a call may send at most ${MAX_PROMPT_TOKENS} (MAX_PROMPT_TOKENS)`,
      field,
    );
}

/** What the gateway needs set in the engine's request: the served model, ids, logprobs, usage. */
function upstreamFields(
  kind: CallKind,
  request: Record<string, unknown>,
  engine: Engine,
  served: string[],
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (served.length > 0 && (typeof request.model !== 'string' || !served.includes(request.model)))
    out.model = served[0];
  // SGLang's chat refuses its id switches in a stream (a 400), whose chunks have no place for ids:
  // such a call is rebuilt as from a plain API, and asks for no logprobs it could not keep.
  const idless =
    engine.kind === 'openai' || (engine.kind === 'sglang' && kind === 'chat' && request.stream === true);
  if (!idless) {
    out.return_token_ids = true;
    // SGLang's whole chat answer holds the prompt's ids when asked apart (its ChatCompletionRequest).
    if (engine.kind === 'sglang' && kind === 'chat') out.return_prompt_token_ids = true;
    if (kind === 'chat') out.logprobs = true;
    else if (typeof request.logprobs !== 'number') out.logprobs = 0;
  }
  // The usage chunk tells whether every generated id reached us (see Captured.idsIncomplete) and,
  // from a text-only engine, how far retokenizing drifts from its count. OpenAI's API has it too;
  // an agent that did not ask gets none.
  if (request.stream === true)
    out.stream_options = {
      ...(isObject(request.stream_options) ? request.stream_options : {}),
      include_usage: true,
    };
  return out;
}

/**
 * The engine's request body. When every field the gateway sets is absent from the agent's request
 * (or already has that value), it is the agent's own text with those fields appended before the
 * closing brace: a long conversation is forwarded without being printed again, byte for byte as
 * the agent sent it. A field the agent set differently means re-serializing (no duplicate keys).
 */
export function upstreamText(
  kind: CallKind,
  request: Record<string, unknown>,
  raw: string | null,
  engine: Engine,
  served: string[],
): string {
  const fields = upstreamFields(kind, request, engine, served);
  if (raw !== null) {
    let extra = '';
    let spliceable = true;
    for (const [key, value] of Object.entries(fields)) {
      if (!(key in request)) extra += `,${JSON.stringify(key)}:${JSON.stringify(value)}`;
      else if (JSON.stringify(request[key]) !== JSON.stringify(value)) {
        spliceable = false;
        break;
      }
    }
    const end = raw.lastIndexOf('}');
    if (spliceable && end > 0) return extra === '' ? raw : raw.slice(0, end) + extra + raw.slice(end);
  }
  return JSON.stringify({ ...request, ...fields });
}
