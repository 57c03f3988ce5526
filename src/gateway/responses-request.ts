import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../domain/index.js';
import { isObject } from './call-request.js';

/*
 * OpenAI Responses API requests (`POST …/v1/responses`, what Codex CLI speaks), checked at the
 * boundary and translated into the chat request the gateway already forwards and captures: the
 * call then takes the chat path to the engine, and its step is a chat step like any other.
 * Wire shapes follow the official openai SDK's types (resources/responses/responses.d.ts).
 */

/** A chat message as the chat path takes it (role system, user, assistant or tool). */
export type ChatMessage = Record<string, unknown> & { role: string };

const Metadata = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, {
    message: 'at most 16 keys',
  });

const FunctionTool = z.looseObject({
  type: z.literal('function'),
  name: z.string().min(1, 'must not be empty').max(256),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const ToolChoice = z.union([
  z.enum(['none', 'auto', 'required']),
  z.looseObject({ type: z.literal('function'), name: z.string().min(1, 'must not be empty') }),
]);

const TextFormat = z.discriminatedUnion('type', [
  z.looseObject({ type: z.literal('text') }),
  z.looseObject({ type: z.literal('json_object') }),
  z.looseObject({
    type: z.literal('json_schema'),
    name: z.string().min(1).max(64),
    schema: z.record(z.string(), z.unknown()),
    description: z.string().nullish(),
    strict: z.boolean().nullish(),
  }),
]);

/** The fields of a Responses request the gateway reads; the others are forwarded as chat extras. */
const ResponsesBody = z.looseObject({
  model: z.string().max(256).nullish(),
  input: z
    .union([z.string(), z.array(z.unknown())], { error: 'must be a string or an array of items' })
    .nullish(),
  instructions: z.string().nullish(),
  tools: z.array(z.unknown()).nullish(),
  tool_choice: ToolChoice.nullish(),
  max_output_tokens: z.int().positive().nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  stream: z.boolean().nullish(),
  store: z.boolean().nullish(),
  previous_response_id: z.string().min(1).max(256).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  metadata: Metadata.nullish(),
  text: z.looseObject({ format: TextFormat.optional() }).nullish(),
});
export type ResponsesBody = z.output<typeof ResponsesBody>;

/** Responses fields with no chat counterpart that change nothing here: accepted and dropped. */
const IGNORED = new Set([
  'include',
  'reasoning',
  'truncation',
  'prompt_cache_key',
  'prompt_cache_retention',
  'prompt_cache_options',
  'safety_identifier',
  'service_tier',
  'stream_options',
  'user',
  'context_management',
  'moderation',
]);

/** Responses features the gateway does not offer: a 400 naming the field, rather than a silent difference. */
const REFUSED: Record<string, string> = {
  conversation:
    'conversations are not kept by this gateway: use previous_response_id, or send the whole input',
  prompt: 'stored prompt templates are not offered by this gateway: send input and instructions',
  top_logprobs:
    'top log-probs are not offered on the Responses API here (the step stores each token’s log-prob)',
  messages: 'not a Responses API field: send the conversation as input (or call chat/completions)',
};

/** Checks a Responses request; a bad or unsupported field is a 400 naming it. */
export function checkResponsesRequest(body: unknown): ResponsesBody {
  if (!isObject(body)) throw new ValidationError('body: must be a JSON object', 'body');
  for (const [field, why] of Object.entries(REFUSED)) {
    const value = body[field];
    // top_logprobs: 0 asks for nothing, and is accepted.
    if (value !== undefined && value !== null && !(field === 'top_logprobs' && value === 0))
      throw new ValidationError(`${field}: ${why}`, field);
  }
  if (body.background === true)
    throw new ValidationError(
      'background: background responses are not offered by this gateway',
      'background',
    );
  if (Array.isArray(body.tools))
    body.tools.forEach((tool, i) => {
      const type = isObject(tool) ? tool.type : undefined;
      if (type !== 'function')
        throw new ValidationError(
          `tools.${i}.type: only function tools are offered by this gateway (got ${JSON.stringify(type ?? null)})`,
          `tools.${i}.type`,
        );
    });
  return parseOrThrow(ResponsesBody, body);
}

const TextPart = z.looseObject({ type: z.enum(['input_text', 'output_text']), text: z.string() });
const RefusalPart = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });
const Content = z.union([z.string(), z.array(z.unknown())]);

const MessageItem = z.looseObject({
  type: z.literal('message').optional(),
  role: z.enum(['user', 'assistant', 'system', 'developer'], {
    error: 'must be one of user, assistant, system, developer',
  }),
  content: Content,
});
const FunctionCallItem = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1, 'must not be empty'),
  name: z.string().min(1, 'must not be empty'),
  arguments: z.string(),
});
const FunctionCallOutputItem = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1, 'must not be empty'),
  output: Content,
});
const ReasoningItem = z.looseObject({
  type: z.literal('reasoning'),
  content: z.array(z.looseObject({ text: z.string() })).nullish(),
});

/** A message item's (or a tool output's) content as text: its text parts joined, as chat content is read. */
function contentText(content: string | unknown[], path: string): string {
  if (typeof content === 'string') return content;
  let text = '';
  content.forEach((part, i) => {
    const at = `${path}.${i}`;
    const type = isObject(part) ? part.type : undefined;
    if (type === 'refusal') text += parseOrThrow(RefusalPart, part, at).refusal;
    else if (type === 'input_text' || type === 'output_text') text += parseOrThrow(TextPart, part, at).text;
    else
      throw new ValidationError(
        `${at}.type: only input_text, output_text and refusal parts are offered by this gateway (got ${JSON.stringify(type ?? null)})`,
        `${at}.type`,
      );
  });
  return text;
}

/**
 * Input items as chat messages: a message item is a message (developer is a system message, as
 * chat templates know no developer role); `function_call` items join the assistant turn before them
 * as its tool_calls (a turn's text and its calls are one chat message); `function_call_output` is a
 * tool message; a reasoning item's text becomes the next assistant turn's reasoning_content, as the
 * chat answer carried it. Other item types are a 400 naming them.
 */
export function chatMessagesOf(input: string | readonly unknown[], field = 'input'): ChatMessage[] {
  if (typeof input === 'string') return [{ role: 'user', content: input }];
  const out: ChatMessage[] = [];
  let reasoning: string | null = null;
  /** The assistant message the next function_call joins: the last message, while it is the assistant's. */
  const openTurn = (): ChatMessage => {
    const last = out.at(-1);
    if (last?.role === 'assistant') return last;
    const turn: ChatMessage = { role: 'assistant', content: '' };
    if (reasoning !== null) turn.reasoning_content = reasoning;
    reasoning = null;
    out.push(turn);
    return turn;
  };
  input.forEach((item, i) => {
    const at = `${field}.${i}`;
    const type = isObject(item) ? (item.type ?? 'message') : undefined;
    if (type === 'message') {
      const m = parseOrThrow(MessageItem, item, at);
      const message: ChatMessage = {
        role: m.role === 'developer' ? 'system' : m.role,
        content: contentText(m.content, `${at}.content`),
      };
      if (m.role === 'assistant' && reasoning !== null) {
        message.reasoning_content = reasoning;
        reasoning = null;
      }
      out.push(message);
    } else if (type === 'function_call') {
      const c = parseOrThrow(FunctionCallItem, item, at);
      const turn = openTurn();
      turn.tool_calls ??= [];
      (turn.tool_calls as unknown[]).push({
        id: c.call_id,
        type: 'function',
        function: { name: c.name, arguments: c.arguments },
      });
    } else if (type === 'function_call_output') {
      const o = parseOrThrow(FunctionCallOutputItem, item, at);
      out.push({ role: 'tool', tool_call_id: o.call_id, content: contentText(o.output, `${at}.output`) });
    } else if (type === 'reasoning') {
      const r = parseOrThrow(ReasoningItem, item, at);
      const text = (r.content ?? []).map((p) => p.text).join('');
      // Summaries and encrypted content are another model's; only the generated text is the turn's.
      if (text !== '') reasoning = text;
    } else {
      throw new ValidationError(
        `${at}.type: only message, function_call, function_call_output and reasoning items are offered by this gateway (got ${JSON.stringify(type ?? null)})`,
        `${at}.type`,
      );
    }
  });
  return out;
}

const READ = new Set([...Object.keys(ResponsesBody.shape), ...IGNORED, 'background']);

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
  for (const [key, value] of Object.entries(body)) if (!READ.has(key)) chat[key] = value;
  if (body.model != null) chat.model = body.model;
  chat.messages = messages;
  if (body.tools != null && body.tools.length > 0)
    chat.tools = body.tools.map((tool, i) => {
      const t = parseOrThrow(FunctionTool, tool, `tools.${i}`);
      return {
        type: 'function',
        function: {
          name: t.name,
          ...(t.description != null ? { description: t.description } : {}),
          ...(t.parameters != null ? { parameters: t.parameters } : {}),
          ...(t.strict != null ? { strict: t.strict } : {}),
        },
      };
    });
  const choice = body.tool_choice;
  if (choice != null)
    chat.tool_choice =
      typeof choice === 'string' ? choice : { type: 'function', function: { name: choice.name } };
  if (body.max_output_tokens != null) chat.max_tokens = body.max_output_tokens;
  if (body.temperature != null) chat.temperature = body.temperature;
  if (body.top_p != null) chat.top_p = body.top_p;
  if (body.parallel_tool_calls != null) chat.parallel_tool_calls = body.parallel_tool_calls;
  const format = body.text?.format;
  if (format?.type === 'json_object') chat.response_format = { type: 'json_object' };
  else if (format?.type === 'json_schema') {
    const { name, schema, description, strict } = format as z.output<typeof TextFormat> & {
      type: 'json_schema';
    };
    chat.response_format = {
      type: 'json_schema',
      json_schema: {
        name,
        schema,
        ...(description != null ? { description } : {}),
        ...(strict != null ? { strict } : {}),
      },
    };
  }
  if (body.stream === true) {
    chat.stream = true;
    // The usage chunk carries the token counts of the Responses `usage`.
    chat.stream_options = { include_usage: true };
  }
  return { chat, conversation };
}
