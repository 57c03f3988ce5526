import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NewStep } from '../packages/core/src/domain/index.js';
import { type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import { startServer } from '../packages/core/src/server/server.js';
import { batchToJson } from '../packages/core/src/serving/json-batch.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { episode } from './support/steps.js';

/*
 * Serve-time curation on a real SQLite file: staleness, zero-variance, truncation and labels change
 * what a lease returns, the batch is refilled from later groups, and every decision is recorded with
 * its reason (events and counters).
 */

describe('curation at lease time', () => {
  let dir: string;
  let store: PoolOps;
  let now = 1_000_000;
  const tick = () => ++now;

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-curation-'));
    store = poolOps(await openSqliteStore({ path: join(dir, 'pool.db') }));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  /** One group of three 2-step rollouts with these rewards; `edit` may change a rollout's steps. */
  const group = async (
    channel: string,
    id: string,
    rewards: number[],
    edit?: (r: number, s: NewStep[]) => void,
  ) => {
    for (const [r, reward] of rewards.entries()) {
      const steps = episode(`${channel}-${id}-r${r}`, id, 2, reward, 10 * r + id.length);
      edit?.(r, steps);
      const [out] = await store.submitBatch([{ channel, nRollouts: rewards.length, steps }], tick());
      if (!out!.ok) throw out!.error;
    }
  };
  /** The same four groups, in this ready order: stale, flat (all 1), truncated, labelled. */
  const fill = async (channel: string) => {
    await group(channel, 'g-stale', [1, 0, 0]);
    await store.setPolicyVersion(2, tick());
    await group(channel, 'g-flat', [1, 1, 1]);
    await group(channel, 'g-trunc', [1, 0, 1], (r, steps) => {
      if (r === 2) steps[1]!.finishReason = 'length';
    });
    await group(channel, 'g-label', [0, 1, 0]);
    await store.addLabels(
      [{ trajectory_uid: `${channel}-g-label-r0`, step_index: 0, trainable: false }],
      tick(),
    );
  };
  const lease = (channel: string) =>
    store.leaseBatch(
      { channel, batchSize: 2, nRollouts: 3, maxStaleness: 1, consumer: 'trainer', ttlMs: 60_000 },
      tick(),
    );

  it('without curation the lease takes the oldest ready groups as they are', async () => {
    await store.setChannelConfig('raw', { stale_policy: 'flag' }, tick());
    await fill('raw');
    const batch = (await lease('raw'))!;
    expect(batch.groups.map((g) => g.group.id)).toEqual(['g-stale', 'g-flat']);
    expect(batch.groups.every((g) => g.excluded === undefined)).toBe(true);
  });

  it('with curation: stale and zero-variance groups are dropped and replaced, truncated rollouts left out, labels applied', async () => {
    await store.setChannelConfig(
      'train',
      { curation: { zero_variance: 'drop', truncated: 'exclude', min_trajectories: 2 } },
      tick(),
    );
    // A partial patch keeps the other curation settings.
    expect((await store.getChannelConfig('train')).curation).toEqual({
      zero_variance: 'drop',
      truncated: 'exclude',
      repetition: null,
      duplicates: 'keep',
      min_trajectories: 2,
    });
    const seqBefore = await store.lastEventSeq();
    await fill('train');
    const batch = (await lease('train'))!;
    // Refilled to the requested size from the groups behind the dropped ones.
    expect(batch.groups.map((g) => g.group.id)).toEqual(['g-trunc', 'g-label']);
    const [trunc, label] = batch.groups;
    expect(trunc!.trajectories.map((t) => t.trajectory.id)).toEqual(['train-g-trunc-r0', 'train-g-trunc-r1']);
    expect(trunc!.excluded).toEqual([
      { trajectoryId: 'train-g-trunc-r2', reason: 'truncated', reward: 1, detail: { step: 1 } },
    ]);
    // The human label still holds: the untrainable step is not served.
    const r0 = label!.trajectories.find((t) => t.trajectory.id === 'train-g-label-r0')!;
    expect(r0.steps.map((s) => s.index)).toEqual([1]);

    // Every decision is on record with its reason.
    const events = await store.readEvents({
      after: seqBefore,
      limit: 1000,
      channel: 'train',
      types: ['group_dropped', 'trajectory_excluded'],
    });
    expect(events.map((e) => [e.type, e.data])).toEqual([
      ['group_dropped', { group_id: 'g-stale', reason: 'stale' }],
      ['group_dropped', { group_id: 'g-flat', reason: 'zero_variance' }],
      [
        'trajectory_excluded',
        { group_id: 'g-trunc', trajectory_id: 'train-g-trunc-r2', reason: 'truncated', detail: { step: 1 } },
      ],
    ]);
    const stats = await store.stats('train');
    expect(stats.dropped).toMatchObject({ stale: 1, zero_variance: 1 });
    expect(stats.excluded).toEqual({ truncated: 1 });
    expect(stats.groups).toMatchObject({ dropped: 2, leased: 2 });
    expect(batch.lease.groupIds.sort()).toEqual(['g-label', 'g-trunc']);

    // Metrics over kept and dropped data: the all-solved group curation dropped still counts.
    // Kept: trunc r0, r1 (1, 0) and label r0-r2 (0, 1, 0); dropped: trunc r2 (1) and flat (1, 1, 1).
    expect(batch.dropped).toEqual([{ groupId: 'g-flat', reason: 'zero_variance', rewards: [1, 1, 1] }]);
    const wire = batchToJson(batch).curation;
    expect(wire.dropped_groups).toEqual([
      { group_id: 'g-flat', reason: 'zero_variance', rewards: [1, 1, 1] },
    ]);
    expect(wire.metrics.kept).toEqual({ trajectories: 5, mean_reward: 2 / 5 });
    expect(wire.metrics.dropped).toEqual({ trajectories: 4, mean_reward: 1 });
    expect(wire.metrics.all.trajectories).toBe(9);
    expect(wire.metrics.all.mean_reward).toBeCloseTo(6 / 9, 12);
    expect(stats.curation.kept).toEqual({ groups: 2, trajectories: 5, meanReward: 2 / 5 });
    expect(stats.curation.dropped).toEqual({ groups: 1, trajectories: 4, meanReward: 1 });
    expect(stats.curation.all.groups).toBe(3);
    expect(stats.curation.all.meanReward).toBeCloseTo(6 / 9, 12);
    // A channel without curation tallies nothing.
    expect((await store.stats('raw')).curation.all).toEqual({ groups: 0, trajectories: 0, meanReward: null });
  });

  it('a group the filters leave too small is dropped, not served short', async () => {
    await store.setChannelConfig(
      'train',
      { curation: { truncated: 'exclude', min_trajectories: 3 } },
      tick(),
    );
    await group('train', 'g-a', [1, 0, 1], (r, steps) => {
      if (r === 0) steps[0]!.finishReason = 'length';
    });
    expect(await lease('train')).toBeNull();
    const g = await store.getGroup('train', 'g-a');
    expect(g).toMatchObject({ state: 'dropped', dropReason: 'too_few_after_curation' });
  });

  it('over HTTP: a bad curation setting is a 400 naming its field and changes nothing', async () => {
    const server = await startServer({ dbPath: join(dir, 'http.db'), port: 0, engines: ['sim'] });
    try {
      const put = (body: unknown) =>
        fetch(`${server.url}/v1/channels/train`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify(body),
        });
      const bad = await put({ curation: { zero_variance: 'sometimes' } });
      expect(bad.status).toBe(400);
      expect(JSON.stringify(await bad.json())).toContain('curation.zero_variance');
      const ok = await put({ curation: { repetition: { ngram: 4, max_fraction: 0.6 } } });
      expect(ok.status).toBe(200);
      const { config } = (await (await fetch(`${server.url}/v1/channels/train`)).json()) as {
        config: { curation: unknown };
      };
      // The bad PUT changed nothing; the good one changed only what it named.
      expect(config.curation).toEqual({
        zero_variance: 'keep',
        truncated: 'keep',
        repetition: { ngram: 4, max_fraction: 0.6 },
        duplicates: 'keep',
        min_trajectories: 1,
      });
    } finally {
      await server.close();
    }
  });
});
