import { z } from 'zod';
import { parseOrThrow, ValidationError } from '../../domain/index.js';
import { ResponseFormat, ToolChoice } from '../../engines/sim/controls.js';
import { boolean, integer, SamplingFields } from './sampling.js';

/*
 * OpenAI's chat/completions request as the wire carries it (openai-node's ChatCompletionCreateParams,
 * with vLLM's extras): what the spec accepts is accepted, typed, and forwarded as the agent sent it.
 * The gateway refuses only what it cannot capture as one step (`n > 1`, custom tools).
 * docs/gateway.md#protocols
 */

const TextPart = z.looseObject({ type: z.literal('text'), text: z.string() });
const RefusalPart = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });
const ImagePart = z.looseObject({
  type: z.literal('image_url'),
  image_url: z.looseObject({ url: z.string() }),
});
const AudioPart = z.looseObject({
  type: z.literal('input_audio'),
  input_audio: z.looseObject({ data: z.string(), format: z.string() }),
});
const FilePart = z.looseObject({ type: z.literal('file'), file: z.looseObject({}) });

const parts = <T extends readonly [z.core.$ZodTypeDiscriminable, ...z.core.$ZodTypeDiscriminable[]]>(
  options: T,
  names: string,
) => z.array(z.discriminatedUnion('type', options, { error: `must be a content part of type ${names}` }));

/** Instructions and tool results: a string or text parts. */
const TextContent = z.union([z.string(), parts([TextPart], 'text')], {
  error: 'must be a string or an array of text parts',
});

// Python's `model_dump()` of a received message sends each of these as null; `exclude_none` drops them.
const FunctionCall = z.looseObject({ name: z.string().min(1, 'must not be empty'), arguments: z.string() });

export const ChatToolCall = z.looseObject({
  id: z.string().optional(),
  type: z.literal('function', 'only function tool calls are served here').optional(),
  function: z.looseObject({
    name: z.string().min(1, 'must not be empty'),
    // The spec's is a JSON string; vLLM and chat templates also take the object.
    arguments: z.union([z.string(), z.record(z.string(), z.unknown())], {
      error: 'must be a JSON string or an object',
    }),
  }),
});
export type ChatToolCall = z.infer<typeof ChatToolCall>;

const name = z.string().optional();
const SystemMessage = z.looseObject({ role: z.literal('system'), content: TextContent, name });
const DeveloperMessage = z.looseObject({ role: z.literal('developer'), content: TextContent, name });
const UserMessage = z.looseObject({
  role: z.literal('user'),
  content: z.union(
    [z.string(), parts([TextPart, ImagePart, AudioPart, FilePart], 'text, image_url, input_audio or file')],
    { error: 'must be a string or an array of content parts' },
  ),
  name,
});
const AssistantMessage = z.looseObject({
  role: z.literal('assistant'),
  // Optional (or null) when the turn is tool calls only.
  content: z
    .union([z.string(), parts([TextPart, RefusalPart], 'text or refusal')], {
      error: 'must be a string, null or an array of text and refusal parts',
    })
    .nullish(),
  refusal: z.string().nullish(),
  name,
  audio: z.looseObject({ id: z.string() }).nullish(),
  tool_calls: z.array(ChatToolCall).nullish(),
  function_call: FunctionCall.nullish(),
  // vLLM's names for the reasoning of an earlier turn (interleaved thinking).
  reasoning_content: z.string().nullish(),
  reasoning: z.string().nullish(),
});
const ToolMessage = z.looseObject({
  role: z.literal('tool'),
  content: TextContent,
  // Optional, as vLLM's own message type has it: Claw-R1's raw-text agents answer calls that carry no id.
  tool_call_id: z.string('must be the id of the tool call this answers').nullish(),
});
/** Deprecated: the result of a legacy `function_call`. */
const FunctionMessage = z.looseObject({
  role: z.literal('function'),
  content: z.string().nullable(),
  name: z.string().min(1, 'must not be empty'),
});

export const ChatMessageParam = z.discriminatedUnion(
  'role',
  [SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage, FunctionMessage],
  { error: 'must be one of system, developer, user, assistant, tool, function' },
);
export type ChatMessageParam = z.infer<typeof ChatMessageParam>;

export const ChatTool = z.looseObject({
  type: z.literal('function', 'only function tools are served here (not custom tools)'),
  function: z.looseObject({
    name: z.string().min(1, 'must not be empty'),
    description: z.string().nullish(),
    parameters: z.record(z.string(), z.unknown(), 'must be a JSON Schema object').nullish(),
    strict: z.boolean().nullish(),
  }),
});
export type ChatTool = z.infer<typeof ChatTool>;

export const ChatCompletionRequest = z.looseObject({
  model: z.string('must be a string').nullish(),
  messages: z
    .array(ChatMessageParam, 'must be a non-empty array of messages')
    .min(1, 'must be a non-empty array of messages'),
  tools: z.array(ChatTool, 'must be an array of tools').nullish(),
  tool_choice: ToolChoice.nullish(),
  parallel_tool_calls: boolean,
  response_format: ResponseFormat.nullish(),
  ...SamplingFields,
  max_completion_tokens: integer,
  logprobs: boolean,
  top_logprobs: integer,
  n: z
    .literal(
      1,
      'only n=1 is supported (each choice would be its own step; send n separate requests, one trajectory each)',
    )
    .nullish(),
  stream: boolean,
  stream_options: z
    .looseObject({ include_usage: boolean, include_obfuscation: boolean }, 'must be an object')
    .nullish(),
  user: z.string('must be a string').nullish(),
  metadata: z.record(z.string(), z.string(), 'must be an object of strings').nullish(),
  store: boolean,
  reasoning_effort: z.string('must be a string').nullish(),
  // vLLM's: how the prompt is closed, and the template's switches.
  add_generation_prompt: boolean,
  continue_final_message: boolean,
  chat_template_kwargs: z.record(z.string(), z.unknown(), 'must be an object').nullish(),
});
export type ChatCompletionRequest = z.infer<typeof ChatCompletionRequest>;

/** The agent's chat request checked against the spec; the value is the agent's own object, typed. */
export function parseChatRequest(body: unknown): ChatCompletionRequest {
  parseOrThrow(ChatCompletionRequest, body);
  // zod's copy puts keys in schema order; the step and the engine keep the agent's (tools' `tojson`).
  return body as ChatCompletionRequest;
}

/** A message as a chat template takes it: the roles every template knows, tool calls in `tool_calls`. */
export type TemplateMessage = Exclude<ChatMessageParam, { role: 'developer' } | { role: 'function' }>;

const isTemplateMessage = (m: ChatMessageParam): m is TemplateMessage =>
  m.role !== 'developer' && m.role !== 'function' && !(m.role === 'assistant' && m.function_call != null);

/**
 * The messages as a chat template reads them, and whether any had to be rewritten: a `developer`
 * message is a system one (templates without a developer role drop it silently, and vLLM passes the
 * role through); a legacy `function_call` is a tool call and its `function` answer a tool message,
 * so the turn is rendered instead of lost.
 */
export function templateMessages(messages: readonly ChatMessageParam[]): {
  messages: readonly TemplateMessage[];
  rewritten: boolean;
} {
  if (messages.every(isTemplateMessage)) return { messages, rewritten: false };
  return { messages: messages.map((_, i) => templateMessage(messages, i)), rewritten: true };
}

function templateMessage(messages: readonly ChatMessageParam[], i: number): TemplateMessage {
  const m = messages[i]!;
  if (m.role === 'developer') return { ...m, role: 'system' };
  if (m.role === 'function') {
    const { name, content, ...rest } = m;
    return { ...rest, role: 'tool', name, content: content ?? '', tool_call_id: legacyCallId(messages, i) };
  }
  if (m.role === 'assistant' && m.function_call != null) {
    const { function_call: call, ...rest } = m;
    if (m.tool_calls != null && m.tool_calls.length > 0)
      throw new ValidationError(
        `messages.${i}.function_call: send tool_calls or the legacy function_call, not both`,
        `messages.${i}.function_call`,
      );
    return { ...rest, tool_calls: [{ id: `call_fn_${i}`, type: 'function', function: call }] };
  }
  return m;
}

/** The id given to the legacy call a `function` message answers: that of the last assistant turn before it. */
function legacyCallId(messages: readonly ChatMessageParam[], at: number): string {
  for (let i = at - 1; i >= 0; i--) if (messages[i]!.role === 'assistant') return `call_fn_${i}`;
  return `call_fn_${at}`;
}
