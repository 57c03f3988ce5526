import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, Page } from 'playwright-core';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { NewStep } from '../packages/core/src/domain/index.js';
import { type PoolOps, poolOps } from '../packages/core/src/pool/core.js';
import type { LeaseParams } from '../packages/core/src/pool/types.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { chromiumReady, dashboardFixture, openPage, screenshot } from './support/browser.js';
import { episode, makeStep } from './support/steps.js';

/*
 * The events, batches and gym pages: first the store reads behind them (previewBatch, listLeases,
 * gymRuns) against a plain SQLite store with values worked out by hand, then the pages in a real
 * browser over a demo-filled store: live events, the next-batch preview against the lease that
 * follows it, and the gym run's scores against its trajectories.
 */

describe('dashboard store reads (SQLite)', () => {
  let dir: string;
  let store: PoolOps;
  let now = 1_000_000;
  const tick = (ms = 1) => {
    now += ms;
    return now;
  };
  const submit = async (steps: NewStep[], channel: string, nRollouts: number | null) => {
    const [outcome] = await store.submitBatch([{ channel, nRollouts, steps }], tick());
    if (!outcome!.ok) throw outcome!.error;
  };
  /** One group of rollouts with these rewards; rollout r has `steps` steps and seed `seeds[r]`. */
  const group = async (channel: string, id: string, rewards: number[], steps = 2, seeds?: number[]) => {
    for (const [r, reward] of rewards.entries())
      await submit(episode(`${id}-r${r}`, id, steps, reward, seeds?.[r] ?? r + 1), channel, rewards.length);
  };
  const params = (over: Partial<LeaseParams>): LeaseParams => ({
    channel: 'c',
    batchSize: 2,
    nRollouts: null,
    maxStaleness: null,
    consumer: 'trainer',
    ttlMs: 60_000,
    ...over,
  });

  beforeEach(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-dash-store-'));
    store = poolOps(await openSqliteStore({ path: join(dir, 'store.db') }));
  });
  afterEach(async () => {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('previewBatch rehearses the next lease in order, changes nothing, and the lease then does the same', async () => {
    await group('c', 'g1', [1, 0]);
    await group('c', 'g2', [1, 1]);
    await group('c', 'g3', [0, 1], 3);
    await group('c', 'g4', [1, 0]);
    await store.setChannelConfig('c', { curation: { zero_variance: 'drop' } }, tick());
    await store.addLabels([{ trajectory_uid: 'g1-r0', step_index: 0, trainable: false }], tick());
    const seq = await store.lastEventSeq();
    const before = await store.stats('c');

    const preview = await store.previewBatch(params({}));
    // g2's rewards are all 1: dropped, and g3 takes its place; g4 is never looked at (2 served).
    expect(preview.map((p) => [p.group.id, p.decision, p.staleness])).toEqual([
      ['g1', 'serve', 0],
      ['g2', 'zero_variance', 0],
      ['g3', 'serve', 0],
    ]);
    expect(preview[0]!.served.map((t) => [t.trajectory.id, t.steps, t.trainableSteps])).toEqual([
      ['g1-r0', 2, 1],
      ['g1-r1', 2, 2],
    ]);
    expect(preview[1]!.served).toEqual([]);
    expect(preview[2]!.served.map((t) => [t.trajectory.id, t.steps, t.trainableSteps])).toEqual([
      ['g3-r0', 3, 3],
      ['g3-r1', 3, 3],
    ]);
    // Nothing changed: no event, no counter, every group still ready.
    expect(await store.lastEventSeq()).toBe(seq);
    expect(await store.stats('c')).toEqual(before);
    expect(before.groups.ready).toBe(4);

    const batch = (await store.leaseBatch(params({}), tick()))!;
    expect(batch.groups.map((g) => g.group.id)).toEqual(['g1', 'g3']);
    expect(batch.dropped?.map((d) => [d.groupId, d.reason])).toEqual([['g2', 'zero_variance']]);
    expect(batch.groups[0]!.trajectories.map((t) => [t.trajectory.id, t.steps.length])).toEqual([
      ['g1-r0', 1],
      ['g1-r1', 2],
    ]);
    // The next rehearsal starts where the lease left off: g4 alone (one served of two asked).
    expect((await store.previewBatch(params({}))).map((p) => [p.group.id, p.decision])).toEqual([
      ['g4', 'serve'],
    ]);
  });

  it('previewBatch: staleness, group size and excluded trajectories as the lease sees them', async () => {
    // h1: 3 rollouts, r1 repeats r0 token for token (same seed): excluded as a duplicate.
    await group('d', 'h1', [1, 0, 0], 2, [1, 1, 2]);
    await group('d', 'h2', [1, 0]);
    await store.setChannelConfig('d', { curation: { duplicates: 'exclude' } }, tick());
    await store.setPolicyVersion(2, tick());

    // Both groups' steps are version 0: staleness 2. The channel has no limit: both served.
    const open = await store.previewBatch(params({ channel: 'd', batchSize: 2 }));
    expect(open.map((p) => [p.group.id, p.decision, p.staleness])).toEqual([
      ['h1', 'serve', 2],
      ['h2', 'serve', 2],
    ]);
    expect(open[0]!.served.map((t) => t.trajectory.id)).toEqual(['h1-r0', 'h1-r2']);
    expect(open[0]!.excluded).toEqual([{ trajectoryId: 'h1-r1', reason: 'duplicate', reward: 0 }]);
    expect(open[1]!.excluded).toEqual([]);

    // Asked for groups of 2: h1 (3 rollouts) is not looked at.
    const sized = await store.previewBatch(params({ channel: 'd', batchSize: 1, nRollouts: 2 }));
    expect(sized.map((p) => [p.group.id, p.decision])).toEqual([['h2', 'serve']]);

    // At most 1 behind: both stale, dropped (stale_policy drop), nothing served.
    const strict = await store.previewBatch(params({ channel: 'd', batchSize: 1, maxStaleness: 1 }));
    expect(strict.map((p) => [p.group.id, p.decision, p.served.length])).toEqual([
      ['h1', 'stale', 0],
      ['h2', 'stale', 0],
    ]);
    // The lease agrees: nothing to serve (and it drops both on the way).
    expect(
      await store.leaseBatch(params({ channel: 'd', batchSize: 1, maxStaleness: 1 }), tick()),
    ).toBeNull();
    expect((await store.stats('d')).dropped).toEqual({ stale: 2 });
  });

  it('listLeases pages through leases newest first, per channel, with their states', async () => {
    for (const g of ['a1', 'a2', 'a3', 'a4']) await group('c', g, [1, 0]);
    await group('x', 'b1', [1, 0]);
    const lease = async (channel = 'c', ttlMs = 60_000) =>
      (await store.leaseBatch(params({ channel, batchSize: 1, ttlMs }), tick(10)))!.lease;
    const l1 = await lease('c', 1_000); // expires
    const l2 = await lease();
    const l3 = await lease();
    const lx = await lease('x');
    await store.ackLease(l2.id, tick());
    await store.nackLease(l3.id, tick());
    const swept = tick(5_000);
    await store.sweep(swept);
    const l4 = await lease(); // a4, or a nacked group back in the queue
    const page1 = await store.listLeases({ channel: 'c', limit: 2, offset: 0 });
    expect(page1.total).toBe(4);
    expect(page1.items.map((l) => [l.id, l.state])).toEqual([
      [l4.id, 'active'],
      [l3.id, 'nacked'],
    ]);
    const page2 = await store.listLeases({ channel: 'c', limit: 2, offset: 2 });
    expect(page2.items.map((l) => [l.id, l.state])).toEqual([
      [l2.id, 'acked'],
      [l1.id, 'expired'],
    ]);
    expect(page2.items[1]).toMatchObject({ consumer: 'trainer', groupIds: ['a1'], endedAt: swept });
    expect(page2.items[1]!.expiresAt).toBe(l1.createdAt + 1_000);
    const all = await store.listLeases({ limit: 10, offset: 0 });
    expect(all.total).toBe(5);
    expect(all.items.map((l) => l.id)).toEqual([l4.id, lx.id, l3.id, l2.id, l1.id]);
    expect((await store.listLeases({ channel: 'none', limit: 10, offset: 0 })).total).toBe(0);
  });

  it('gymRuns: runs from trajectory metadata, scored as by hand', async () => {
    const sample = async (
      channel: string,
      id: string,
      run: string,
      task: string,
      category: string | null,
      outcome: number | 'infra' | 'open',
      extra: { probe?: boolean; derivedFrom?: string } = {},
    ) => {
      await store.createTrajectory(
        {
          id,
          groupId: `${run}-${task}`,
          channel,
          nRollouts: null,
          taskId: task,
          metadata: { run_id: run, task_id: task, ...(category === null ? {} : { category }) },
          ...extra,
        },
        tick(),
      );
      if (outcome === 'infra') {
        await submit([makeStep(id, `${run}-${task}`, 0, [1, 2], [3])], channel, null);
        return store.completeTrajectory(id, { status: 'infra_failed', reward: null }, tick());
      }
      if (outcome === 'open') return submit([makeStep(id, `${run}-${task}`, 0, [1, 2], [3])], channel, null);
      return submit(episode(id, `${run}-${task}`, 2, outcome), channel, null);
    };
    await sample('gym', 'a0', 'r1', 'A', 'math', 1);
    const r1Started = now;
    await sample('gym', 'a1', 'r1', 'A', 'math', 0);
    await sample('gym', 'b0', 'r1', 'B', 'code', 0.5);
    await sample('gym', 'b1', 'r1', 'B', 'code', 0);
    await sample('gym', 'probe', 'r1', 'B', 'code', 1, { probe: true }); // not a sample
    await sample('gym', 'copy', 'r1', 'A', 'math', 1, { derivedFrom: 'a1' }); // not a sample
    await sample('gym', 'b2', 'r1', 'B', 'code', 'infra');
    const r1Finished = now;
    await sample('gym2', 'c0', 'r2', 'C', null, 1);
    const r2Started = now - 1; // c0 was created one tick before its steps
    await sample('gym2', 'c1', 'r2', 'C', null, 'open');

    const runs = await store.gymRuns();
    expect(runs.map((r) => r.runId)).toEqual(['r2', 'r1']); // newest first
    const [r2, r1] = runs;
    // r1: scored samples 1, 0, 0.5, 0 (the infra failure counts as a sample, not a score).
    expect(r1).toEqual({
      runId: 'r1',
      channel: 'gym',
      startedAt: r1Started - 1,
      finishedAt: r1Finished,
      tasks: 2,
      samples: 5,
      infraFailed: 1,
      meanScore: 0.375,
      passAt1: 0.25,
      passAtK: 0.5,
      categories: [
        { category: 'code', tasks: 1, samples: 3, meanScore: 0.25 },
        { category: 'math', tasks: 1, samples: 2, meanScore: 0.5 },
      ],
    });
    // r2: one sample still open, so the run is still running.
    expect(r2).toEqual({
      runId: 'r2',
      channel: 'gym2',
      startedAt: r2Started,
      finishedAt: null,
      tasks: 1,
      samples: 2,
      infraFailed: 0,
      meanScore: 1,
      passAt1: 1,
      passAtK: 1,
      categories: [{ category: 'uncategorized', tasks: 1, samples: 2, meanScore: 1 }],
    });
    expect((await store.gymRuns(1)).map((r) => r.runId)).toEqual(['r2']);
  });
});

describe.skipIf(!chromiumReady)('dashboard pages: events, batches, gym', () => {
  let dir: string;
  let server: RunningServer;
  let browser: Browser;
  dashboardFixture('dash-pages', (c) => {
    ({ dir, server, browser } = c);
  });

  const submitEpisode = async (channel: string, id: string, reward = 1, nRollouts = 1) => {
    const [out] = await server.pool.store.submitBatch(
      [{ channel, nRollouts, steps: episode(id, `${id}-g`, 2, reward, 5) }],
      Date.now(),
    );
    expect(out!.ok).toBe(true);
  };
  const rowSeqs = (page: Page) =>
    page.$$eval('#ev-rows tr[data-seq]', (rows) => rows.map((r) => Number(r.getAttribute('data-seq'))));
  const rowTexts = (page: Page) =>
    page.$$eval('#ev-rows tr[data-seq]', (rows) =>
      Object.fromEntries(rows.map((r) => [r.getAttribute('data-seq'), r.textContent])),
    );

  it('events: the latest events at load, then new ones live on top; pause holds them, sources filter', async () => {
    const { page, problems } = await openPage(browser);
    const cursor = await server.pool.store.lastEventSeq();
    await page.goto(`${server.url}/dashboard/events`);
    const first = await rowSeqs(page);
    // Server-rendered: the latest 50, newest first.
    expect(first).toEqual(Array.from({ length: Math.min(50, cursor) }, (_, i) => cursor - i));
    await page.waitForSelector('#event-log[data-state="live"]');
    await screenshot(page, 'events');

    await submitEpisode('ev-live', 'ev-live-1');
    const link = '#ev-rows a[href="/dashboard/trajectories/ev-live-1"]';
    await page.waitForSelector(link, { timeout: 10_000 });
    // trajectory_completed, group_ready, steps_submitted: all on top, newest first.
    await page.waitForFunction(`document.querySelector('#ev-rows tr').dataset.seq === '${cursor + 3}'`);
    const live = await rowSeqs(page);
    expect(live.slice(0, 4)).toEqual([cursor + 3, cursor + 2, cursor + 1, cursor]);
    expect(await page.locator('#ev-rows tr[data-seq]').count()).toBe(first.length + 3);
    const typesLive = await page.$$eval('#ev-rows tr[data-seq]', (rows) =>
      rows.slice(0, 3).map((r) => r.querySelector('.tag')!.textContent),
    );
    expect(typesLive.sort()).toEqual(['group_ready', 'steps_submitted', 'trajectory_completed']);
    // What the script rendered live reads exactly as what the server renders on a reload.
    const liveTexts = await rowTexts(page);

    // Paused: new events are held, not shown; resumed: they appear.
    // By keyboard: the button is reachable and answers Enter.
    await page.getByRole('button', { name: 'Pause' }).focus();
    await page.keyboard.press('Enter');
    await submitEpisode('ev-live', 'ev-live-2');
    await page.waitForFunction(`/3 new events held/.test(document.getElementById('ev-status').textContent)`);
    expect(await page.locator('#ev-rows a[href="/dashboard/trajectories/ev-live-2"]').count()).toBe(0);
    await page.getByRole('button', { name: 'Resume' }).click();
    expect(
      await page.locator('#ev-rows a[href="/dashboard/trajectories/ev-live-2"]').count(),
    ).toBeGreaterThan(0);
    expect((await rowSeqs(page))[0]).toBe(cursor + 6);

    // The signal-source filter applies in place: only the verifier's signals stay visible.
    await page.getByLabel('Signal source').selectOption('verifier');
    const visible = await page.$$eval('#ev-rows tr[data-seq]:not([hidden])', (rows) =>
      rows.map((r) => r.getAttribute('data-source')),
    );
    expect(visible.length).toBeGreaterThan(0);
    expect(new Set(visible)).toEqual(new Set(['verifier']));
    // A judge's signal arrives: its row comes in hidden.
    await server.pool.addSignals([
      { trajectoryId: 'ev-live-1', stepIndex: null, name: 'judged', value: 0.5, source: 'judge' },
    ]);
    await page.waitForSelector(`#ev-rows tr[data-seq="${cursor + 7}"]`, { state: 'attached' });
    expect(await page.locator(`#ev-rows tr[data-seq="${cursor + 7}"]`).isHidden()).toBe(true);

    await page.reload();
    const reloaded = await rowTexts(page);
    for (let s = cursor + 1; s <= cursor + 3; s++) expect(reloaded[String(s)]).toBe(liveTexts[String(s)]);
    expect(problems).toEqual([]);
  });

  it('events: channel and type filters apply to the first render and to the stream; the table keeps 500 rows', async () => {
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/events`);
    await page.getByLabel('Channel', { exact: true }).fill('ev-filtered');
    await page.getByLabel('trajectory_completed').check();
    await page.getByRole('button', { name: 'Apply' }).click();
    await page.waitForURL(/channel=ev-filtered/);
    expect(await page.locator('#ev-rows tr[data-seq]').count()).toBe(0);
    await page.waitForSelector('#event-log[data-state="live"]');
    await submitEpisode('ev-other', 'ev-other-1');
    await submitEpisode('ev-filtered', 'ev-filtered-1');
    await page.waitForSelector('#ev-rows a[href="/dashboard/trajectories/ev-filtered-1"]');
    const rows = await page.$$eval('#ev-rows tr[data-seq]', (trs) =>
      trs.map((r) => [r.querySelector('.tag')!.textContent, r.children[3]!.textContent]),
    );
    expect(rows).toEqual([['trajectory_completed', 'ev-filtered']]);

    // 600 trajectories in one batch: 1,201 events; the page keeps the newest 500.
    const { page: all, problems: allProblems } = await openPage(browser);
    await all.goto(`${server.url}/dashboard/events`);
    await all.waitForSelector('#event-log[data-state="live"]');
    const requests = Array.from({ length: 600 }, (_, i) => ({
      channel: 'ev-bulk',
      nRollouts: 1,
      steps: episode(`bulk-${i}`, `bulk-g${i}`, 1, 1, 3),
    }));
    const outcomes = await server.pool.store.submitBatch(requests, Date.now());
    expect(outcomes.every((o) => o.ok)).toBe(true);
    const last = await server.pool.store.lastEventSeq();
    await all.waitForFunction(`document.querySelector('#ev-rows tr').dataset.seq === '${last}'`, undefined, {
      timeout: 15_000,
    });
    const seqs = await rowSeqs(all);
    expect(seqs).toEqual(Array.from({ length: 500 }, (_, i) => last - i));
    expect(problems).toEqual([]);
    expect(allProblems).toEqual([]);
  });

  it('events: with API keys, the signed-in browser follows the stream on its cookie', async () => {
    const keyed = await startServer({
      dbPath: join(dir, 'keyed.db'),
      port: 0,
      engines: ['sim'],
      apiKeys: ['admin-key-0123456789:admin'],
    });
    try {
      const { page, problems } = await openPage(browser);
      await page.goto(`${keyed.url}/dashboard/login?next=/dashboard/events`);
      await page.getByLabel('API key').fill('admin-key-0123456789');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${keyed.url}/dashboard/events`);
      await page.waitForSelector('#event-log[data-state="live"]');
      const [out] = await keyed.pool.store.submitBatch(
        [{ channel: 'keyed', nRollouts: 1, steps: episode('keyed-1', 'keyed-g', 2, 1, 5) }],
        Date.now(),
      );
      expect(out!.ok).toBe(true);
      await page.waitForSelector('#ev-rows a[href="/dashboard/trajectories/keyed-1"]', { timeout: 10_000 });
      expect(problems).toEqual([]);
    } finally {
      await keyed.close();
    }
  });

  it('batches: the preview is what the next lease serves, and the lease then shows in the history', async () => {
    const ch = 'preview';
    const groups: [string, number[]][] = [
      ['pg1', [1, 0]],
      ['pg2', [1, 1]],
      ['pg3', [0, 1]],
    ];
    for (const [g, rewards] of groups) {
      const [out] = await server.pool.store.submitBatch(
        rewards.map((reward, r) => ({
          channel: ch,
          nRollouts: 2,
          steps: episode(`${g}-r${r}`, g, 2, reward, r),
        })),
        Date.now(),
      );
      expect(out!.ok).toBe(true);
    }
    await server.pool.configureChannel(ch, { curation: { zero_variance: 'drop' } });

    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/batches`);
    await page.getByLabel('Channel', { exact: true }).fill(ch);
    await page.getByLabel('Batch size (groups)').fill('2');
    await page.getByRole('button', { name: 'Preview' }).click();
    await page.waitForURL(/channel=preview/);
    const decisions = await page.$$eval('table.preview tbody tr', (rows) =>
      rows.map((r) => [r.getAttribute('data-group-id'), r.getAttribute('data-decision')]),
    );
    expect(decisions).toEqual([
      ['pg1', 'serve'],
      ['pg2', 'zero_variance'],
      ['pg3', 'serve'],
    ]);
    const summary = await page.locator('#preview-summary').textContent();
    expect(summary).toContain('2 of 2 groups served (4 trajectories, 8 trainable of 8 steps)');
    expect(summary).toContain('1 dropped (zero_variance ×1)');
    const settings = page.locator('dl.config');
    expect(await settings.textContent()).toContain('curation.zero_variancedrop');
    expect(await page.locator('table.preview a[href="/dashboard/trajectories/pg1-r0"]').count()).toBe(1);
    await screenshot(page, 'batches');

    const batch = (await server.pool.lease({
      channel: ch,
      batch_size: 2,
      wait_ms: 0,
      consumer: 'page-test',
      ttl_ms: 60_000,
    }))!;
    const served = decisions.filter(([, d]) => d === 'serve').map(([g]) => g);
    expect(batch.groups.map((g) => g.group.id)).toEqual(served);
    expect(batch.dropped?.map((d) => d.groupId)).toEqual(['pg2']);

    await page.reload();
    await screenshot(page, 'batches-after-lease');
    const row = page.locator('table.leases tbody tr').first();
    expect(await row.getAttribute('data-lease-id')).toBe(batch.lease.id);
    const cells = await row.locator('td').allTextContents();
    expect(cells[1]).toBe('page-test');
    expect(cells[2]).toBe('active');
    expect(cells[3]).toContain('2 groups');
    expect(cells[4]).toBe(
      String(batch.groups.reduce((n, g) => n + g.trajectories.reduce((m, t) => m + t.steps.length, 0), 0)),
    );
    expect(await page.locator('table.preview').count()).toBe(0);
    expect(problems).toEqual([]);
  });

  it('gym: the demo run with the scores gymRuns computes, which are its trajectories’ scores', async () => {
    const runs = await server.pool.store.gymRuns();
    expect(runs.length).toBeGreaterThan(0);
    const run = runs[0]!;
    // Cross-check: the mean reward of the run's complete, scored trajectories.
    const trajectories = await server.pool.listTrajectories({ channel: run.channel, limit: 1000, offset: 0 });
    const scored = trajectories.items.filter(
      (t) => t.metadata.run_id === run.runId && t.status === 'complete' && t.reward !== null && !t.probe,
    );
    expect(scored.length).toBeGreaterThan(0);
    const mean = scored.reduce((s, t) => s + t.reward!, 0) / scored.length;
    expect(run.meanScore).toBeCloseTo(mean, 12);

    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/gym`);
    const row = page.locator(`tr[data-run-id="${run.runId}"]`);
    expect(await row.locator('[data-field="mean-score"]').textContent()).toBe(mean.toFixed(3));
    expect(await row.locator('th, td').allTextContents()).toContain(String(run.samples));
    const bars = page.getByRole('figure', { name: `Mean score by category: ${run.runId} (${run.channel})` });
    expect(await bars.locator('.bar-row').count()).toBe(run.categories.length);
    // The newest run's tasks, each linking into its trajectories.
    const tasks = await page.$$eval('table.tasks tbody a', (as) => as.map((a) => a.getAttribute('href')));
    expect(tasks).toHaveLength(run.tasks);
    const taskIds = [...new Set(scored.map((t) => t.taskId))].sort();
    expect(tasks.sort()).toEqual(
      taskIds.map(
        (t) => `/dashboard/trajectories?${new URLSearchParams({ channel: run.channel, task: t! })}`,
      ),
    );
    await screenshot(page, 'gym');
    expect(problems).toEqual([]);
  });
});
