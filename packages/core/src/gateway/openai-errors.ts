import { BusyError, StepwiseError } from '../domain/errors.js';
import { type Answer, JSON_HEADERS } from './answer.js';

/** OpenAI's error body: what every OpenAI SDK turns into a typed exception. */
export interface OpenAIErrorBody {
  error: { message: string; type: string; param: string | null; code: string | null };
}

function errorType(status: number): string {
  if (status === 401) return 'authentication_error';
  if (status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 409) return 'conflict_error';
  if (status === 429) return 'rate_limit_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

export function openaiErrorBody(
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
): OpenAIErrorBody {
  return { error: { message, type: errorType(status), param, code } };
}

/** An answer in OpenAI's error shape. */
export function openaiError(
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
): Answer {
  return {
    status,
    headers: JSON_HEADERS,
    body: JSON.stringify(openaiErrorBody(status, message, param, code)),
  };
}

/** A JSON response in OpenAI's error shape. */
export function openaiErrorResponse(
  status: number,
  message: string,
  param: string | null = null,
  code: string | null = null,
): Response {
  return responseOf(openaiError(status, message, param, code));
}

/** Any thrown error as an OpenAI-style answer (unexpected ones as a bare 500). */
export function errorAnswer(error: unknown): Answer {
  if (error instanceof StepwiseError) {
    const answer = openaiError(error.status, error.message, error.field ?? null, error.code);
    // A busy answer says when to ask again (admission control's 429).
    if (error instanceof BusyError)
      return { ...answer, headers: { ...answer.headers, 'retry-after': String(error.retryAfterS) } };
    return answer;
  }
  return openaiError(500, 'internal error', null, 'internal');
}

/** Any thrown error as an OpenAI-style response (unexpected ones as a bare 500). */
export function toOpenAIError(error: unknown): Response {
  return responseOf(errorAnswer(error));
}

/** A whole (not streamed) answer as a fetch Response, for the routes on the app. */
const responseOf = (answer: Answer) =>
  new Response(answer.body as string, { status: answer.status, headers: answer.headers });

/**
 * An engine's error answer, as the agent should see it: kept when it already has OpenAI's shape,
 * wrapped (with the engine's text, shortened) when it does not.
 */
export function normalizeUpstreamError(
  status: number,
  text: string,
  engineId: string,
): { body: string; message: string } {
  try {
    const parsed = JSON.parse(text) as {
      error?: { message?: unknown } | string;
      message?: unknown;
      object?: unknown;
    };
    if (parsed && typeof parsed.error === 'object' && typeof parsed.error.message === 'string') {
      return { body: text, message: parsed.error.message };
    }
    // vLLM before 0.6 answered {"object": "error", "message": ..., "type": ..., "code": ...}.
    if (parsed && typeof parsed.message === 'string') {
      return {
        body: JSON.stringify(openaiErrorBody(status, parsed.message, null, 'upstream_error')),
        message: parsed.message,
      };
    }
  } catch {
    // not JSON
  }
  const snippet = text.length > 500 ? `${text.slice(0, 500)}…` : text;
  const message = `engine ${engineId} answered ${status}${snippet ? `: ${snippet}` : ''}`;
  return { body: JSON.stringify(openaiErrorBody(status, message, null, 'upstream_error')), message };
}
