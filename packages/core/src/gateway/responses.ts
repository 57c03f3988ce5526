import { StepwiseError } from '../domain/index.js';
import { type Answer, isStreamSource, JSON_HEADERS } from './answer.js';
import { checkCallRequest } from './call-request.js';
import type { CallOrigin } from './call-trace.js';
import type { Gateway } from './gateway.js';
import { newResponseId, type OutputItem, type ResponseFrame, wholeResponse } from './responses-output.js';
import { type ChatMessage, chatMessagesOf, chatRequestOf, type ResponsesBody } from './responses-request.js';
import { responseEvents } from './responses-stream.js';
import type { Session } from './session.js';

/*
 * A Responses API call (`POST …/v1/responses`): translated into a chat request, which goes down the
 * chat path (Gateway.call: the same engines, capture and commit before the answer), and the chat
 * answer translated back. docs/gateway.md#responses-api
 */

/** A previous_response_id this trajectory has not kept: unknown, another trajectory's, or not stored. */
class PreviousResponseNotFound extends StepwiseError {
  constructor(id: string) {
    super(
      `previous_response_id: no response ${JSON.stringify(id)} is kept for this trajectory (responses with store: false, of other trajectories or of another gateway process are not; send the whole input instead)`,
      404,
      'previous_response_not_found',
      'previous_response_id',
    );
  }
}

/**
 * Answers one Responses call of `session`. `request` was checked (checkResponsesRequest); `size` is
 * its text's length, what keeping its conversation is reckoned to cost.
 */
export async function responsesCall(
  gateway: Gateway,
  session: Session,
  request: ResponsesBody,
  signal: AbortSignal,
  size: number,
  origin?: CallOrigin,
): Promise<Answer> {
  let history: readonly ChatMessage[] = [];
  if (request.previous_response_id != null) {
    const kept = gateway.responseStore.get(session.id, request.previous_response_id);
    if (kept === null) throw new PreviousResponseNotFound(request.previous_response_id);
    history = kept;
  }
  const { chat, conversation } = chatRequestOf(request, history);
  const frame: ResponseFrame = { id: newResponseId(), createdAt: Math.floor(Date.now() / 1000), request };
  const keep = (output: OutputItem[]) => {
    if (request.store === false) return;
    const messages = [...conversation, ...chatMessagesOf(output, 'output')];
    gateway.responseStore.put(session.id, frame.id, messages, size + JSON.stringify(output).length);
  };
  // The translation is checked as chat: it carries the agent's sampling fields on.
  const answer = await gateway.call(session, 'chat', checkCallRequest('chat', chat), signal, null, origin);
  // An error (already in OpenAI's shape) or an agent gone: as the chat call answered it.
  if (answer.status !== 200) return answer;
  const { body } = answer;
  if (isStreamSource(body)) return { ...answer, body: responseEvents(frame, body, keep) };
  const text = typeof body === 'string' ? body : Buffer.from(body ?? new Uint8Array()).toString('utf8');
  // forwardWhole answered only a completion with choices; its step is stored.
  const response = wholeResponse(frame, JSON.parse(text) as Record<string, unknown>);
  keep(response.output as OutputItem[]);
  return { status: 200, headers: JSON_HEADERS, body: JSON.stringify(response) };
}
