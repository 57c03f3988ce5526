import {
  type ChatMessageInput,
  type ChatTokenizer,
  type ChatToolInput,
  renderCompletion,
  tokenizeChat,
} from '../text/index.js';
import type { ModelAdapter } from '../text/model-adapter.js';
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
  adapter: ModelAdapter | null = null,
): { promptIds: number[]; responseIds: number[] } {
  const render = {
    messages: input.messages,
    tools: input.tools,
    addGenerationPrompt: !input.continueFinalMessage,
    continueFinalMessage: input.continueFinalMessage === true,
    ...(input.enableThinking !== undefined ? { enableThinking: input.enableThinking } : {}),
  };
  const parts = {
    content: captured.content,
    ...(captured.reasoning !== null ? { reasoning: captured.reasoning } : {}),
    toolCalls: captured.toolCalls,
  };
  // A model folder's adapter writes its family's prompt and completion; else Qwen3's.
  const promptIds = adapter ? adapter.tokenize(render) : tokenizeChat(render, tokenizer);
  const completion = adapter ? adapter.completion(parts) : null;
  const text = completion ? completion.text : renderCompletion(parts);
  const responseIds = tokenizer.encode(text, { addSpecialTokens: false });
  const end = completion ? tokenizer.tokenId(completion.end) : tokenizer.eosTokenIds[0];
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
