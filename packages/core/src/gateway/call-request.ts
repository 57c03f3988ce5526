import { MAX_PROMPT_TOKENS, ValidationError } from '../domain/index.js';
import type { Engine } from '../engines/router.js';
import { type ChatCompletionRequest, parseChatRequest } from './wire/openai-chat.js';
import { type CompletionRequest, parseCompletionRequest } from './wire/openai-completions.js';

/*
 * An LLM call's request: checked just enough to forward and capture it (the engine checks the
 * rest), and the engine's request built from it, the agent's own bytes where they can be kept.
 */

export type CallKind = 'chat' | 'text';

export const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/** The request of a call, typed by its protocol. */
export type CallRequest<K extends CallKind> = K extends 'chat' ? ChatCompletionRequest : CompletionRequest;

/**
 * The agent's request checked against its protocol's wire schema (a 400 naming the field otherwise);
 * the value is the agent's own object, so what is forwarded and stored is what it sent.
 */
export function checkCallRequest<K extends CallKind>(kind: K, body: unknown): CallRequest<K>;
export function checkCallRequest(kind: CallKind, body: unknown): ChatCompletionRequest | CompletionRequest {
  if (!isObject(body)) throw new ValidationError('body: must be a JSON object', 'body');
  if (kind === 'chat') return parseChatRequest(body);
  const request = parseCompletionRequest(body);
  if (Array.isArray(request.prompt)) {
    const ids = Array.isArray(request.prompt[0]) ? request.prompt[0] : request.prompt;
    checkPromptLength(ids.length, 'prompt');
  }
  return request;
}

/** The chat request of a call, or null for a text completion (the kind says which schema checked it). */
export const chatRequestOf = (
  kind: CallKind,
  request: CallRequest<CallKind>,
): ChatCompletionRequest | null => (kind === 'chat' ? (request as ChatCompletionRequest) : null);

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
