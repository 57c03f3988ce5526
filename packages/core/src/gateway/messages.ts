import { type Answer, isStreamSource, JSON_HEADERS } from './answer.js';
import { bodyText, errorOf, messageOf, newMessageId } from './messages-answer.js';
import { messageEvents } from './messages-stream.js';

/*
 * A Messages API call's answer: the chat path's answer (whole, streamed or an error) in Anthropic's
 * shape. Its request was translated to chat on the way in (messages-request.ts), and the chat path
 * stored its step before any of this reaches the agent. docs/gateway.md#anthropic-messages-api
 */

/** The chat path's answer to a Messages API call, in the Messages API's shape; `model` as asked. */
export function messageAnswer(answer: Answer, model: unknown, id: string = newMessageId()): Answer {
  const { status, body } = answer;
  if (isStreamSource(body)) return { status, headers: answer.headers, body: messageEvents(body, id, model) };
  // The agent went away: nobody reads it.
  if (body === null) return answer;
  if (status !== 200) return errorOf(answer);
  const completion = JSON.parse(bodyText(body)) as Record<string, unknown>;
  return { status, headers: JSON_HEADERS, body: JSON.stringify(messageOf(completion, id)) };
}
