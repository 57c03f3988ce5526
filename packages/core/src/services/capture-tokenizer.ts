import type { InjectionMode } from '../curation/actguide/hint.js';
import { type GuidedStep, trainingPromptOf } from '../curation/actguide/prompt-views.js';
import type { Captured } from '../engines/capture.js';
import { type RetokenizeInput, retokenizeChat, retokenizeText } from '../engines/retokenize.js';
import { type ContinuationInput, continuationIds } from '../text/continuation.js';
import type { ChatTokenizer } from '../text/index.js';
import { ModelAdapters, type ModelRef } from '../text/model-ref.js';

/*
 * The tokenising a capture may need: rebuilding ids for an engine that sent none, and an ActGuide
 * step's training prompt. Both render and encode the whole conversation (a 100k-token one is most of
 * a second of CPU), so by default they run on the offload thread (offload.ts: offThreadTokenizer) and
 * the event loop stays free. Each takes the model of the engine that produced the step (a folder, as
 * a value that crosses threads); null is the built-in Qwen3 (or the tokenizer given in code).
 */

type Ids = { promptIds: number[]; responseIds: number[] };
type TrainingPrompt = ReturnType<typeof trainingPromptOf>;
type Model = ModelRef | null | undefined;

export interface CaptureTokenizer {
  retokenizeChat(input: RetokenizeInput, captured: Captured, model?: Model): Promise<Ids>;
  retokenizeText(prompt: string, captured: Captured, model?: Model): Promise<Ids>;
  trainingPromptOf(
    step: GuidedStep,
    hint: string,
    mode?: InjectionMode,
    model?: Model,
  ): Promise<TrainingPrompt>;
  /** Ids as text without special tokens (what a reward function reads of a token-only sample). */
  decode(ids: number[], model?: Model): Promise<string>;
  /**
   * Generated ids as the engine's text of them (special tokens kept), less a final EOS: what vLLM's
   * completions answer as `text` (Claw-R1's raw chat content).
   */
  decodeGenerated(ids: number[], model?: Model): Promise<string>;
  /** Token continuity: the previous prompt + response ids extended by the new turns (the model's adapter). */
  continuationIds(input: ContinuationIds, model?: Model): Promise<number[]>;
}

type ContinuationIds = ContinuationInput & { promptIds: readonly number[]; responseIds: readonly number[] };

/** On this thread, with this tokenizer for the built-in model and folders' adapters for the rest. */
export function inThreadTokenizer(
  tokenizer: () => ChatTokenizer,
  adapters: ModelAdapters = new ModelAdapters(),
): CaptureTokenizer {
  const adapter = (model: Model) => (model ? adapters.of(model) : null);
  const tok = (model: Model) => adapter(model)?.tokenizer ?? tokenizer();
  return {
    retokenizeChat: async (input, captured, model) =>
      retokenizeChat(input, captured, tok(model), adapter(model)),
    retokenizeText: async (prompt, captured, model) => retokenizeText(prompt, captured, tok(model)),
    trainingPromptOf: async (step, hint, mode, model) =>
      trainingPromptOf(step, hint, adapter(model) ?? tokenizer(), mode),
    decode: async (ids, model) => tok(model).decode(ids, { skipSpecialTokens: true }),
    decodeGenerated: async (ids, model) => {
      const t = tok(model);
      const last = ids.at(-1);
      const text = last !== undefined && t.eosTokenIds.includes(last) ? ids.slice(0, -1) : ids;
      return t.decode(text, { skipSpecialTokens: false });
    },
    continuationIds: async (input, model) => {
      const a = adapter(model);
      return a ? a.continuationIds(input) : continuationIds(input, tokenizer());
    },
  };
}
