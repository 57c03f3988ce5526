import { WorkerRpc } from '../util/worker-rpc.js';
import type { offloadHandlers } from './offload-worker.js';

/*
 * The process's one worker thread for the gateway's CPU-heavy request work (offload-worker.ts), so
 * that no request holds the event loop with it (docs/security.md).
 */
export const offload = new WorkerRpc<typeof offloadHandlers>(
  new URL('./offload-worker-entry.mjs', import.meta.url),
  'gateway offload',
);
