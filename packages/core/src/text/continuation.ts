import { ValidationError } from '../domain/errors.js';
import { type ChatMessageInput, type ChatToolInput, renderChat } from './chat-template.js';
import type { ChatTokenizer } from './tokenizer.js';

/*
 * Token continuity (docs/gateway.md#token-continuity): the ids of the turns that follow an
 * assistant turn, as the chat template renders them after it, so that a prompt can be built as the
 * previous prompt + the previous response + these ids instead of re-rendering the whole history.
 * ChatML templates only (Qwen3's): every turn is `<|im_start|>role\n…<|im_end|>\n`.
 */

const IM_START = '<|im_start|>';
const IM_END = '<|im_end|>';
const ASSISTANT = `${IM_START}assistant`;

export interface ContinuationInput {
  /** The whole conversation: ends with the new turns, none of them an assistant's. */
  messages: readonly ChatMessageInput[];
  tools?: readonly ChatToolInput[] | null;
  enableThinking?: boolean;
}

/**
 * The text the template writes after the last assistant turn's `<|im_end|>`: the new turns and the
 * generation prompt. Throws a ValidationError when the rendering has no such shape (not ChatML).
 */
export function continuationText(input: ContinuationInput, tokenizer: ChatTokenizer): string {
  const text = renderChat(
    {
      messages: input.messages,
      tools: input.tools ?? null,
      addGenerationPrompt: true,
      ...(input.enableThinking !== undefined ? { enableThinking: input.enableThinking } : {}),
    },
    tokenizer,
  );
  // The generation prompt is the last assistant opening; the turn before it is the one continued.
  const generation = text.lastIndexOf(ASSISTANT);
  const previous = generation > 0 ? text.lastIndexOf(ASSISTANT, generation - 1) : -1;
  const end = previous >= 0 ? text.indexOf(IM_END, previous) : -1;
  if (end < 0 || end > generation || !text.startsWith(`\n${IM_START}`, end + IM_END.length))
    throw new ValidationError(
      'messages: the chat template does not render them as ChatML turns after an assistant turn',
      'messages',
    );
  return text.slice(end + IM_END.length);
}

/**
 * The prompt that extends `promptIds + responseIds` by the new turns: the end-of-turn token when the
 * response does not end with it (cut at the length limit), then the new turns' ids.
 */
export function continuationIds(
  input: ContinuationInput & { promptIds: readonly number[]; responseIds: readonly number[] },
  tokenizer: ChatTokenizer,
): number[] {
  const imEnd = tokenizer.tokenId(IM_END);
  if (imEnd === undefined) throw new ValidationError('the tokenizer has no <|im_end|> token', 'model');
  // Control tokens split the text, so encoding the tail alone gives the ids it has in the whole.
  const tail = tokenizer.encode(continuationText(input, tokenizer), { addSpecialTokens: false });
  const closed = input.responseIds.at(-1) === imEnd ? [] : [imEnd];
  return [...input.promptIds, ...input.responseIds, ...closed, ...tail];
}
