import { afterEach, describe, expect, it } from 'vitest';
import { poolOps } from '../packages/core/src/pool/core.js';
import { DataPool } from '../packages/core/src/pool/data-pool.js';
import { openPostgresStore, type PostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import type { StoreChange } from '../packages/core/src/store/store.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { episode } from './support/store-conformance.js';

/*
 * What only a database shared by several processes can get wrong: two stores (two connection
 * pools, as two processes have) over one schema, racing each other.
 */

const opened: PostgresStore[] = [];
const schemas: string[] = [];

afterEach(async () => {
  for (const store of opened.splice(0)) await store.close();
  for (const schema of schemas.splice(0)) await dropSchema(schema);
});

async function twoStores(): Promise<[PostgresStore, PostgresStore]> {
  const schema = freshSchema();
  schemas.push(schema);
  const a = await openPostgresStore({ url: pgUrl!, schema, poolSize: 6 });
  opened.push(a);
  const b = await openPostgresStore({ url: pgUrl!, schema, poolSize: 6 });
  opened.push(b);
  return [a, b];
}

const leaseParams = (consumer: string) => ({
  channel: 'train',
  batchSize: 1,
  nRollouts: 2,
  maxStaleness: null,
  consumer,
  ttlMs: 60_000,
});

describe.skipIf(!pgUrl)('PostgreSQL store shared by several processes', () => {
  it('completes groups whose rollouts arrive through different stores at once, losing no count', async () => {
    const [a, b] = await twoStores();
    const groups = 20;
    // Rollout r of every group goes through store r: both race on each group's row.
    await Promise.all(
      [a, b].map(async (store, r) => {
        for (let g = 0; g < groups; g++) {
          const [outcome] = await poolOps(store).submitBatch(
            [{ channel: 'train', nRollouts: 2, steps: episode(`t${g}-${r}`, `g${g}`, 3, r) }],
            1_000 + g,
          );
          expect(outcome!.ok).toBe(true);
        }
      }),
    );
    for (let g = 0; g < groups; g++) {
      const group = await a.getGroup('train', `g${g}`);
      expect(group).toMatchObject({ state: 'ready', nTrajectories: 2, nFinished: 2, nComplete: 2 });
    }
    const stats = await b.views.stats('train');
    expect(stats.groups.ready).toBe(groups);
    expect(stats.produced).toEqual({ steps: groups * 2 * 3, trajectories: groups * 2 });
  });

  it('never gives one group to two consumers leasing through different stores at once', async () => {
    const [a, b] = await twoStores();
    const groups = 30;
    for (let g = 0; g < groups; g++) {
      await poolOps(a).submitBatch(
        [0, 1].map((r) => ({ channel: 'train', nRollouts: 2, steps: episode(`t${g}-${r}`, `g${g}`, 2, r) })),
        1_000 + g,
      );
    }
    const served: string[] = [];
    // Four consumers on each store, leasing until nothing is left.
    await Promise.all(
      [poolOps(a), poolOps(b)].flatMap((store, s) =>
        [0, 1, 2, 3].map(async (c) => {
          for (;;) {
            const batch = await store.leaseBatch(leaseParams(`c${s}.${c}`), 5_000);
            if (!batch) return;
            served.push(...batch.groups.map((x) => x.group.id));
            await store.ackLease(batch.lease.id, 5_001);
          }
        }),
      ),
    );
    expect(served).toHaveLength(groups);
    expect(new Set(served).size).toBe(groups);
    expect((await b.views.stats('train')).consumed.groups).toBe(groups);
  });

  it('numbers events in commit order: a reader following the log while two stores write misses none', async () => {
    const [a, b] = await twoStores();
    let writing = true;
    const seen: number[] = [];
    const reader = (async () => {
      let after = 0;
      for (;;) {
        const done = !writing;
        const events = await a.readEvents({ after, limit: 1_000 });
        for (const e of events) {
          seen.push(e.seq);
          after = e.seq;
        }
        if (done && events.length === 0) return;
      }
    })();
    await Promise.all(
      [a, b].map(async (store, s) => {
        for (let i = 0; i < 40; i++) {
          await poolOps(store).submitBatch(
            [{ channel: 'train', nRollouts: 1, steps: episode(`s${s}-${i}`, `s${s}-g${i}`, 2, 1) }],
            2_000 + i,
          );
        }
      }),
    );
    writing = false;
    await reader;
    const all = (await b.readEvents({ after: 0, limit: 10_000 })).map((e) => e.seq);
    // Everything in the log was seen by the reader as it went, in order, none twice.
    expect(seen).toEqual(all);
    expect(all.length).toBeGreaterThanOrEqual(80 * 2);
  });

  it("announces another store's commits: ready groups and policy versions arrive without polling", async () => {
    const [a, b] = await twoStores();
    const changes: StoreChange[] = [];
    a.subscribe((change) => changes.push(change));
    // A pool that would poll only every 30 s: only the notification can wake its long-poll in time.
    const pool = new DataPool({ store: a, pollIntervalMs: 30_000 });
    const waiting = pool.lease({
      channel: 'train',
      batch_size: 1,
      n_rollouts: 1,
      wait_ms: 20_000,
      consumer: 'waiter',
      ttl_ms: 60_000,
    });
    await new Promise((r) => setTimeout(r, 200));
    const started = performance.now();
    await poolOps(b).submitBatch(
      [{ channel: 'train', nRollouts: 1, steps: episode('late', 'gl', 2, 1) }],
      Date.now(),
    );
    const batch = await waiting;
    expect(batch?.groups[0]?.group.id).toBe('gl');
    expect(performance.now() - started).toBeLessThan(5_000);
    expect(changes).toContain('ready');

    await poolOps(b).setPolicyVersion(7, Date.now());
    await expect.poll(() => changes.includes('policy'), { timeout: 5_000 }).toBe(true);
    expect(await pool.policyVersion()).toBe(7);
    // The pool closes the store it was given.
    opened.splice(opened.indexOf(a), 1);
    await pool.close();
  });

  it('refuses a bad schema name and names an unreachable database without its password', async () => {
    await expect(openPostgresStore({ url: pgUrl!, schema: 'Robert"); DROP' })).rejects.toThrow(/schema/);
    const unreachable = 'postgres://stepwise:hunter2@127.0.0.1:1/nothing';
    const error = await openPostgresStore({ url: unreachable, schema: 'x' }).catch((e: Error) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(
      /cannot reach PostgreSQL at postgres:\/\/stepwise:\*\*\*@127\.0\.0\.1:1/,
    );
    expect((error as Error).message).not.toContain('hunter2');
  });
});

describe.skipIf(!pgUrl)('PostgreSQL store: first start', () => {
  it('lets several processes create and migrate a new schema at once', async () => {
    const schema = freshSchema();
    schemas.push(schema);
    const stores = await Promise.all(
      Array.from({ length: 4 }, () => openPostgresStore({ url: pgUrl!, schema, poolSize: 2 })),
    );
    opened.push(...stores);
    await poolOps(stores[0]!).submitBatch(
      [{ channel: 'train', nRollouts: 1, steps: episode('t', 'g', 2, 1) }],
      1_000,
    );
    for (const store of stores) expect((await store.getGroup('train', 'g'))?.state).toBe('ready');
  });
});
