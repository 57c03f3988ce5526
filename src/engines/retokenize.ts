import {
  type ChatMessageInput,
  type ChatTokenizer,
  type ChatToolInput,
  renderCompletion,
  tokenizeChat,
} from '../text/index.js';
import type { Captured } from './capture.js';

// For engines that send text but no ids: rebuild them with the policy's tokenizer and chat template, marked
// `retokenized`, without logprobs (the engine's belong to its own tokens). docs/gateway.md#capture

export interface RetokenizeInput {
  messages: readonly ChatMessageInput[];
  tools?: readonly ChatToolInput[] | null;
  enableThinking?: boolean;
  /** The engine continued the last (assistant) message instead of opening a new turn. */
  continueFinalMessage?: boolean;
}

export function retokenizeChat(
  input: RetokenizeInput,
  captured: Captured,
  tokenizer: ChatTokenizer,
): { promptIds: number[]; responseIds: number[] } {
  const promptIds = tokenizeChat(
    {
      messages: input.messages,
      tools: input.tools,
      addGenerationPrompt: !input.continueFinalMessage,
      continueFinalMessage: input.continueFinalMessage === true,
      ...(input.enableThinking !== undefined ? { enableThinking: input.enableThinking } : {}),
    },
    tokenizer,
  );
  const text = renderCompletion({
    content: captured.content,
    ...(captured.reasoning !== null ? { reasoning: captured.reasoning } : {}),
    toolCalls: captured.toolCalls,
  });
  const responseIds = tokenizer.encode(text, { addSpecialTokens: false });
  const end = tokenizer.eosTokenIds[0];
  if (end !== undefined && captured.finishReason !== 'length') responseIds.push(end);
  return { promptIds, responseIds };
}

/** A text completion without ids: both sides are plain text through the tokenizer. */
export function retokenizeText(
  prompt: string,
  captured: Captured,
  tokenizer: ChatTokenizer,
): { promptIds: number[]; responseIds: number[] } {
  return {
    promptIds: tokenizer.encode(prompt, { addSpecialTokens: false }),
    responseIds: tokenizer.encode(captured.content, { addSpecialTokens: false }),
  };
}
