import type { ChatTokenizer } from '../../text/index.js';
import type { SimGeneration, SimResult } from './engine.js';

/**
 * A completion cut at its first `count` tokens, as vLLM answers a request its pause aborted: the
 * tokens so far, their text as content (a tool call cut in half is no call), finish_reason "abort".
 * Streamed, the text of a call begun stays unsent, as vLLM's streaming tool parser holds it.
 */
export function cutGeneration<T extends SimGeneration>(
  result: T,
  count: number,
  tokenizer: ChatTokenizer,
  streamed = false,
): T {
  const tokenIds = result.tokenIds.slice(0, count);
  const text = tokenizer.decode(tokenIds);
  const cut: T = {
    ...result,
    tokenIds,
    logprobs: result.logprobs.slice(0, count),
    ...(result.topLogprobs ? { topLogprobs: result.topLogprobs.slice(0, count) } : {}),
    text,
    finishReason: 'abort',
    stopReason: null,
    usage: {
      prompt_tokens: result.usage.prompt_tokens,
      completion_tokens: count,
      total_tokens: result.usage.prompt_tokens + count,
    },
  };
  if ('toolCalls' in result) {
    const chat = cut as unknown as SimResult;
    const open = chat.markers?.toolCallOpen ?? '<tool_call>';
    const at = streamed ? text.indexOf(open) : -1;
    chat.content = at === -1 ? text : text.slice(0, at);
    chat.toolCalls = [];
    chat.reasoning = undefined;
  }
  return cut;
}
