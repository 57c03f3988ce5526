/**
 * Runs the pool's operations over a SqliteStore on its own thread; WorkerPool is their face on the
 * main thread, so requests are parsed while commits run.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { serializeError } from '../domain/errors.js';
import { openSqliteStore, type SqliteStoreOptions } from '../store/sqlite/sqlite-store.js';
import type { SubmitOutcome } from '../store/store.js';
import { type PackedStep, PoolCore } from './core.js';
import type { WorkerReply, WorkerRequest } from './worker-protocol.js';

const port = parentPort;
if (!port) throw new Error('pool-worker must run in a worker thread');

try {
  const pool = new PoolCore(await openSqliteStore(workerData as SqliteStoreOptions));
  port.on('message', async (message: WorkerRequest) => {
    let reply: WorkerReply;
    const transfer: ArrayBuffer[] = [];
    try {
      const method = pool[message.method] as (...args: unknown[]) => Promise<unknown>;
      let value = await method.apply(pool, message.args);
      if (message.method === 'submitBatch') {
        // Rejected submissions carry domain errors, which a structured clone would flatten.
        value = (value as SubmitOutcome[]).map((o) =>
          o.ok ? o : { ok: false, error: serializeError(o.error) },
        );
      }
      if (message.method === 'getTrajectoryStepsPacked') {
        // The ids move to the main thread, where a clone of number arrays costs per number.
        for (const step of value as PackedStep[])
          for (const ids of [step.promptIds, step.responseIds, step.trainingPromptIds])
            if (ids instanceof Uint32Array) transfer.push(ids.buffer as ArrayBuffer);
      }
      reply = { id: message.id, ok: true, value };
    } catch (error) {
      reply = { id: message.id, ok: false, error: serializeError(error) };
    }
    port.postMessage(reply, transfer);
    if (message.method === 'close') port.close();
  });
  port.postMessage({ ready: true });
} catch (error) {
  port.postMessage({ ready: false, error: serializeError(error) });
}
