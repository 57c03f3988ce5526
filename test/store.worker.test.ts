import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { WorkerPool } from '../packages/core/src/pool/worker-pool.js';
import { runStoreConformance } from './support/store-conformance.js';

// The same behaviour when the SQLite store runs on a worker thread behind message passing.
runStoreConformance('sqlite on a worker thread', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-worker-'));
  const path = join(dir, 'pool.db');
  let store = await WorkerPool.open({ path });
  return {
    store,
    async reopen() {
      await store.close();
      store = await WorkerPool.open({ path });
      return store;
    },
    async cleanup() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
