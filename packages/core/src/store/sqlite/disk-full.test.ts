import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type Database from 'better-sqlite3';
import { afterEach, describe, expect, it } from 'vitest';
import { newStep } from '../../domain/index.js';
import { poolOps } from '../../pool/core.js';
import { openSqliteStore } from './sqlite-store.js';

/*
 * A full disk, without mounting one: SQLite answers SQLITE_FULL once a database reaches its
 * max_page_count, as it does when the disk refuses to grow a file (test/fault.test.ts fills a real
 * tmpfs where mounting is permitted).
 */

const dirs: string[] = [];
afterEach(() => {
  for (const dir of dirs.splice(0)) rmSync(dir, { recursive: true, force: true });
});

const steps = (trajectoryId: string) =>
  [0, 1].map((index) =>
    newStep({
      trajectoryId,
      groupId: 'g',
      index,
      promptIds: Array.from({ length: 20_000 }, (_, i) => (i * 7919 + index) % 150_000),
      responseIds: [1, 2, 3],
    }),
  );

describe('SQLite on a full disk', () => {
  it('refuses a write with a 503 that says the disk is full, stores none of it, and takes writes again once there is space', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'stepwise-disk-full-'));
    dirs.push(dir);
    const store = await openSqliteStore({ path: join(dir, 'pool.db') });
    const db = (store as unknown as { db: Database.Database }).db;
    db.pragma(`max_page_count = ${db.pragma('page_count', { simple: true })}`);
    const request = { channel: 'train', nRollouts: null, steps: steps('t1') };
    await expect(poolOps(store).submitBatch([request], 1)).rejects.toMatchObject({
      status: 503,
      code: 'disk_full',
      message: expect.stringMatching(/the disk holding .*pool\.db is full \(SQLITE_FULL\)/),
    });
    expect(await store.getTrajectory('t1')).toBeNull();
    // Space again: the same store, without reopening, takes the same write.
    db.pragma('max_page_count = 1073741823');
    const [outcome] = await poolOps(store).submitBatch([request], 2);
    expect(outcome).toMatchObject({ ok: true, inserted: 2, duplicates: 0 });
    expect(await store.getTrajectorySteps('t1')).toHaveLength(2);
    await store.close();
  });
});
