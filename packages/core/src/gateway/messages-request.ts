import { parseOrThrow, ValidationError } from '../domain/index.js';
import { REPORTED_ERROR } from './tool-results.js';
import {
  type ContentBlock,
  type CustomTool,
  MessagesRequest,
  type ToolChoice,
} from './wire/anthropic-messages.js';

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

type Block = ContentBlock;
type ChatContent = string | { type: 'text'; text: string }[];

/** Text blocks as chat content: one block's text as a string, several as text parts. */
function textContent(texts: readonly string[]): ChatContent {
  return texts.length === 1 ? texts[0]! : texts.map((text) => ({ type: 'text' as const, text }));
}

/** A block the spec allows elsewhere but not in this turn names itself (`messages.2.content.0.type`). */
function notInTurn(block: Block, role: string, at: string): ValidationError {
  return new ValidationError(
    `${at}.type: "${block.type}" blocks are not supported in a ${role} turn`,
    `${at}.type`,
  );
}

/** A tool_result's content as chat tool content: a string, or its text blocks. */
function toolResultContent(content: string | { text: string }[] | null | undefined): ChatContent {
  if (content == null) return '';
  if (typeof content === 'string') return content;
  return content.length === 0 ? '' : textContent(content.map((b) => b.text));
}

/** An assistant turn: its text, then its tool_use blocks as tool calls (thinking blocks dropped). */
function assistantMessage(blocks: readonly Block[], at: string): Record<string, unknown> {
  const texts: string[] = [];
  const calls: Record<string, unknown>[] = [];
  blocks.forEach((block, j) => {
    if (block.type === 'text') texts.push(block.text);
    else if (block.type === 'tool_use')
      calls.push({
        id: engineCallId(block.id),
        type: 'function',
        function: { name: block.name, arguments: JSON.stringify(block.input) },
      });
    // The gateway never answers thinking blocks (docs); ones from elsewhere are no part of this model's turn.
    else if (block.type !== 'thinking' && block.type !== 'redacted_thinking')
      throw notInTurn(block, 'assistant', `${at}.${j}`);
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
function userMessages(blocks: readonly Block[], at: string): Record<string, unknown>[] {
  const out: Record<string, unknown>[] = [];
  let texts: string[] = [];
  const flush = () => {
    if (texts.length > 0) out.push({ role: 'user', content: textContent(texts) });
    texts = [];
  };
  blocks.forEach((block, j) => {
    if (block.type === 'text') texts.push(block.text);
    else if (block.type === 'tool_result') {
      flush();
      const message: Record<string | symbol, unknown> = {
        role: 'tool',
        tool_call_id: engineCallId(block.tool_use_id),
        content: toolResultContent(block.content),
      };
      // Out of the JSON the engine and the store see (a symbol key); tool-results.ts reads it.
      if (block.is_error === true) message[REPORTED_ERROR] = true;
      out.push(message);
    } else throw notInTurn(block, 'user', `${at}.${j}`);
  });
  flush();
  return out;
}

/** A system turn: text blocks only. */
function systemMessage(blocks: readonly Block[], at: string): Record<string, unknown> {
  const texts = blocks.map((block, j) => {
    if (block.type !== 'text') throw notInTurn(block, 'system', `${at}.${j}`);
    return block.text;
  });
  return { role: 'system', content: textContent(texts) };
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
    else out.push(systemMessage(content, at));
  });
  return out;
}

function toolChoiceOf(choice: ToolChoice): unknown {
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
  if (tools.length > 0) chat.tools = tools.map(chatTool);
  const choice = request.tool_choice;
  if (choice) {
    chat.tool_choice = toolChoiceOf(choice);
    if (choice.type !== 'none' && choice.disable_parallel_tool_use === true) chat.parallel_tool_calls = false;
  }
  for (const field of ['temperature', 'top_p', 'top_k'] as const)
    if (request[field] !== undefined && request[field] !== null) chat[field] = request[field];
  if (request.stop_sequences && request.stop_sequences.length > 0) chat.stop = request.stop_sequences;
  const format = request.output_config?.format;
  if (format)
    chat.response_format = { type: 'json_schema', json_schema: { name: 'output', schema: format.schema } };
  if (request.stream === true) {
    chat.stream = true;
    // The usage chunk carries the counts of the closing message_delta.
    chat.stream_options = { include_usage: true };
  }
  const user = request.metadata?.user_id;
  if (typeof user === 'string' && user !== '') chat.user = user;
  if (request.messages.at(-1)!.role === 'assistant') {
    chat.continue_final_message = true;
    chat.add_generation_prompt = false;
  }
  return chat;
}

/** A custom tool in chat's shape: `input_schema` is the function's parameters. */
function chatTool(t: CustomTool): Record<string, unknown> {
  return {
    type: 'function',
    function: {
      name: t.name,
      ...(typeof t.description === 'string' ? { description: t.description } : {}),
      parameters: t.input_schema,
      ...(t.strict != null ? { strict: t.strict } : {}),
    },
  };
}
