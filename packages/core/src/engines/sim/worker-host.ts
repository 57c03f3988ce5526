import { WorkerRpc } from '../../util/worker-rpc.js';
import { type HttpTransportOptions, httpTransport, type Transport } from '../upstream.js';
import { checkSimOptions, type SimServerOptions } from './serve.js';
import type { simHandlers } from './worker.js';

/*
 * The built-in sim (`--engine sim`) runs on a worker thread and is reached over loopback HTTP, as a
 * real engine runs in its own process: its tokenizer work (a 128k-token prompt is most of a second
 * of CPU) never holds the gateway's event loop, and the gateway speaks to it exactly as to vLLM.
 * One worker hosts every sim of a process, so the 11 MB tokenizer loads once.
 */

const host = new WorkerRpc<typeof simHandlers>(new URL('./worker-entry.mjs', import.meta.url), 'sim engine');

/**
 * A transport to a sim started on the shared worker with these options. Bad options throw here, at
 * once; the sim starts in the background, and the first request waits for it.
 */
export function simWorkerTransport(options: SimServerOptions, http: HttpTransportOptions = {}): Transport {
  checkSimOptions(options);
  const started = host
    .call('start', options)
    .then(({ id, url }) => ({ id, transport: httpTransport(url, http) }));
  // A start that failed is reported by the first send; closing such a sim is a no-op.
  started.catch(() => undefined);
  return {
    async send(method, path, body, signal) {
      return (await started).transport.send(method, path, body, signal);
    },
    async close() {
      const sim = await started.catch(() => null);
      if (!sim) return;
      await sim.transport.close();
      await host.call('stop', sim.id).catch(() => undefined);
    },
  };
}
