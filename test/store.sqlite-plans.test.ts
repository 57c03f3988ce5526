import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { poolOps } from '../packages/core/src/pool/core.js';
import { openSqliteStore, type SqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { StepQuery, TrajectoryQuery } from '../packages/core/src/store/store.js';
import { episode } from './support/store-conformance.js';

/** A plan line that reads a whole table or index rather than searching it. */
const fullScan = (detail: string) => /^SCAN (steps|trajectories|label_current|label_tags)\b/.test(detail);

describe('SQLite list queries are served by indexes', () => {
  let dir: string;
  let store: SqliteStore;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-plans-'));
    store = await openSqliteStore({ path: join(dir, 'pool.db') });
    for (let t = 0; t < 40; t++) {
      const [outcome] = await poolOps(store).submitBatch(
        [{ channel: t % 2 ? 'train' : 'val', nRollouts: 4, steps: episode(`t${t}`, `g${t >> 2}`, 3, t % 3) }],
        1_000 + t,
      );
      expect(outcome!.ok).toBe(true);
    }
  });
  afterAll(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  const page = { limit: 50, offset: 0 };
  const stepQueries: [string, StepQuery][] = [
    ['channel', { channel: 'train', ...page }],
    ['trajectory', { trajectoryId: 't1', ...page }],
    ['prompt group', { groupId: 'g1', ...page }],
    ['reward range in a channel', { channel: 'train', rewardMin: 1, rewardMax: 2, ...page }],
    ['status in a channel', { channel: 'train', status: 'complete', ...page }],
    ['untrainable', { trainable: false, ...page }],
    ['quality', { quality: 'bad', ...page }],
    ['tag', { tag: 'loop', ...page }],
  ];
  for (const [what, query] of stepQueries) {
    it(`steps by ${what}`, () => {
      const plan = store.explainList('steps', query);
      expect(plan.length).toBeGreaterThan(0);
      expect(plan.filter(fullScan)).toEqual([]);
    });
  }

  const trajectoryQueries: [string, TrajectoryQuery][] = [
    ['channel', { channel: 'train', ...page }],
    ['prompt group', { groupId: 'g1', ...page }],
    ['task', { taskId: 'task-1', ...page }],
    ['status', { status: 'aborted', ...page }],
    ['reward range in a channel', { channel: 'val', rewardMin: 0.5, ...page }],
    ['untrainable', { trainable: false, ...page }],
    ['tag', { tag: 'loop', ...page }],
  ];
  for (const [what, query] of trajectoryQueries) {
    it(`trajectories by ${what}`, () => {
      expect(store.explainList('trajectories', query).filter(fullScan)).toEqual([]);
    });
  }

  it('recognises a full scan when there is one (the check is not vacuous)', () => {
    expect(store.explainList('steps', { ...page }).some(fullScan)).toBe(true);
  });
});
