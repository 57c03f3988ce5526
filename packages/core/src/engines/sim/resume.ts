import type { ChatTokenizer } from '../../text/index.js';
import type { SimCompletionRequest, SimGeneration, SimTextResult } from './engine.js';

/*
 * A model asked to continue its own generation goes on where it was: a text completion whose
 * prompt is an earlier request's prompt followed by the first tokens that request generated (a
 * partial rollout's continuation, gateway/partial/) gets the rest of that generation, token for
 * token with the same log-probs. The sim keeps its recent generations to answer so.
 */

const RECENT = 256;

export class RecentGenerations {
  private readonly ring: SimGeneration[] = [];

  add(generation: SimGeneration): void {
    this.ring.push(generation);
    if (this.ring.length > RECENT) this.ring.shift();
  }

  /** The generation `promptIds` continues, and how many of its tokens it already holds. */
  find(promptIds: readonly number[]): { generation: SimGeneration; done: number } | null {
    for (let i = this.ring.length - 1; i >= 0; i--) {
      const g = this.ring[i]!;
      const p = g.promptTokenIds.length;
      const done = promptIds.length - p;
      if (done <= 0 || done >= g.tokenIds.length) continue;
      if (startsWith(promptIds, g.promptTokenIds, 0) && startsWith(promptIds, g.tokenIds.slice(0, done), p))
        return { generation: g, done };
    }
    return null;
  }
}

function startsWith(ids: readonly number[], part: readonly number[], at: number): boolean {
  for (let i = 0; i < part.length; i++) if (ids[at + i] !== part[i]) return false;
  return true;
}

/** The rest of `g` after its first `done` tokens, as the answer to `request` (its options, its limit). */
export function resumeGeneration(
  g: SimGeneration,
  done: number,
  request: SimCompletionRequest,
  promptTokenIds: number[],
  tokenizer: ChatTokenizer,
): SimTextResult {
  const limit = typeof request.max_tokens === 'number' ? request.max_tokens : Number.POSITIVE_INFINITY;
  const rest = g.tokenIds.slice(done);
  const cut = rest.length > limit;
  const tokenIds = cut ? rest.slice(0, limit) : rest;
  const ended = !cut && g.finishReason === 'stop' && g.stopReason === null;
  const text = tokenizer.decode(ended ? tokenIds.slice(0, -1) : tokenIds);
  return {
    promptTokenIds,
    tokenIds,
    logprobs: g.logprobs.slice(done, done + tokenIds.length),
    ...(g.topLogprobs ? { topLogprobs: g.topLogprobs.slice(done, done + tokenIds.length) } : {}),
    text,
    finishReason: cut ? 'length' : g.finishReason,
    stopReason: cut ? null : g.stopReason,
    ...(g.endTokenId !== undefined ? { endTokenId: g.endTokenId } : {}),
    usage: {
      prompt_tokens: promptTokenIds.length,
      completion_tokens: tokenIds.length,
      total_tokens: promptTokenIds.length + tokenIds.length,
    },
    seed: g.seed,
    options: {
      logprobs: request.logprobs ?? null,
      includeUsage: request.stream_options?.include_usage === true,
      returnTokenIds: request.return_token_ids !== false,
    },
  };
}
