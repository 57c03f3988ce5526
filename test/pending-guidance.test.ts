import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { ConflictError } from '../packages/core/src/domain/index.js';
import { type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import type { LeaseParams } from '../packages/core/src/pool/types.js';
import { WorkerPool } from '../packages/core/src/pool/worker-pool.js';
import { openPostgresStore } from '../packages/core/src/store/postgres/postgres-store.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import type { Store } from '../packages/core/src/store/store.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * ActGuide-RL's pending-guidance state, on every backend: a hard group held for guidance is never
 * leased while it waits; the guided group is served in its place; the hold ends when the guided group
 * lands (or is abandoned, or times out), and it survives a restart.
 */

interface Harness {
  store: Store | PoolOps;
  reopen(): Promise<Store | PoolOps>;
  cleanup(): Promise<void>;
}

const backends: [string, boolean, () => Promise<Harness>][] = [
  [
    'sqlite file',
    true,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-pending-'));
      const path = join(dir, 'pool.db');
      let store: Store = await openSqliteStore({ path });
      return {
        store,
        reopen: async () => {
          await store.close();
          store = await openSqliteStore({ path });
          return store;
        },
        cleanup: async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'sqlite on its worker thread',
    true,
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-pending-w-'));
      const path = join(dir, 'pool.db');
      let store: Store | PoolOps = await WorkerPool.open({ path });
      return {
        store,
        reopen: async () => {
          await store.close();
          store = await WorkerPool.open({ path });
          return store;
        },
        cleanup: async () => {
          await store.close();
          rmSync(dir, { recursive: true, force: true });
        },
      };
    },
  ],
  [
    'postgres',
    pgUrl !== undefined,
    async () => {
      const schema = freshSchema();
      const open = () => openPostgresStore({ url: pgUrl!, schema, poolSize: 4 });
      let store: Store = await open();
      return {
        store,
        reopen: async () => {
          await store.close();
          store = await open();
          return store;
        },
        cleanup: async () => {
          await store.close();
          await dropSchema(schema);
        },
      };
    },
  ],
];

for (const [name, enabled, open] of backends) {
  describe.skipIf(!enabled)(`pending guidance: ${name}`, () => {
    let h: Harness;
    let store: PoolOps;
    let now = 1_000_000;
    const tick = () => ++now;
    beforeEach(async () => {
      h = await open();
      store = poolOps(h.store);
    });
    afterEach(async () => {
      await h.cleanup();
    });

    /** A group of `rewards.length` rollouts, completed with these rewards; held at 0 when `hold`. */
    const group = async (id: string, rewards: number[], hold: boolean) => {
      for (let i = 0; i < rewards.length; i++) {
        await store.createTrajectory(
          {
            id: `${id}-r${i}`,
            groupId: id,
            channel: 'train',
            nRollouts: rewards.length,
            metadata: {},
            ...(hold ? { holdForGuidance: 0 } : {}),
          },
          tick(),
        );
      }
      for (const [i, reward] of rewards.entries())
        await store.completeTrajectory(`${id}-r${i}`, { status: 'complete', reward }, tick());
    };
    const lease = (batchSize = 1) =>
      store.leaseBatch(
        {
          channel: 'train',
          batchSize,
          nRollouts: null,
          maxStaleness: null,
          consumer: 'trainer',
          ttlMs: 60_000,
        } satisfies LeaseParams,
        tick(),
      );
    const served = (batch: Awaited<ReturnType<typeof lease>>) => batch?.groups.map((g) => g.group.id) ?? [];

    it('a lease during pending guidance does not serve the hard group; after the replacement it serves the guided one, then the released one', async () => {
      await group('run.t1', [0, 0], true);
      expect((await store.getGroup('train', 'run.t1'))!.state).toBe('pending_guidance');
      expect(await lease()).toBeNull();
      const stats = await store.stats('train');
      expect(stats.groups.pending_guidance).toBe(1);
      expect(stats.groups.ready).toBe(0);
      const listed = await store.listGroups({
        channel: 'train',
        state: 'pending_guidance',
        limit: 10,
        offset: 0,
      });
      expect(listed.items.map((g) => g.id)).toEqual(['run.t1']);
      expect(listed.items[0]!.pendingSince).not.toBeNull();

      // The hold survives a restart.
      store = poolOps(await h.reopen());
      expect((await store.getGroup('train', 'run.t1'))!.state).toBe('pending_guidance');
      expect(await lease()).toBeNull();

      // The guided replacement lands: it is served; the hard group is still not.
      await group('run.t1.guided', [1, 0], false);
      const first = await lease();
      expect(served(first)).toEqual(['run.t1.guided']);
      expect(await lease()).toBeNull();

      // Released as replaced: it goes on to ready, as it would have.
      const released = await store.releaseGuidanceHold('train', 'run.t1', 'replaced', tick());
      expect(released.state).toBe('ready');
      expect(released.guidanceHold).toBeNull();
      expect(served(await lease())).toEqual(['run.t1']);
      const events = await store.readEvents({ after: 0, limit: 500 });
      const kinds = events.filter((e) => e.data.group_id === 'run.t1').map((e) => e.type);
      expect(kinds).toContain('group_pending_guidance');
      expect(kinds).toContain('group_guidance_released');
      expect(kinds.indexOf('group_pending_guidance')).toBeLessThan(kinds.indexOf('group_guidance_released'));
    });

    it('a held group that is not hard becomes ready at once', async () => {
      await group('run.easy', [0, 1], true);
      expect((await store.getGroup('train', 'run.easy'))!.state).toBe('ready');
      expect(served(await lease())).toEqual(['run.easy']);
    });

    it('holds a ready group on request, refuses one already leased, and times a hold out', async () => {
      await group('a', [0, 0], false);
      await group('b', [0, 0], false);
      expect((await store.holdGroupForGuidance('train', 'a', tick())).state).toBe('pending_guidance');
      expect(served(await lease())).toEqual(['b']);
      await expect(store.holdGroupForGuidance('train', 'b', tick())).rejects.toBeInstanceOf(ConflictError);
      expect(await lease()).toBeNull();
      // The guide never came back: after the channel's timeout (6 h by default) the sweep releases it.
      now += 6 * 60 * 60 * 1000 + 10;
      const swept = await store.sweep(tick());
      expect(swept.guidanceReleased).toBe(1);
      const a = await store.getGroup('train', 'a');
      expect(a!.state).toBe('ready');
      expect(a!.pendingSince).toBeNull();
    });

    it('holding a pending group again restarts its timeout: a guide still at work is not timed out', async () => {
      await store.setChannelConfig('train', { guidance_hold_timeout_ms: 1000 }, tick());
      await group('slow', [0, 0], true);
      const since = (await store.getGroup('train', 'slow'))!.pendingSince!;
      now += 900;
      // The guide starts on the group (or refreshes its holds) before the timeout.
      const held = await store.holdGroupForGuidance('train', 'slow', tick());
      expect(held.state).toBe('pending_guidance');
      expect(held.pendingSince).toBe(now);
      now += 900; // past the first hold's timeout, within the second's
      expect(now - since).toBeGreaterThan(1000);
      expect((await store.sweep(tick())).guidanceReleased).toBe(0);
      expect(await lease()).toBeNull();
      now += 200; // and the guide went silent: the timeout releases it
      expect((await store.sweep(tick())).guidanceReleased).toBe(1);
      expect((await store.getGroup('train', 'slow'))!.state).toBe('ready');
    });

    it('an abandoned hold is released as it was, and releasing twice changes nothing', async () => {
      await group('c', [0, 0, 0], true);
      expect((await store.releaseGuidanceHold('train', 'c', 'abandoned', tick())).state).toBe('ready');
      expect((await store.releaseGuidanceHold('train', 'c', 'abandoned', tick())).state).toBe('ready');
      expect(served(await lease())).toEqual(['c']);
      expect((await store.stats('train')).groups.pending_guidance).toBe(0);
    });
  });
}
