import { z } from 'zod';
import { boolean, number } from './sampling.js';
import { stringOr } from './string-or.js';

/*
 * OpenAI's Responses API request as the wire carries it (openai-node's ResponseCreateParams): every
 * field of the spec is typed here, and either served (translated to chat: responses-request.ts) or
 * refused with a 400 that says why. Input items and content parts are the spec's; those of OpenAI's
 * hosted tools, images and files are refused by type. docs/gateway.md#responses-api
 */

const rawType = (input: unknown): unknown =>
  typeof input === 'object' && input !== null ? ((input as { type?: unknown }).type ?? null) : null;
const typeOf = (input: unknown): string => JSON.stringify(rawType(input));

export const InputTextPart = z.looseObject({ type: z.literal('input_text'), text: z.string() });
export const OutputTextPart = z.looseObject({
  type: z.literal('output_text'),
  text: z.string(),
  annotations: z.array(z.unknown()).nullish(),
  logprobs: z.array(z.unknown()).nullish(),
});
export const RefusalPart = z.looseObject({ type: z.literal('refusal'), refusal: z.string() });

/** A message's (or a function output's) parts: text only, the tokens a text model is captured on. */
export const ContentPart = z.discriminatedUnion('type', [InputTextPart, OutputTextPart, RefusalPart], {
  error: (issue) =>
    `only input_text, output_text and refusal parts are offered by this gateway, which serves text models (got ${typeOf(issue.input)})`,
});
export type ContentPart = z.infer<typeof ContentPart>;

export const Content = stringOr(z.array(ContentPart), 'must be a string or an array of content parts');

/** A message item: EasyInputMessage, an input message, or a response's own output message sent back. */
export const MessageItem = z.looseObject({
  type: z.literal('message'),
  role: z.enum(['user', 'assistant', 'system', 'developer'], {
    error: 'must be one of user, assistant, system, developer',
  }),
  content: Content,
  id: z.string().nullish(),
  status: z.string().nullish(),
  phase: z.string().nullish(),
});
export const FunctionCallItem = z.looseObject({
  type: z.literal('function_call'),
  call_id: z.string().min(1, 'must not be empty'),
  name: z.string().min(1, 'must not be empty'),
  arguments: z.string('must be a JSON string'),
  id: z.string().nullish(),
  status: z.string().nullish(),
});
export const FunctionCallOutputItem = z.looseObject({
  type: z.literal('function_call_output'),
  call_id: z.string().min(1, 'must not be empty'),
  output: Content,
  id: z.string().nullish(),
  status: z.string().nullish(),
});
export const ReasoningItem = z.looseObject({
  type: z.literal('reasoning'),
  id: z.string().nullish(),
  summary: z.array(z.looseObject({ text: z.string() })).nullish(),
  content: z.array(z.looseObject({ text: z.string() })).nullish(),
  encrypted_content: z.string().nullish(),
  status: z.string().nullish(),
});

/** Why an item type the spec has is not served, by type. */
function itemRefusal(type: string): string {
  if (type === 'item_reference')
    return 'items are not stored by this gateway: send the item itself, or continue with previous_response_id';
  if (type.startsWith('compaction'))
    return "compaction items are OpenAI's encrypted summaries, which no model here can read: send the conversation";
  if (type === 'custom_tool_call' || type === 'custom_tool_call_output')
    return 'custom tools are not offered by this gateway (only function tools are parsed from the model’s text)';
  return 'it belongs to a tool OpenAI runs, and this gateway offers function tools only';
}

/** An input item; a missing `type` is a message, as the spec's EasyInputMessage has it. */
export const InputItem = z.preprocess(
  (item) =>
    typeof item === 'object' && item !== null && !Array.isArray(item) && !('type' in item)
      ? { type: 'message', ...item }
      : item,
  z.discriminatedUnion('type', [MessageItem, FunctionCallItem, FunctionCallOutputItem, ReasoningItem], {
    error: (issue) =>
      `only message, function_call, function_call_output and reasoning items are offered (got ${typeOf(issue.input)}: ${itemRefusal(String(rawType(issue.input)))})`,
  }),
);
export type InputItem = z.infer<typeof InputItem>;

export const FunctionTool = z.looseObject({
  type: z.literal('function', {
    error: (issue) =>
      `only function tools are offered by this gateway: web_search, file_search, code_interpreter, computer_use, image_generation, mcp, shell and apply_patch run on OpenAI's side, and custom tools are not parsed (got ${JSON.stringify(issue.input ?? null)})`,
  }),
  name: z.string().min(1, 'must not be empty').max(256),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown(), 'must be a JSON Schema object').nullish(),
  strict: z.boolean().nullish(),
});
export type FunctionTool = z.infer<typeof FunctionTool>;

export const ResponsesToolChoice = z.union(
  [
    z.enum(['none', 'auto', 'required']),
    z.looseObject({ type: z.literal('function'), name: z.string().min(1, 'must not be empty') }),
  ],
  {
    error:
      'must be none, auto, required or {"type": "function", "name": …}: allowed_tools, hosted and custom tool choices name tools this gateway does not offer',
  },
);

export const TextFormat = z.discriminatedUnion(
  'type',
  [
    z.looseObject({ type: z.literal('text') }),
    z.looseObject({ type: z.literal('json_object') }),
    z.looseObject({
      type: z.literal('json_schema'),
      name: z.string().min(1).max(64),
      schema: z.record(z.string(), z.unknown()),
      description: z.string().nullish(),
      strict: z.boolean().nullish(),
    }),
  ],
  { error: 'must be {"type": "text" | "json_object" | "json_schema"}' },
);
export type TextFormat = z.infer<typeof TextFormat>;

const Metadata = z
  .record(z.string().max(64), z.string().max(512))
  .refine((m) => Object.keys(m).length <= 16, { message: 'at most 16 keys' });

/** A field the spec has and this gateway does not serve: only absent (or null) passes, else `why`. */
const refused = (why: string) => z.null(why).optional();

export const RESPONSES_REFUSALS = {
  background: 'background responses are not offered by this gateway: each call is answered as it runs',
  conversation:
    'conversations are not kept by this gateway: use previous_response_id, or send the whole input',
  prompt: 'stored prompt templates are not offered by this gateway: send input and instructions',
  top_logprobs:
    'top log-probs are not offered on the Responses API here (the step stores each token’s log-prob)',
  messages: 'not a Responses API field: send the conversation as input (or call chat/completions)',
} as const;

/**
 * The request. Served: model, input, instructions, tools, tool_choice, max_output_tokens,
 * temperature, top_p, parallel_tool_calls, text.format, stream, store, previous_response_id,
 * metadata. Accepted and changing nothing here: the rest of the spec's fields. Refused: above.
 */
export const ResponsesRequest = z.looseObject({
  model: z.string('must be a string').max(256).nullish(),
  input: z
    .union([z.string(), z.array(z.unknown())], { error: 'must be a string or an array of items' })
    .nullish(),
  instructions: z.string('must be a string').nullish(),
  tools: z.array(FunctionTool, 'must be an array of tools').nullish(),
  tool_choice: ResponsesToolChoice.nullish(),
  max_output_tokens: z.int('must be an integer').positive('must be at least 1').nullish(),
  temperature: number,
  top_p: number,
  parallel_tool_calls: boolean,
  text: z
    .looseObject({ format: TextFormat.nullish(), verbosity: z.string().nullish() }, 'must be an object')
    .nullish(),
  stream: boolean,
  stream_options: z.looseObject({ include_obfuscation: boolean }, 'must be an object').nullish(),
  store: boolean,
  previous_response_id: z.string('must be a string').min(1).max(256).nullish(),
  metadata: Metadata.nullish(),
  // The spec's, accepted: they change nothing in what a served model generates here.
  include: z.array(z.string(), 'must be an array of strings').nullish(),
  reasoning: z.looseObject({}, 'must be an object').nullish(),
  truncation: z.enum(['auto', 'disabled'], 'must be auto or disabled').nullish(),
  prompt_cache_key: z.string('must be a string').nullish(),
  prompt_cache_retention: z.string('must be a string').nullish(),
  prompt_cache_options: z.looseObject({}, 'must be an object').nullish(),
  safety_identifier: z.string('must be a string').nullish(),
  service_tier: z.string('must be a string').nullish(),
  user: z.string('must be a string').nullish(),
  context_management: z.array(z.unknown(), 'must be an array').nullish(),
  moderation: z.unknown().optional(),
  max_tool_calls: z.int('must be an integer').nullish(),
  background: z.literal(false, RESPONSES_REFUSALS.background).nullish(),
  conversation: refused(RESPONSES_REFUSALS.conversation),
  prompt: refused(RESPONSES_REFUSALS.prompt),
  // 0 asks for nothing, and is accepted.
  top_logprobs: z.literal(0, RESPONSES_REFUSALS.top_logprobs).nullish(),
  messages: refused(RESPONSES_REFUSALS.messages),
});
export type ResponsesRequest = z.infer<typeof ResponsesRequest>;

/** Fields the translation to chat reads or drops; any other goes on to the engine as a chat extra. */
export const RESPONSES_FIELDS: ReadonlySet<string> = new Set(Object.keys(ResponsesRequest.shape));
