import type { InjectionMode } from '../curation/actguide/hint.js';
import { type GuidedStep, trainingPromptOf } from '../curation/actguide/prompt-views.js';
import type { Captured } from '../engines/capture.js';
import { type RetokenizeInput, retokenizeChat, retokenizeText } from '../engines/retokenize.js';
import { type ContinuationInput, continuationIds } from '../text/continuation.js';
import type { ChatTokenizer } from '../text/index.js';

/*
 * The tokenising a capture may need: rebuilding ids for an engine that sent none, and an ActGuide
 * step's training prompt. Both render and encode the whole conversation (a 100k-token one is most of
 * a second of CPU), so by default they run on the offload thread (offload.ts: offThreadTokenizer) and
 * the event loop stays free.
 */

type Ids = { promptIds: number[]; responseIds: number[] };
type TrainingPrompt = ReturnType<typeof trainingPromptOf>;

export interface CaptureTokenizer {
  retokenizeChat(input: RetokenizeInput, captured: Captured): Promise<Ids>;
  retokenizeText(prompt: string, captured: Captured): Promise<Ids>;
  trainingPromptOf(step: GuidedStep, hint: string, mode?: InjectionMode): Promise<TrainingPrompt>;
  /** Ids as text without special tokens (what a reward function reads of a token-only sample). */
  decode(ids: number[]): Promise<string>;
  /**
   * Generated ids as the engine's text of them (special tokens kept), less a final EOS: what vLLM's
   * completions answer as `text` (Claw-R1's raw chat content).
   */
  decodeGenerated(ids: number[]): Promise<string>;
  /** Token continuity: the previous prompt + response ids extended by the new turns (text/continuation.ts). */
  continuationIds(input: ContinuationIds): Promise<number[]>;
}

type ContinuationIds = ContinuationInput & { promptIds: readonly number[]; responseIds: readonly number[] };

/** On this thread, with this tokenizer (what the worker runs; also for a tokenizer given in code). */
export function inThreadTokenizer(tokenizer: () => ChatTokenizer): CaptureTokenizer {
  return {
    retokenizeChat: async (input, captured) => retokenizeChat(input, captured, tokenizer()),
    retokenizeText: async (prompt, captured) => retokenizeText(prompt, captured, tokenizer()),
    trainingPromptOf: async (step, hint, mode) => trainingPromptOf(step, hint, tokenizer(), mode),
    decode: async (ids) => tokenizer().decode(ids, { skipSpecialTokens: true }),
    decodeGenerated: async (ids) => {
      const t = tokenizer();
      const last = ids.at(-1);
      const text = last !== undefined && t.eosTokenIds.includes(last) ? ids.slice(0, -1) : ids;
      return t.decode(text, { skipSpecialTokens: false });
    },
    continuationIds: async (input) => continuationIds(input, tokenizer()),
  };
}
