/**
 * The thread that hosts a process's built-in sims (worker-host.ts is its face on the main thread):
 * each sim is served on its own loopback port, as `stepwise sim` serves one.
 */
import { serveWorkerRpc } from '../../util/worker-rpc.js';
import { type RunningSimServer, type SimServerOptions, startSimServer } from './serve.js';

const running = new Map<number, RunningSimServer>();
let nextId = 1;

export const simHandlers = {
  async start(options: SimServerOptions): Promise<{ id: number; url: string }> {
    const sim = await startSimServer({ ...options, host: '127.0.0.1', port: 0 });
    const id = nextId++;
    running.set(id, sim);
    return { id, url: sim.url };
  },
  async stop(id: number): Promise<void> {
    const sim = running.get(id);
    running.delete(id);
    await sim?.close();
  },
};

serveWorkerRpc(simHandlers);
