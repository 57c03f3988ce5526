import { parseOrThrow, ValidationError } from '../domain/index.js';
import { isObject } from './call-request.js';
import {
  type ContentPart,
  type FunctionTool,
  InputItem,
  RESPONSES_FIELDS,
  ResponsesRequest,
  type TextFormat,
} from './wire/openai-responses.js';

/*
 * OpenAI Responses API requests (`POST …/v1/responses`, what Codex CLI speaks), checked at the
 * boundary and translated into the chat request the gateway already forwards and captures: the
 * call then takes the chat path to the engine, and its step is a chat step like any other.
 * The wire schema, field by field, is wire/openai-responses.ts.
 */

/** A chat message as the chat path takes it (role system, user, assistant or tool). */
export type ChatMessage = Record<string, unknown> & { role: string };

/** A Responses request, checked against the spec (wire/openai-responses.ts); a bad or refused field is a 400 naming it. */
export function checkResponsesRequest(body: unknown): ResponsesBody {
  if (!isObject(body)) throw new ValidationError('body: must be a JSON object', 'body');
  return parseOrThrow(ResponsesRequest, body);
}
export type ResponsesBody = ResponsesRequest;

/** A message item's (or a tool output's) content as text: its text parts joined, as chat content is read. */
function contentText(content: string | readonly ContentPart[]): string {
  if (typeof content === 'string') return content;
  return content.map((part) => (part.type === 'refusal' ? part.refusal : part.text)).join('');
}

/**
 * Input items as chat messages: a message item is a message (developer is a system message, as
 * chat templates know no developer role); `function_call` items join the assistant turn before them
 * as its tool_calls (a turn's text and its calls are one chat message); `function_call_output` is a
 * tool message; a reasoning item's text becomes the next assistant turn's reasoning_content, as the
 * chat answer carried it. Other item types are a 400 naming them (wire/openai-responses.ts).
 */
export function chatMessagesOf(input: string | readonly unknown[], field = 'input'): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  const turns = new ChatTurns();
  input.forEach((item, i) => {
    turns.add(parseOrThrow(InputItem, item, `${field}.${i}`));
  });
  return turns.messages;
}

/** The chat messages input items make, built item by item. */
class ChatTurns {
  readonly messages: ChatMessage[] = [];
  /** A reasoning item's text, for the assistant turn after it. */
  private reasoning: string | null = null;

  add(item: InputItem): void {
    switch (item.type) {
      case 'message': {
        const message: ChatMessage = {
          role: item.role === 'developer' ? 'system' : item.role,
          content: contentText(item.content),
        };
        if (item.role === 'assistant') this.takeReasoning(message);
        this.messages.push(message);
        return;
      }
      case 'function_call': {
        const turn = this.openTurn();
        turn.tool_calls ??= [];
        (turn.tool_calls as unknown[]).push({
          id: item.call_id,
          type: 'function',
          function: { name: item.name, arguments: item.arguments },
        });
        return;
      }
      case 'function_call_output':
        this.messages.push({ role: 'tool', tool_call_id: item.call_id, content: contentText(item.output) });
        return;
      case 'reasoning': {
        // Summaries and encrypted content are another model's; only the generated text is the turn's.
        const text = (item.content ?? []).map((p) => p.text).join('');
        if (text !== '') this.reasoning = text;
      }
    }
  }

  /** The assistant message the next function_call joins: the last message, while it is the assistant's. */
  private openTurn(): ChatMessage {
    const last = this.messages.at(-1);
    if (last?.role === 'assistant') return last;
    const turn: ChatMessage = { role: 'assistant', content: '' };
    this.takeReasoning(turn);
    this.messages.push(turn);
    return turn;
  }

  private takeReasoning(turn: ChatMessage): void {
    if (this.reasoning !== null) turn.reasoning_content = this.reasoning;
    this.reasoning = null;
  }
}

/**
 * The chat request of a Responses call: `history` (a stored response's conversation) and the input
 * after it, `instructions` first as a system message (never carried over from a previous response,
 * as OpenAI's API does), tools in chat's nested shape, `max_output_tokens` as `max_tokens`. Fields
 * the Responses API does not define (`seed`, `top_k`, `chat_template_kwargs`, …) go on to the
 * engine, as on chat/completions. Also the conversation to keep: everything but the instructions.
 */
export function chatRequestOf(
  body: ResponsesBody,
  history: readonly ChatMessage[],
): { chat: Record<string, unknown>; conversation: ChatMessage[] } {
  const conversation = [...history, ...(body.input == null ? [] : chatMessagesOf(body.input))];
  const messages: ChatMessage[] =
    body.instructions != null
      ? [{ role: 'system', content: body.instructions }, ...conversation]
      : conversation;
  if (messages.length === 0)
    throw new ValidationError('input: must hold at least one item (or name a previous_response_id)', 'input');
  const chat: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(body)) if (!RESPONSES_FIELDS.has(key)) chat[key] = value;
  if (body.model != null) chat.model = body.model;
  chat.messages = messages;
  if (body.tools != null && body.tools.length > 0) chat.tools = body.tools.map(chatTool);
  const choice = body.tool_choice;
  if (choice != null)
    chat.tool_choice =
      typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } };
  if (body.max_output_tokens != null) chat.max_tokens = body.max_output_tokens;
  if (body.temperature != null) chat.temperature = body.temperature;
  if (body.top_p != null) chat.top_p = body.top_p;
  if (body.parallel_tool_calls != null) chat.parallel_tool_calls = body.parallel_tool_calls;
  const format = responseFormatOf(body.text?.format);
  if (format) chat.response_format = format;
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk carries the token counts of the Responses `usage`.
    chat.stream_options = { include_usage: true };
  }
  return { chat, conversation };
}

/** A Responses function tool in chat's nested shape. */
function chatTool(t: FunctionTool): Record<string, unknown> {
  return {
    type: 'function',
    function: {
      name: t.name,
      ...(t.description != null ? { description: t.description } : {}),
      ...(t.parameters != null ? { parameters: t.parameters } : {}),
      ...(t.strict != null ? { strict: t.strict } : {}),
    },
  };
}

/** `text.format` as chat's `response_format` (plain text is chat's default: none). */
function responseFormatOf(format: TextFormat | null | undefined): Record<string, unknown> | null {
  if (format?.type === 'json_object') return { type: 'json_object' };
  if (format?.type !== 'json_schema') return null;
  const { name, schema, description, strict } = format;
  return {
    type: 'json_schema',
    json_schema: {
      name,
      schema,
      ...(description != null ? { description } : {}),
      ...(strict != null ? { strict } : {}),
    },
  };
}
