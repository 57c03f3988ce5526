import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../domain/index.js';
import { isObject } from './call-request.js';
import { REPORTED_ERROR } from './tool-results.js';

/*
 * Anthropic's Messages API request (`POST /v1/messages`, what Claude Code and the Anthropic SDKs send)
 * translated to the chat request the gateway forwards and captures: one engine path and one capture
 * for both APIs. Text models only: image and document blocks are refused, thinking is dropped.
 * docs/gateway.md#anthropic-messages-api
 */

/** Prefix of the tool_use ids the agent sees; the engine's own call id follows it. */
export const TOOL_USE_PREFIX = 'toolu_';

/** The engine's call id as the agent sees it in a tool_use block. */
export const toolUseId = (engineId: string): string => `${TOOL_USE_PREFIX}${engineId}`;

/** The engine's call id a tool_use id (or tool_result's tool_use_id) stands for. */
const engineCallId = (id: string): string =>
  id.startsWith(TOOL_USE_PREFIX) ? id.slice(TOOL_USE_PREFIX.length) : id;

const TextBlock = z.looseObject({ type: z.literal('text'), text: z.string() });

const CustomTool = z.looseObject({
  // Anthropic's server tools (web search, code execution, ...) run on Anthropic's side; none here.
  type: z
    .literal('custom', {
      error:
        "only custom tools (name, description, input_schema) are served here, not Anthropic's server tools",
    })
    .nullish(),
  name: z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters'),
  description: z.string().nullish(),
  input_schema: z.looseObject({}),
  defer_loading: z.boolean().nullish(),
});

const ParallelOption = { disable_parallel_tool_use: z.boolean().nullish() };
const ToolChoice = z.discriminatedUnion(
  'type',
  [
    z.looseObject({ type: z.literal('auto'), ...ParallelOption }),
    z.looseObject({ type: z.literal('any'), ...ParallelOption }),
    z.looseObject({
      type: z.literal('tool'),
      name: z.string().min(1, 'must not be empty'),
      ...ParallelOption,
    }),
    z.looseObject({ type: z.literal('none') }),
  ],
  { error: 'must be {"type": "auto" | "any" | "tool" | "none"}' },
);

const Message = z.looseObject({
  role: z.enum(['user', 'assistant', 'system'], { error: 'must be one of user, assistant, system' }),
  content: z.union([z.string(), z.array(z.looseObject({ type: z.string() }))], {
    error: 'must be a string or an array of content blocks',
  }),
});

/** The fields the gateway reads; others (cache_control, service_tier, ...) are accepted and ignored. */
export const MessagesRequest = z.looseObject({
  model: z.string().min(1, 'must not be empty').max(256, 'must be at most 256 characters'),
  max_tokens: z
    .number({ error: 'required: the most tokens to generate, an integer of at least 1' })
    .int('must be an integer')
    .min(1, 'must be at least 1'),
  messages: z.array(Message).min(1, 'must contain at least one message'),
  system: z.union([z.string(), z.array(TextBlock)], { error: 'must be a string or text blocks' }).nullish(),
  tools: z.array(CustomTool).nullish(),
  tool_choice: ToolChoice.nullish(),
  temperature: z.number().nullish(),
  top_p: z.number().nullish(),
  top_k: z.number().int('must be an integer').nullish(),
  stop_sequences: z.array(z.string()).nullish(),
  stream: z.boolean().nullish(),
  metadata: z.looseObject({ user_id: z.string().max(512).nullish() }).nullish(),
});
export type MessagesRequest = z.infer<typeof MessagesRequest>;

/** Text blocks as chat content: one block's text as a string, several as text parts. */
function textContent(texts: readonly string[]): string | { type: 'text'; text: string }[] {
  return texts.length === 1 ? texts[0]! : texts.map((text) => ({ type: 'text' as const, text }));
}

/** A refused block names itself (`messages.2.content.0.type`) and says why. */
function unsupported(type: string, at: string): ValidationError {
  const why =
    type === 'image' || type === 'document' || type === 'search_result'
      ? `${type} blocks are not supported: the gateway serves text models and captures their tokens`
      : `"${type}" blocks are not supported in this turn`;
  return new ValidationError(`${at}.type: ${why}`, `${at}.type`);
}

/** A text block's text, or a 400 naming the block. */
function textOf(block: Record<string, unknown>, at: string): string {
  if (typeof block.text !== 'string') throw new ValidationError(`${at}.text: must be a string`, `${at}.text`);
  return block.text;
}

/** A tool_result's content as chat tool content: a string, or its text blocks. */
function toolResultContent(content: unknown, at: string): string | { type: 'text'; text: string }[] {
  if (content === undefined || content === null) return '';
  if (typeof content === 'string') return content;
  if (!Array.isArray(content))
    throw new ValidationError(`${at}: must be a string or an array of text blocks`, at);
  const texts = content.map((block, k) => {
    if (!isObject(block) || block.type !== 'text') throw unsupported(String(block?.type), `${at}.${k}`);
    return textOf(block, `${at}.${k}`);
  });
  return texts.length === 0 ? '' : textContent(texts);
}

/** An assistant turn: its text, then its tool_use blocks as tool calls (thinking blocks dropped). */
function assistantMessage(blocks: readonly Record<string, unknown>[], at: string): Record<string, unknown> {
  const texts: string[] = [];
  const calls: Record<string, unknown>[] = [];
  blocks.forEach((block, j) => {
    const where = `${at}.${j}`;
    if (block.type === 'text') texts.push(textOf(block, where));
    else if (block.type === 'tool_use') {
      if (typeof block.id !== 'string' || block.id === '')
        throw new ValidationError(`${where}.id: must be a non-empty string`, `${where}.id`);
      if (typeof block.name !== 'string' || block.name === '')
        throw new ValidationError(`${where}.name: must be a non-empty string`, `${where}.name`);
      if (!isObject(block.input))
        throw new ValidationError(`${where}.input: must be an object`, `${where}.input`);
      calls.push({
        id: engineCallId(block.id),
        type: 'function',
        function: { name: block.name, arguments: JSON.stringify(block.input) },
      });
      // The gateway never answers thinking blocks (docs); ones from elsewhere are no part of this model's turn.
    } else if (block.type !== 'thinking' && block.type !== 'redacted_thinking')
      throw unsupported(block.type as string, where);
  });
  return {
    role: 'assistant',
    content: texts.length === 0 ? null : textContent(texts),
    ...(calls.length > 0 ? { tool_calls: calls } : {}),
  };
}

/**
 * A user turn: each tool_result block becomes a `tool` message (as an OpenAI agent sends them, so
 * tool results reach their step the one way), the text blocks between them user messages.
 */
function userMessages(blocks: readonly Record<string, unknown>[], at: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  let texts: string[] = [];
  const flush = () => {
    if (texts.length > 0) out.push({ role: 'user', content: textContent(texts) });
    texts = [];
  };
  blocks.forEach((block, j) => {
    const where = `${at}.${j}`;
    if (block.type === 'text') texts.push(textOf(block, where));
    else if (block.type === 'tool_result') {
      if (typeof block.tool_use_id !== 'string' || block.tool_use_id === '')
        throw new ValidationError(`${where}.tool_use_id: must be a non-empty string`, `${where}.tool_use_id`);
      if (block.is_error !== undefined && block.is_error !== null && typeof block.is_error !== 'boolean')
        throw new ValidationError(`${where}.is_error: must be a boolean`, `${where}.is_error`);
      flush();
      const message: Record<string | symbol, unknown> = {
        role: 'tool',
        tool_call_id: engineCallId(block.tool_use_id),
        content: toolResultContent(block.content, `${where}.content`),
      };
      // Out of the JSON the engine and the store see (a symbol key); tool-results.ts reads it.
      if (block.is_error === true) message[REPORTED_ERROR] = true;
      out.push(message);
    } else throw unsupported(block.type as string, where);
  });
  flush();
  return out;
}

/** The chat messages of a request: its system prompt, then each turn translated. */
function chatMessages(request: MessagesRequest): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  const { system } = request;
  if (typeof system === 'string') out.push({ role: 'system', content: system });
  else if (system && system.length > 0)
    out.push({ role: 'system', content: textContent(system.map((b) => b.text)) });
  request.messages.forEach((message, i) => {
    const at = `messages.${i}.content`;
    const { role, content } = message;
    if (typeof content === 'string') out.push({ role, content });
    else if (role === 'assistant') out.push(assistantMessage(content, at));
    else if (role === 'user') out.push(...userMessages(content, at));
    else {
      const texts = content.map((block, j) => {
        if (block.type !== 'text') throw unsupported(block.type, `${at}.${j}`);
        return textOf(block, `${at}.${j}`);
      });
      out.push({ role, content: textContent(texts) });
    }
  });
  return out;
}

function toolChoiceOf(choice: NonNullable<MessagesRequest['tool_choice']>): unknown {
  switch (choice.type) {
    case 'auto':
      return 'auto';
    case 'any':
      return 'required';
    case 'none':
      return 'none';
    case 'tool':
      return { type: 'function', function: { name: choice.name } };
  }
}

/**
 * The chat request a Messages API body makes; a 400 naming the field for one the gateway cannot
 * serve. Sampling options keep their names (`stop_sequences` is `stop`), `metadata.user_id` is
 * `user`; a last assistant turn is continued (Anthropic's prefill), not answered.
 */
export function chatRequestOf(body: unknown): Record<string, unknown> {
  const request = parseOrThrow(MessagesRequest, body);
  const messages = chatMessages(request);
  const chat: Record<string, unknown> = { model: request.model, messages, max_tokens: request.max_tokens };
  // A deferred tool reaches Anthropic's model only once a tool search finds it (not served here);
  // Claude Code sends a placeholder one with every request.
  const tools = request.tools?.filter((t) => t.defer_loading !== true) ?? [];
  if (tools.length > 0)
    chat.tools = tools.map((t) => ({
      type: 'function',
      function: {
        name: t.name,
        ...(typeof t.description === 'string' ? { description: t.description } : {}),
        parameters: t.input_schema,
      },
    }));
  const choice = request.tool_choice;
  if (choice) {
    chat.tool_choice = toolChoiceOf(choice);
    if (choice.type !== 'none' && choice.disable_parallel_tool_use === true) chat.parallel_tool_calls = false;
  }
  for (const field of ['temperature', 'top_p', 'top_k'] as const)
    if (request[field] !== undefined && request[field] !== null) chat[field] = request[field];
  if (request.stop_sequences && request.stop_sequences.length > 0) chat.stop = request.stop_sequences;
  if (request.stream === true) {
    chat.stream = true;
    // The usage chunk carries the counts of the closing message_delta.
    chat.stream_options = { include_usage: true };
  }
  const user = request.metadata?.user_id;
  if (typeof user === 'string' && user !== '') chat.user = user;
  const last = request.messages.at(-1)!;
  if (last.role === 'assistant') {
    chat.continue_final_message = true;
    chat.add_generation_prompt = false;
  }
  return chat;
}
