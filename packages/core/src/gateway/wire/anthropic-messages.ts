import { z } from 'zod';
import { stringOr } from './string-or.js';

/*
 * Anthropic's Messages API request as the wire carries it (@anthropic-ai/sdk's MessageCreateParams):
 * every field of the spec typed here, and either served (translated to chat: messages-request.ts) or
 * refused with a 400 that says why. Content blocks are the spec's; a text model is served, so image,
 * document and Anthropic's server-tool blocks are refused by type. docs/gateway.md#anthropic-messages-api
 */

const typeOf = (input: unknown): string =>
  JSON.stringify(
    typeof input === 'object' && input !== null ? ((input as { type?: unknown }).type ?? null) : null,
  );

const cache_control = z.looseObject({}, 'must be an object').nullish();

export const TextBlock = z.looseObject({
  type: z.literal('text'),
  text: z.string('must be a string'),
  cache_control,
  citations: z.array(z.unknown()).nullish(),
});
export const ToolUseBlock = z.looseObject({
  type: z.literal('tool_use'),
  id: z.string('must be a non-empty string').min(1, 'must be a non-empty string'),
  name: z.string('must be a non-empty string').min(1, 'must be a non-empty string'),
  input: z.record(z.string(), z.unknown(), 'must be an object'),
  cache_control,
});
/** A tool result's content: a string or text blocks (its images and documents are refused). */
export const ToolResultContent = stringOr(
  z.array(
    z.discriminatedUnion('type', [TextBlock], {
      error: (issue) =>
        `only text blocks are served in a tool result, the gateway serving text models (got ${typeOf(issue.input)})`,
    }),
  ),
  'must be a string or an array of text blocks',
);
export const ToolResultBlock = z.looseObject({
  type: z.literal('tool_result'),
  tool_use_id: z.string('must be a non-empty string').min(1, 'must be a non-empty string'),
  content: ToolResultContent.nullish(),
  is_error: z.boolean('must be a boolean').nullish(),
  cache_control,
});
/** Thinking blocks of earlier turns: accepted and dropped (the gateway never answers any). */
export const ThinkingBlock = z.looseObject({
  type: z.literal('thinking'),
  thinking: z.string(),
  signature: z.string().nullish(),
});
export const RedactedThinkingBlock = z.looseObject({ type: z.literal('redacted_thinking') });

/** Why a block type the spec has is not served. */
function blockRefusal(type: unknown): string {
  if (type === 'image' || type === 'document' || type === 'search_result' || type === 'container_upload')
    return `${type} blocks are not supported: the gateway serves text models and captures their tokens`;
  return `"${String(type)}" blocks are not supported: they belong to Anthropic's server tools, which this gateway does not run`;
}

export const ContentBlock = z.discriminatedUnion(
  'type',
  [TextBlock, ToolUseBlock, ToolResultBlock, ThinkingBlock, RedactedThinkingBlock],
  {
    error: (issue) =>
      blockRefusal(
        typeof issue.input === 'object' && issue.input ? (issue.input as { type?: unknown }).type : null,
      ),
  },
);
export type ContentBlock = z.infer<typeof ContentBlock>;

export const MessageParam = z.looseObject({
  role: z.enum(['user', 'assistant', 'system'], { error: 'must be one of user, assistant, system' }),
  content: stringOr(z.array(ContentBlock), 'must be a string or an array of content blocks'),
});
export type MessageParam = z.infer<typeof MessageParam>;

export const CustomTool = z.looseObject({
  // Anthropic's server tools (bash, text editor, web search, code execution, ...) run on its side.
  type: z
    .literal('custom', {
      error:
        "only custom tools (name, description, input_schema) are served here, not Anthropic's server tools",
    })
    .nullish(),
  name: z.string().min(1, 'must not be empty').max(128, 'must be at most 128 characters'),
  description: z.string().nullish(),
  input_schema: z.looseObject({}, 'must be a JSON Schema object'),
  strict: z.boolean().nullish(),
  defer_loading: z.boolean().nullish(),
  cache_control,
  input_examples: z.array(z.unknown()).nullish(),
  eager_input_streaming: z.boolean().nullish(),
  allowed_callers: z.array(z.string()).nullish(),
});
export type CustomTool = z.infer<typeof CustomTool>;

const ParallelOption = { disable_parallel_tool_use: z.boolean().nullish() };
export const ToolChoice = z.discriminatedUnion(
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
export type ToolChoice = z.infer<typeof ToolChoice>;

export const OutputFormat = z.looseObject({
  type: z.literal('json_schema', 'must be {"type": "json_schema", "schema": …}'),
  schema: z.record(z.string(), z.unknown(), 'must be a JSON Schema object'),
});

/** A field the spec has and this gateway does not serve: only absent (or null) passes, else `why`. */
const refused = (why: string) => z.null(why).optional();

/**
 * The request. Served: model, max_tokens, messages, system, tools, tool_choice, temperature,
 * top_p, top_k, stop_sequences, stream, metadata.user_id, output_config.format. Accepted and
 * changing nothing here: thinking, cache_control, output_config.effort, service_tier, speed,
 * inference_geo, diagnostics, user_profile_id, workspace_id. Refused: container, mcp_servers.
 */
export const MessagesRequest = z.looseObject({
  model: z.string('must be a string').min(1, 'must not be empty').max(256, 'must be at most 256 characters'),
  max_tokens: z
    .number({ error: 'required: the most tokens to generate, an integer of at least 1' })
    .int('must be an integer')
    .min(1, 'must be at least 1'),
  messages: z.array(MessageParam, 'must be an array of messages').min(1, 'must contain at least one message'),
  system: z.union([z.string(), z.array(TextBlock)], { error: 'must be a string or text blocks' }).nullish(),
  tools: z.array(CustomTool, 'must be an array of tools').nullish(),
  tool_choice: ToolChoice.nullish(),
  // Older versions of the spec's; Claude Code and the SDKs' users still send them.
  temperature: z.number('must be a number').nullish(),
  top_p: z.number('must be a number').nullish(),
  top_k: z.number('must be a number').int('must be an integer').nullish(),
  stop_sequences: z.array(z.string(), 'must be an array of strings').nullish(),
  stream: z.boolean('must be a boolean').nullish(),
  metadata: z.looseObject({ user_id: z.string().max(512).nullish() }, 'must be an object').nullish(),
  output_config: z
    .looseObject({ effort: z.string().nullish(), format: OutputFormat.nullish() }, 'must be an object')
    .nullish(),
  // The spec's, accepted: they change nothing in what a served model generates here.
  thinking: z.looseObject({ type: z.string('must be a string') }, 'must be an object').nullish(),
  cache_control,
  service_tier: z.string('must be a string').nullish(),
  speed: z.string('must be a string').nullish(),
  inference_geo: z.string('must be a string').nullish(),
  diagnostics: z.looseObject({}, 'must be an object').nullish(),
  user_profile_id: z.string('must be a string').nullish(),
  workspace_id: z.string('must be a string').nullish(),
  container: refused(
    "containers hold Anthropic's code-execution tools, which this gateway does not run: leave container out",
  ),
  mcp_servers: refused(
    'MCP servers are called by Anthropic’s API, not by this gateway: give the agent the tools instead',
  ),
});
export type MessagesRequest = z.infer<typeof MessagesRequest>;
