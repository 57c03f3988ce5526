import { describe } from 'vitest';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import type { Store } from '../packages/core/src/store/store.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { runStoreConformance } from './support/store-conformance.js';

describe.skipIf(!pgUrl)('PostgreSQL store', () => {
  runStoreConformance('postgres', async () => {
    const schema = freshSchema();
    const open = () => openPostgresStore({ url: pgUrl!, schema, poolSize: 4 });
    let store: Store = await open();
    return {
      store,
      async reopen() {
        await store.close();
        store = await open();
        return store;
      },
      async cleanup() {
        await store.close();
        await dropSchema(schema);
      },
    };
  });
});
