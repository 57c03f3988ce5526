import { randomBytes } from 'node:crypto';
import { isObject } from './call-request.js';
import type { ResponsesBody } from './responses-request.js';

/*
 * What a Responses call answers, built from the chat answer the gateway captured: the response
 * object and its output items (a message with output_text, function_call items, a reasoning item
 * for the reasoning the engine split off), as the official openai SDK types them.
 */

export type OutputItem = Record<string, unknown> & { type: string };

/** A response id: 192 random bits, as unguessable as a trajectory id. */
export const newResponseId = (): string => `resp_${randomBytes(24).toString('hex')}`;
export const newItemId = (prefix: 'msg' | 'fc' | 'rs'): string =>
  `${prefix}_${randomBytes(12).toString('hex')}`;

/** The call a response answers: its id, when it began, and the request. */
export interface ResponseFrame {
  id: string;
  createdAt: number;
  request: ResponsesBody;
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete' | 'failed';

/** The chat usage as Responses counts it. */
export function usageOf(usage: unknown): Record<string, unknown> | null {
  if (!isObject(usage)) return null;
  const input = typeof usage.prompt_tokens === 'number' ? usage.prompt_tokens : 0;
  const output = typeof usage.completion_tokens === 'number' ? usage.completion_tokens : 0;
  const details = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  return {
    input_tokens: input,
    input_tokens_details: {
      cached_tokens: typeof details.cached_tokens === 'number' ? details.cached_tokens : 0,
    },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: input + output,
  };
}

/** The response object: the request's settings echoed, as OpenAI's API answers them. */
export function responseObject(
  frame: ResponseFrame,
  status: ResponseStatus,
  output: OutputItem[],
  usage: Record<string, unknown> | null,
  error: { code: string; message: string } | null = null,
): Record<string, unknown> {
  const r = frame.request;
  return {
    id: frame.id,
    object: 'response',
    created_at: frame.createdAt,
    status,
    ...(status === 'completed' || status === 'incomplete'
      ? { completed_at: Math.floor(Date.now() / 1000) }
      : {}),
    error,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    metadata: r.metadata ?? {},
    model: r.model ?? '',
    output,
    parallel_tool_calls: r.parallel_tool_calls ?? true,
    previous_response_id: r.previous_response_id ?? null,
    reasoning: { effort: null, summary: null },
    store: r.store !== false,
    temperature: r.temperature ?? null,
    text: { format: r.text?.format ?? { type: 'text' } },
    tool_choice: r.tool_choice ?? 'auto',
    tools: r.tools ?? [],
    top_p: r.top_p ?? null,
    truncation: 'disabled',
    usage,
  };
}

export const messageItem = (
  id: string,
  text: string,
  status: 'in_progress' | 'completed' | 'incomplete',
) => ({
  id,
  type: 'message',
  status,
  role: 'assistant',
  content: status === 'in_progress' ? [] : [outputText(text)],
});

export const outputText = (text: string) => ({ type: 'output_text', text, annotations: [], logprobs: [] });

export const functionCallItem = (
  id: string,
  call: { callId: string; name: string; arguments: string },
  status: 'in_progress' | 'completed' | 'incomplete',
) => ({
  id,
  type: 'function_call',
  status,
  arguments: call.arguments,
  call_id: call.callId,
  name: call.name,
});

export const reasoningItem = (id: string, text: string | null) => ({
  id,
  type: 'reasoning',
  summary: [],
  content: text === null ? [] : [{ type: 'reasoning_text', text }],
});

/** The status of a response whose chat answer finished for `finishReason`. */
export const finishedStatus = (finishReason: unknown): 'completed' | 'incomplete' =>
  finishReason === 'length' ? 'incomplete' : 'completed';

/** A whole chat completion as a response object. */
export function wholeResponse(
  frame: ResponseFrame,
  completion: Record<string, unknown>,
): Record<string, unknown> {
  const choice = (completion.choices as unknown[])[0];
  const message = isObject(choice) && isObject(choice.message) ? choice.message : {};
  const status = finishedStatus(isObject(choice) ? choice.finish_reason : null);
  const output: OutputItem[] = [];
  const reasoning = message.reasoning_content ?? message.reasoning;
  if (typeof reasoning === 'string' && reasoning !== '')
    output.push(reasoningItem(newItemId('rs'), reasoning));
  const calls = Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : [];
  const text = typeof message.content === 'string' ? message.content : '';
  // A turn that only calls tools has no message item; one with neither still answers a message.
  if (text !== '' || calls.length === 0) output.push(messageItem(newItemId('msg'), text, status));
  for (const c of calls) {
    const fn = isObject(c.function) ? c.function : {};
    output.push(
      functionCallItem(
        newItemId('fc'),
        {
          callId: typeof c.id === 'string' ? c.id : '',
          name: typeof fn.name === 'string' ? fn.name : '',
          arguments: typeof fn.arguments === 'string' ? fn.arguments : '',
        },
        status,
      ),
    );
  }
  return responseObject(frame, status, output, usageOf(completion.usage));
}
