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

/** Qwen3's tokenizer on the offload thread. */
export const offThreadTokenizer: CaptureTokenizer = {
  retokenizeChat: (input, captured) => offload.call('retokenizeChat', input, captured),
  retokenizeText: (prompt, captured) => offload.call('retokenizeText', prompt, captured),
  trainingPromptOf: (step, hint, mode) => offload.call('trainingPromptOf', step, hint, mode),
  decode: (ids) => offload.call('decode', ids),
  decodeGenerated: (ids) => offload.call('decodeGenerated', ids),
  continuationIds: (input) => offload.call('continuationIds', input),
};
