import { WorkerRpc } from '../util/worker-rpc.js';
import type { CaptureTokenizer } from './capture-tokenizer.js';
import type { offloadHandlers } from './offload-worker.js';

/*
 * The process's one worker thread for CPU-heavy request work (offload-worker.ts): the gateway's
 * capture tokenising, big step batches, the dashboard's decoding table; so that no request holds the
 * event loop with it (docs/security.md).
 */
export const offload = new WorkerRpc<typeof offloadHandlers>(
  new URL('./offload-worker-entry.mjs', import.meta.url),
  'gateway offload',
);

/** The models' tokenizers on the offload thread: Qwen3's built in, a folder's by its ref. */
export const offThreadTokenizer: CaptureTokenizer = {
  retokenizeChat: (input, captured, model) => offload.call('retokenizeChat', input, captured, model),
  retokenizeText: (prompt, captured, model) => offload.call('retokenizeText', prompt, captured, model),
  trainingPromptOf: (step, hint, mode, model) => offload.call('trainingPromptOf', step, hint, mode, model),
  decode: (ids, model) => offload.call('decode', ids, model),
  decodeGenerated: (ids, model) => offload.call('decodeGenerated', ids, model),
  continuationIds: (input, model) => offload.call('continuationIds', input, model),
};
