import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../domain/errors.js';
import { type ChatTokenizer, loadQwen3Tokenizer } from './tokenizer.js';
import { toTemplateJson } from './tool-calls.js';

/**
 * OpenAI message content: a string, null, or parts. Text and refusal parts render (as vLLM renders
 * them); any other part (an image) is refused when rendered, naming it.
 */
export type ChatContent =
  | string
  | null
  | readonly ({ type: 'text'; text: string } | { type: 'refusal'; refusal: string } | { type: string })[];

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/**
 * Content flattened to the string a template concatenates. Text parts are joined with "\n" as vLLM
 * does, so a retokenized prompt matches what a vLLM upstream saw.
 */
const MessageContent = z.custom<ChatContent | undefined>().transform((value: unknown, ctx): string => {
  if (value == null) return '';
  if (typeof value === 'string') return value;
  if (!Array.isArray(value)) {
    ctx.issues.push({
      code: 'custom',
      message: 'must be a string, null or an array of text parts',
      input: value,
    });
    return z.NEVER;
  }
  const texts: string[] = [];
  for (let i = 0; i < value.length; i++) {
    const part: unknown = value[i];
    if (isPlainObject(part) && part.type === 'text' && typeof part.text === 'string') {
      texts.push(part.text);
      continue;
    }
    if (isPlainObject(part) && part.type === 'refusal' && typeof part.refusal === 'string') {
      texts.push(part.refusal);
      continue;
    }
    const type = isPlainObject(part) ? part.type : undefined;
    const message =
      isPlainObject(part) && type === 'text'
        ? 'a text part must have a string "text"'
        : `only text parts are supported, got ${JSON.stringify(type ?? null)}`;
    ctx.issues.push({ code: 'custom', message, input: part, path: [i] });
    return z.NEVER;
  }
  return texts.join('\n');
});

const ToolCallArguments = z
  .custom<string | Record<string, unknown>>()
  .refine((v) => typeof v === 'string' || isPlainObject(v), 'must be a JSON string or an object');

export const ChatToolCall = z.looseObject({
  id: z.string().optional(),
  type: z.literal('function').optional(),
  function: z.looseObject({
    name: z.string().min(1, 'must not be empty'),
    arguments: ToolCallArguments,
  }),
});

/**
 * One OpenAI-format chat message, as agents send it; vendor extras are accepted and ignored. The output
 * is the template's view (content flattened to a string): store what the agent sent, not this.
 */
export const ChatMessage = z.looseObject({
  // A developer message is rendered as a system one: the templates here have no developer role.
  role: z.enum(['system', 'developer', 'user', 'assistant', 'tool'], {
    error: 'must be one of system, developer, user, assistant, tool',
  }),
  // Absent with tool calls only (OpenAI's spec; Python's `model_dump(exclude_none=True)` sends that).
  content: MessageContent.optional(),
  tool_calls: z.array(ChatToolCall).nullable().optional(),
  // vLLM calls the field reasoning_content; newer servers call it reasoning.
  reasoning_content: z.string().nullable().optional(),
  reasoning: z.string().nullable().optional(),
  tool_call_id: z.string().nullish(),
  name: z.string().optional(),
});
export type ChatMessageInput = z.input<typeof ChatMessage>;

export const ChatTool = z.looseObject({
  type: z.literal('function'),
  function: z.looseObject({ name: z.string().min(1, 'must not be empty') }),
});
export type ChatToolInput = z.input<typeof ChatTool>;

const RenderChatRequest = z.object({
  messages: z.array(ChatMessage).min(1, 'must contain at least one message'),
  tools: z.array(ChatTool).nullable().optional(),
});

export interface RenderChatInput {
  messages: readonly ChatMessageInput[];
  tools?: readonly ChatToolInput[] | null;
  addGenerationPrompt?: boolean;
  /**
   * The last message (an assistant's) stays open for the model to continue: vLLM's and Hugging Face's
   * `continue_final_message`. The text ends where that message's content ends, with no end-of-turn.
   */
  continueFinalMessage?: boolean;
  /** Qwen3: `false` pre-fills an empty `<think>` block after the generation prompt. */
  enableThinking?: boolean;
}

/**
 * The template formats arguments with `tojson` when they are an object and pastes a string verbatim;
 * parse the OpenAI JSON string so the text matches what the model was trained on (and what vLLM renders).
 * A string that is not a JSON object is pasted as it came: it is what the model produced.
 */
function templateArguments(args: string | Record<string, unknown>): unknown {
  if (typeof args !== 'string') return args;
  try {
    const parsed: unknown = JSON.parse(args);
    return isPlainObject(parsed) ? parsed : args;
  } catch {
    return args;
  }
}

/** How a family's template expects a message: tool-call arguments as an object (most) or the JSON string. */
export interface TemplateStyle {
  argumentsAs?: 'object' | 'string';
  /** An assistant message with tool calls and no text: `''` (most templates) or none (DeepSeek's tests `is none`). */
  emptyCallContentAs?: 'string' | 'none';
  /**
   * Also hand a tool result that parses as JSON to the template parsed, as `content_json`: Mistral's
   * v3 encoder writes such a result as JSON, and a template cannot parse it. `content` stays the text.
   */
  toolContentJson?: boolean;
}

/** The tool result parsed, when it is JSON; undefined otherwise. */
function parsedToolContent(content: string): { value: unknown } | undefined {
  try {
    return { value: JSON.parse(content) };
  } catch {
    return undefined;
  }
}

function templateMessage(m: z.output<typeof ChatMessage>, style: TemplateStyle): Record<string, unknown> {
  const text = m.content ?? '';
  const callsWithoutText = text === '' && m.tool_calls != null && m.tool_calls.length > 0;
  const content = callsWithoutText && style.emptyCallContentAs === 'none' ? null : text;
  const out: Record<string, unknown> = { role: m.role === 'developer' ? 'system' : m.role, content };
  if (m.role === 'tool' && style.toolContentJson && content !== null) {
    const parsed = parsedToolContent(content);
    if (parsed) out.content_json = parsed.value;
  }
  // The template tests `is defined and is not none`, so absent and null must both stay absent.
  const reasoning = m.reasoning_content ?? m.reasoning;
  if (reasoning != null) out.reasoning_content = reasoning;
  // Templates that pair a tool result with its call (harmony, Mistral) read these two.
  if (m.role === 'tool' && m.tool_call_id != null) out.tool_call_id = m.tool_call_id;
  if (m.role === 'tool' && m.name !== undefined) out.name = m.name;
  if (m.tool_calls && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((c) => ({
      ...(c.id !== undefined ? { id: c.id } : {}),
      type: 'function',
      function: {
        name: c.function.name,
        arguments:
          style.argumentsAs === 'string'
            ? typeof c.function.arguments === 'string'
              ? c.function.arguments
              : toTemplateJson(c.function.arguments)
            : templateArguments(c.function.arguments),
      },
    }));
  }
  return out;
}

/**
 * Renders OpenAI-format messages (and tools) with the tokenizer's chat template (Qwen3's by default).
 * Throws a ValidationError naming the field when a message cannot be rendered.
 */
/**
 * The messages and tools exactly as the template sees them (content flattened, arguments in the
 * family's form): what a reference renderer must be given to render the same conversation.
 */
export function templateContext(
  input: Pick<RenderChatInput, 'messages' | 'tools'>,
  style: TemplateStyle = {},
): { messages: Record<string, unknown>[]; tools?: readonly ChatToolInput[] } {
  const request = parseOrThrow(RenderChatRequest, { messages: input.messages, tools: input.tools });
  // Tools go to the template as given: zod's copy would reorder keys, and `tojson` keeps key order.
  const tools = request.tools && request.tools.length > 0 ? input.tools! : undefined;
  const messages = request.messages.map((m) => templateMessage(m, style));
  return tools ? { messages, tools } : { messages };
}

export function renderChat(
  input: RenderChatInput,
  tokenizer: ChatTokenizer = loadQwen3Tokenizer(),
  style: TemplateStyle = {},
): string {
  const { messages, tools } = templateContext(input, style);
  const last = messages[messages.length - 1]!;
  if (input.continueFinalMessage) {
    if (input.addGenerationPrompt)
      throw new ValidationError(
        'continue_final_message and add_generation_prompt cannot both be set (continue the last message, or open a new turn)',
        'continue_final_message',
      );
    if (last.role !== 'assistant')
      throw new ValidationError(
        `continue_final_message: the last message must be the assistant's to continue, got ${String(last.role)}`,
        'continue_final_message',
      );
    // As Hugging Face does: mark where the content ends, render, and cut there.
    last.content = `${last.content as string}${CONTINUE_TAG}`;
  }
  // As transformers does: a model that ships a `tool_use` template uses it when tools are given.
  const template = (tools && tokenizer.namedChatTemplate?.('tool_use')) || tokenizer.chatTemplate;
  const text = template.render({
    messages,
    ...(tools ? { tools } : {}),
    add_generation_prompt: input.addGenerationPrompt ?? false,
    // `enable_thinking is defined` is part of the template's test: leave it undefined unless set.
    ...(input.enableThinking !== undefined ? { enable_thinking: input.enableThinking } : {}),
  });
  if (!input.continueFinalMessage) return text;
  const at = text.lastIndexOf(CONTINUE_TAG.trim());
  if (at < 0)
    throw new ValidationError(
      'continue_final_message: the chat template dropped the final message, so it cannot be continued',
      'continue_final_message',
    );
  // A template that trims the content trimmed the tag's space too: trim what precedes it likewise.
  return text.startsWith(CONTINUE_TAG, at) ? text.slice(0, at) : text.slice(0, at).trimEnd();
}

/** The marker placed after the continued message's content (Hugging Face's own, so cuts agree). */
const CONTINUE_TAG = 'CONTINUE_FINAL_MESSAGE_TAG ';

/** Token ids of the rendered chat; the template already wrote every control token, so none are added. */
export function tokenizeChat(
  input: RenderChatInput,
  tokenizer: ChatTokenizer = loadQwen3Tokenizer(),
  style: TemplateStyle = {},
): number[] {
  return tokenizer.encode(renderChat(input, tokenizer, style), { addSpecialTokens: false });
}
