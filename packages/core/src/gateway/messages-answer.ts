import { randomBytes } from 'node:crypto';
import { StepwiseError } from '../domain/index.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import { isObject } from './call-request.js';
import { toolUseId } from './messages-request.js';

/*
 * Anthropic's Messages API shapes of the chat path's answers: a whole completion as a `message`, an
 * error as `{type: "error", error}`, and the parts both these and the stream (messages-stream.ts) use.
 */

/** Anthropic's error types, by HTTP status; each SDK raises its typed error from the status. */
function errorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 429) return 'rate_limit_error';
  if (status === 504) return 'timeout_error';
  if (status === 529) return 'overloaded_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/** Anthropic's error body. The message names the bad field first, as the gateway's errors do. */
export function anthropicErrorBody(status: number, message: string): Record<string, unknown> {
  return { type: 'error', error: { type: errorType(status), message }, request_id: null };
}

export function anthropicError(status: number, message: string): Answer {
  return { status, headers: JSON_HEADERS, body: JSON.stringify(anthropicErrorBody(status, message)) };
}

/** Any thrown error in Anthropic's shape (unexpected ones as a bare 500). */
export function anthropicErrorAnswer(error: unknown): Answer {
  if (error instanceof StepwiseError) return anthropicError(error.status, error.message);
  return anthropicError(500, 'internal error');
}

/** A new message id: 128 random bits, as unguessable as a trajectory id. */
export const newMessageId = (): string => `msg_${randomBytes(16).toString('hex')}`;

/** Anthropic's stop reason for a chat choice's finish: a stop string matched is a stop sequence. */
export function stopReasonOf(
  finish: unknown,
  matched: unknown,
  usedTools: boolean,
): { stop_reason: string; stop_sequence: string | null } {
  if (finish === 'length') return { stop_reason: 'max_tokens', stop_sequence: null };
  if (finish === 'tool_calls' || usedTools) return { stop_reason: 'tool_use', stop_sequence: null };
  // vLLM (and the sim) name the stop string that ended the text in `stop_reason`; EOS leaves it null.
  if (typeof matched === 'string') return { stop_reason: 'stop_sequence', stop_sequence: matched };
  return { stop_reason: 'end_turn', stop_sequence: null };
}

/** Chat usage as Anthropic's: no prompt caching is reported, so all the prompt counts as input. */
export function usageOf(usage: unknown): { input_tokens: number; output_tokens: number } {
  const u = isObject(usage) ? usage : {};
  return {
    input_tokens: typeof u.prompt_tokens === 'number' ? u.prompt_tokens : 0,
    output_tokens: typeof u.completion_tokens === 'number' ? u.completion_tokens : 0,
  };
}

/** A tool call's arguments as a tool_use input: the JSON object the model wrote. */
export function inputOf(args: unknown): Record<string, unknown> {
  if (isObject(args)) return args;
  if (typeof args !== 'string' || args.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(args);
    return isObject(parsed) ? parsed : {};
  } catch {
    // The step keeps the model's text; the agent gets an object, as the API promises.
    return {};
  }
}

/** A whole chat completion as an Anthropic message. */
export function messageOf(completion: Record<string, unknown>, id: string): Record<string, unknown> {
  const choice = (completion.choices as unknown[])[0];
  const c = isObject(choice) ? choice : {};
  const message = isObject(c.message) ? c.message : {};
  const content: Record<string, unknown>[] = [];
  if (typeof message.content === 'string' && message.content !== '')
    content.push({ type: 'text', text: message.content });
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : [];
  for (const call of calls) {
    const fn = isObject(call.function) ? call.function : {};
    content.push({
      type: 'tool_use',
      id: toolUseId(String(call.id ?? '')),
      name: String(fn.name ?? ''),
      input: inputOf(fn.arguments),
    });
  }
  return {
    id,
    type: 'message',
    role: 'assistant',
    model: completion.model,
    content,
    ...stopReasonOf(c.finish_reason, c.stop_reason, calls.length > 0),
    usage: usageOf(completion.usage),
  };
}

export const bodyText = (body: string | Uint8Array | null): string =>
  body === null ? '' : typeof body === 'string' ? body : Buffer.from(body).toString('utf8');

/** The chat path's error answer (OpenAI's shape, or an engine's text) in Anthropic's. */
export function errorOf(answer: Answer): Answer {
  const text = bodyText(answer.body as string | Uint8Array | null);
  let message = text;
  try {
    const parsed: unknown = JSON.parse(text);
    if (isObject(parsed) && isObject(parsed.error) && typeof parsed.error.message === 'string')
      message = parsed.error.message;
  } catch {
    // not JSON: the text is the message
  }
  return anthropicError(answer.status, message || `the call failed with status ${answer.status}`);
}
