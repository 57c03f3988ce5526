import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { openSqliteStore } from '../store/sqlite/sqlite-store.js';
import { DataPool } from './data-pool.js';

describe('DataPool policy version', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  it('sees its own sets at once and another process’s within the TTL', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-pv-'));
    dirs.push(dir);
    const path = join(dir, 'pool.db');
    // Two pools over two connections to one file: two processes sharing a store.
    const a = new DataPool({ store: await openSqliteStore({ path }), policyVersionTtlMs: 40 });
    const b = new DataPool({ store: await openSqliteStore({ path }), policyVersionTtlMs: 40 });
    try {
      expect(await a.policyVersion()).toBe(0);
      expect(await b.policyVersion()).toBe(0);
      await a.setPolicyVersion(3);
      expect(await a.policyVersion()).toBe(3);
      // b read 0 less than 40 ms ago: it may still answer 0, and answers 3 once its copy is older.
      const deadline = Date.now() + 2_000;
      let seen = await b.policyVersion();
      while (seen !== 3 && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 10));
        seen = await b.policyVersion();
      }
      expect(seen).toBe(3);
      const uncached = new DataPool({ store: b.store, policyVersionTtlMs: 0 });
      await a.setPolicyVersion(4);
      expect(await uncached.policyVersion()).toBe(4);
    } finally {
      await a.close();
      await b.close();
    }
  });
});
