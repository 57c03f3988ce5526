import { parentPort, Worker } from 'node:worker_threads';
import { deserializeError, type SerializedError, StepwiseError, serializeError } from '../domain/errors.js';

/*
 * A worker thread that serves named calls for the whole process: CPU-heavy work (tokenising, the
 * built-in sim) that must not hold the event loop. It starts on the first call, keeps the process
 * alive only while a call waits, and starts again after a crash (the calls then in flight fail with
 * 503). Arguments and results cross by structured clone, or move without a copy when wrapped in
 * Transfer; errors keep their domain class.
 */

/** A value whose ArrayBuffers move to the other thread instead of being copied (unusable here after). */
export class Transfer<T> {
  constructor(
    readonly value: T,
    readonly buffers: ArrayBuffer[],
  ) {}
}

type Unwrapped<T> = T extends Transfer<infer V> ? V : T;
/** Each argument as it is, or wrapped in Transfer. */
type Args<P extends unknown[]> = { [I in keyof P]: P[I] | Transfer<P[I]> };

// biome-ignore lint/suspicious/noExplicitAny: each method keeps its own signature
type Method = (...args: any[]) => unknown;

interface Call {
  id: number;
  method: string;
  args: unknown[];
}

type Reply = { id: number; ok: true; value: unknown } | { id: number; ok: false; error: SerializedError };

export class WorkerRpc<H extends { [K in keyof H]: Method }> {
  private worker: Worker | null = null;
  private readonly pending = new Map<
    number,
    { resolve: (value: unknown) => void; reject: (e: Error) => void }
  >();
  private nextId = 1;

  /** `entry`: a module that calls serveWorkerRpc (through a .mjs that registers tsx). */
  constructor(
    private readonly entry: URL,
    private readonly name: string,
  ) {}

  call<M extends keyof H & string>(
    method: M,
    ...args: Args<Parameters<H[M]>>
  ): Promise<Unwrapped<Awaited<ReturnType<H[M]>>>> {
    const worker = this.started();
    const id = this.nextId++;
    const buffers: ArrayBuffer[] = [];
    const plain = (args as unknown[]).map((a) => {
      if (!(a instanceof Transfer)) return a;
      buffers.push(...a.buffers);
      return a.value;
    });
    // Held while a call waits, so that a process with nothing else to do still gets its answer.
    if (this.pending.size === 0) worker.ref();
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (value: unknown) => void, reject });
      worker.postMessage({ id, method, args: plain } satisfies Call, buffers);
    });
  }

  private started(): Worker {
    if (this.worker) return this.worker;
    const worker = new Worker(this.entry, { name: this.name });
    worker.on('message', (reply: Reply) => {
      const waiting = this.pending.get(reply.id);
      if (!waiting) return;
      this.pending.delete(reply.id);
      if (this.pending.size === 0) worker.unref();
      if (reply.ok) waiting.resolve(reply.value);
      else waiting.reject(deserializeError(reply.error));
    });
    const fail = (error: Error) => {
      if (this.worker !== worker) return;
      this.worker = null;
      for (const waiting of this.pending.values()) waiting.reject(error);
      this.pending.clear();
    };
    worker.on('error', (error) =>
      fail(new StepwiseError(`the ${this.name} thread failed: ${error.message}`, 503, 'unavailable')),
    );
    worker.on('exit', (code) =>
      fail(new StepwiseError(`the ${this.name} thread exited (${code})`, 503, 'unavailable')),
    );
    this.worker = worker;
    return worker;
  }
}

/** The worker's side: answers each call with its handler's result or error. */
export function serveWorkerRpc(handlers: Record<string, Method> | object): void {
  const port = parentPort;
  if (!port) throw new Error('serveWorkerRpc must run in a worker thread');
  port.on('message', async (call: Call) => {
    let reply: Reply;
    let buffers: ArrayBuffer[] = [];
    try {
      const table = handlers as Record<string, Method>;
      const handler = Object.hasOwn(table, call.method) ? table[call.method] : undefined;
      if (!handler) throw new Error(`no method ${call.method}`);
      let value = await handler(...call.args);
      if (value instanceof Transfer) {
        buffers = value.buffers;
        value = value.value;
      }
      reply = { id: call.id, ok: true, value };
    } catch (error) {
      reply = { id: call.id, ok: false, error: serializeError(error) };
    }
    port.postMessage(reply, buffers);
  });
}
