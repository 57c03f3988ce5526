import { StepwiseError } from '../domain/errors.js';
import type { ChatMessageInput, ChatToolInput, RenderChatInput } from './chat-template.js';
import type { ChatTokenizer } from './tokenizer.js';
import type { ToolCall } from './tool-calls.js';

/*
 * Text a family's template implies but never renders on its own: the completion a model writes for
 * an assistant message, and the turns that follow an assistant turn (token continuity). Both are
 * read off the template by rendering twice and taking the difference, so any family whose template
 * renders an assistant turn as a closed suffix gets them without code of its own.
 */

/** What an assistant turn says: the parts a parser returns and a renderer writes. */
export interface CompletionParts {
  content?: string | null;
  reasoning?: string;
  /** A call's id is written only by families whose completions carry one (Mistral's). */
  toolCalls?: readonly (Pick<ToolCall, 'function'> & { id?: string })[];
}

/** What the text functions need of an adapter (model-adapter.ts passes its own pieces). */
export interface TemplateAccess {
  render(input: RenderChatInput): string;
  tokenizer: ChatTokenizer;
  endOfTurnTokens: readonly string[];
  /** A token the template closes a turn with that the model writes as another (gpt-oss: `<|end|>` → `<|return|>`). */
  generatedEnds?: Readonly<Record<string, string>>;
}

/** Why the template cannot give the text: the caller turns it into its ModelFeatureError. */
export class TemplateShapeError extends StepwiseError {
  override readonly name = 'TemplateShapeError';
  constructor(message: string) {
    super(message, 400, 'model_feature_unsupported', 'model');
  }
}

/** A stand-in opening turn: the text under test follows it, so nothing before it matters. */
const OPENING: ChatMessageInput = { role: 'user', content: '.' };

function assistantMessage(parts: CompletionParts): ChatMessageInput {
  return {
    role: 'assistant',
    content: parts.content ?? null,
    ...(parts.reasoning !== undefined ? { reasoning_content: parts.reasoning } : {}),
    ...(parts.toolCalls && parts.toolCalls.length > 0
      ? {
          tool_calls: parts.toolCalls.map((c, i) => ({
            id: c.id || `call_${i}`,
            type: 'function' as const,
            function: c.function,
          })),
        }
      : {}),
  };
}

/** The last added token `text` ends with (the rendered close of a turn), or null. */
function closingToken(text: string, tokenizer: ChatTokenizer): string | null {
  const ids = tokenizer.encode(text, { addSpecialTokens: false });
  const last = ids.at(-1);
  if (last === undefined) return null;
  const token = tokenizer.decode([last]);
  return tokenizer.tokenId(token) === last && text.endsWith(token) ? token : null;
}

/**
 * The completion a model of this family writes for `parts` (what follows the generation prompt),
 * without the token it stops on, and that token. Read off the template: the assistant turn rendered
 * after an opening user turn, less that turn with the generation prompt.
 */
export function completionFromTemplate(
  access: TemplateAccess,
  parts: CompletionParts,
): { text: string; end: string } {
  const open = access.render({ messages: [OPENING], addGenerationPrompt: true });
  const full = access.render({ messages: [OPENING, assistantMessage(parts)], addGenerationPrompt: false });
  if (!full.startsWith(open))
    throw new TemplateShapeError(
      'its template renders an assistant turn that does not follow its generation prompt',
    );
  const tail = full.slice(open.length).trimEnd();
  const end = access.endOfTurnTokens.find((t) => tail.endsWith(t));
  if (end !== undefined) return { text: tail.slice(0, -end.length), end };
  const close = closingToken(tail, access.tokenizer);
  const generated = close !== null ? access.generatedEnds?.[close] : undefined;
  if (close === null || generated === undefined)
    throw new TemplateShapeError('its template closes this assistant turn with no end-of-turn token');
  return { text: tail.slice(0, -close.length), end: generated };
}

export interface ContinuationParts {
  /** The whole conversation: ends with the new turns, none of them an assistant's. */
  messages: readonly ChatMessageInput[];
  tools?: readonly ChatToolInput[] | null;
  enableThinking?: boolean;
}

/**
 * The text the template writes after the last assistant turn (the new turns and the generation
 * prompt), and the token that closes that turn. Rendered from the last assistant turn on, after an
 * opening user turn: for these templates the new turns' text depends on nothing earlier.
 */
export function continuationFromTemplate(
  access: TemplateAccess,
  input: ContinuationParts,
): { text: string; close: string } {
  const messages = input.messages;
  let last = messages.length - 1;
  while (last >= 0 && messages[last]!.role !== 'assistant') last--;
  if (last < 0) throw new TemplateShapeError('no assistant turn to continue');
  const common = {
    tools: input.tools ?? null,
    ...(input.enableThinking !== undefined ? { enableThinking: input.enableThinking } : {}),
  };
  const before = access
    .render({ messages: [OPENING, messages[last]!], addGenerationPrompt: false, ...common })
    .trimEnd();
  const after = access.render({
    messages: [OPENING, ...messages.slice(last)],
    addGenerationPrompt: true,
    ...common,
  });
  const close = closingToken(before, access.tokenizer);
  const closes = close !== null && (access.endOfTurnTokens.includes(close) || access.generatedEnds?.[close]);
  if (!closes || !after.startsWith(before))
    throw new TemplateShapeError('its template renders the turns after an assistant turn differently');
  return { text: after.slice(before.length), close: close! };
}

/**
 * The prompt that extends `promptIds + responseIds` by the new turns: the turn's closing token when
 * the response does not end with an end of turn (cut at the length limit), then the new turns' ids.
 */
export function continuationIdsFromText(
  tokenizer: ChatTokenizer,
  endOfTurnTokens: readonly string[],
  continuation: { text: string; close: string },
  promptIds: readonly number[],
  responseIds: readonly number[],
): number[] {
  const closeId = tokenizer.tokenId(continuation.close);
  if (closeId === undefined) throw new TemplateShapeError(`the tokenizer has no ${continuation.close} token`);
  const ends = new Set(endOfTurnTokens.map((t) => tokenizer.tokenId(t)));
  ends.add(closeId);
  // Control tokens split the text, so encoding the tail alone gives the ids it has in the whole.
  const tail = tokenizer.encode(continuation.text, { addSpecialTokens: false });
  const last = responseIds.at(-1);
  const closed = last !== undefined && ends.has(last) ? [] : [closeId];
  return [...promptIds, ...responseIds, ...closed, ...tail];
}
