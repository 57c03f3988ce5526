import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { Store } from '../packages/core/src/store/store.js';
import { runStoreConformance } from './support/store-conformance.js';

runStoreConformance('sqlite', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-conformance-'));
  const path = join(dir, 'pool.db');
  let store: Store = await openSqliteStore({ path });
  return {
    store,
    async reopen() {
      await store.close();
      store = await openSqliteStore({ path });
      return store;
    },
    async cleanup() {
      await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
});
