import type { Browser } from 'playwright-core';
import { beforeAll, describe, expect, it } from 'vitest';
import { purifyStore } from '../packages/core/src/curation/cleaner/derive.js';
import { parseListFilters } from '../packages/core/src/dashboard/pages/trajectories/filters.js';
import {
  isStepIndex,
  labelsFromForm,
  parseBulk,
  safeListUrl,
} from '../packages/core/src/dashboard/pages/trajectories/label-forms.js';
import type { Step, Trajectory } from '../packages/core/src/domain/index.js';
import type { RunningServer } from '../packages/core/src/server/server.js';
import { packPrefixTree } from '../packages/core/src/serving/packing.js';
import { contentText, loadQwen3Tokenizer } from '../packages/core/src/text/index.js';
import { chromiumReady, dashboardFixture, openPage, screenshot } from './support/browser.js';
import { episode, makeStep } from './support/steps.js';

/*
 * The trajectory pages in a real browser against a demo-filled store: the list agrees with the
 * store's own query, a trajectory shows its real conversation, tool errors and signals, provenance
 * (CLEANER's derivations, ActGuide's hint) is drawn, curation done in the page changes what the next
 * lease serves, and a group's prefix tree is the one the packer builds.
 */

const HINT = 'Hint: read input/VERSION before you write anything.';

describe('trajectory pages: forms', () => {
  it('turns the filter form into a store query; "any" and blanks are no filter', () => {
    const parsed = parseListFilters({
      channel: 'train',
      group: '',
      reward_min: '0.5',
      status: 'any',
      trainable: 'no',
      guided: 'yes',
      derived: 'any',
      policy_version: '3',
      page: '3',
    });
    expect(parsed).toMatchObject({
      ok: true,
      page: 3,
      query: {
        channel: 'train',
        rewardMin: 0.5,
        trainable: false,
        guided: true,
        policyVersion: 3,
        limit: 50,
        offset: 100,
      },
    });
    if (parsed.ok)
      expect(Object.keys(parsed.query).sort()).toEqual(
        ['channel', 'guided', 'limit', 'offset', 'policyVersion', 'rewardMin', 'trainable'].sort(),
      );
  });

  it('names every bad filter field, and keeps what was typed', () => {
    const parsed = parseListFilters({
      channel: 'bad channel!',
      reward_max: '1e',
      quality: 'great',
      page: '0',
    });
    expect(parsed.ok).toBe(false);
    if (parsed.ok) return;
    expect(parsed.errors.map((e) => e.split(':')[0])).toEqual([
      'Channel (channel)',
      'Reward max (reward_max)',
      'Quality (quality)',
      'Page (page)',
    ]);
    expect(parsed.values.channel).toBe('bad channel!');
    expect(parseListFilters({ reward_min: '2', reward_max: '1' })).toMatchObject({ ok: false });
  });

  it('labels the trajectory or the chosen steps; blank fields keep, tags add, remove or replace', () => {
    const current = [
      { trajectoryId: 't', stepIndex: 2, quality: null, trainable: null, tags: ['a', 'b'], note: null },
    ];
    const base = { steps: [], quality: 'keep', trainable: 'keep', tags: '', tagMode: 'add', note: '' };
    const ok = isStepIndex;
    expect(labelsFromForm('t', { ...base, trainable: 'no' }, ok, current)).toEqual({
      labels: [{ trajectory_uid: 't', trainable: false, author: 'dashboard' }],
      errors: [],
    });
    const add = labelsFromForm('t', { ...base, steps: ['2', '3'], tags: 'c, a' }, ok, current);
    expect(add.labels).toEqual([
      { trajectory_uid: 't', step_index: 2, tags: ['a', 'b', 'c'], author: 'dashboard' },
      { trajectory_uid: 't', step_index: 3, tags: ['c', 'a'], author: 'dashboard' },
    ]);
    const remove = labelsFromForm('t', { ...base, steps: ['2'], tags: 'a', tagMode: 'remove' }, ok, current);
    expect(remove.labels[0]!.tags).toEqual(['b']);
    const clear = labelsFromForm('t', { ...base, tagMode: 'replace', quality: 'clear' }, ok, current);
    expect(clear.labels).toEqual([{ trajectory_uid: 't', quality: null, tags: [], author: 'dashboard' }]);
    expect(labelsFromForm('t', base, ok, current).errors[0]).toContain('Nothing to change');
    const bad = labelsFromForm(
      't',
      { ...base, steps: ['x'], quality: 'great', tags: 'y'.repeat(65) },
      ok,
      current,
    );
    expect(bad.labels).toEqual([]);
    expect(bad.errors.map((e) => e.split(':')[0])).toEqual([
      'Steps (step)',
      'Quality (quality)',
      'Tags (tags)',
    ]);
  });

  it('checks the bulk form and only returns to a list URL', () => {
    expect(parseBulk({ action: 'tag', back: '/dashboard/trajectories?channel=x' }).errors).toEqual([
      'Trajectories (id): choose at least one row',
      'Tag (tag): give exactly one tag to add',
    ]);
    const { request, errors } = parseBulk({
      id: ['a', 'b', 'a'],
      action: 'untrainable',
      back: 'https://evil.example/',
    });
    expect(errors).toEqual([]);
    expect(request).toMatchObject({
      ids: ['a', 'b'],
      action: 'untrainable',
      back: '/dashboard/trajectories',
    });
    expect(safeListUrl('/dashboard/trajectories?tag=x&page=2')).toBe('/dashboard/trajectories?tag=x&page=2');
    expect(safeListUrl('/dashboard/trajectories/../login')).toBe('/dashboard/trajectories');
  });
});

describe.skipIf(!chromiumReady)('dashboard: trajectories', () => {
  let server: RunningServer;
  let browser: Browser;
  let purified: { source: string; derived: string }[];

  dashboardFixture('dash-traj', (c) => {
    ({ server, browser } = c);
  });
  beforeAll(async () => {
    const store = server.pool.store;
    // Provenance: CLEANER's offline purification of the demo's runs (they have tool errors).
    const summary = await purifyStore(store, { channel: 'train' });
    purified = summary.trajectories.filter((t) => t.outcome === 'purified');
    // A guided rollout: the engine saw the hint, the trainer is given the prompt without it.
    const tk = loadQwen3Tokenizer();
    const training = tk.encode(
      '<|im_start|>user\nWrite the release notes.<|im_end|>\n<|im_start|>assistant\n',
    );
    const engine = tk.encode(
      `<|im_start|>user\nWrite the release notes.\n${HINT}<|im_end|>\n<|im_start|>assistant\n`,
    );
    await server.pool.createTrajectory({
      id: 'guided-1',
      groupId: 'guided-g',
      channel: 'guide',
      nRollouts: 1,
      metadata: { guidance: { kind: 'guided', k: 1, hint: HINT } },
      guided: true,
      guidanceK: 1,
    });
    const response = tk.encode('I will read the version first.');
    const [guided] = await store.submitBatch(
      [
        {
          channel: 'guide',
          nRollouts: 1,
          steps: [
            makeStep('guided-1', 'guided-g', 0, engine, response, {
              trainingPromptIds: training,
              responseLogprobs: response.map((_, i) => -i / 4),
              isLast: true,
              reward: 1,
            }),
          ],
        },
      ],
      Date.now(),
    );
    expect(guided!.ok).toBe(true);
    // Sixty one-step trajectories: more than a page.
    const [bulk] = await store.submitBatch(
      [
        {
          channel: 'bulk',
          nRollouts: 1,
          steps: Array.from({ length: 60 }, (_, i) =>
            episode(`bulk-${i}`, `bulk-g${i}`, 1, i % 2, i + 1),
          ).flat(),
        },
      ],
      Date.now(),
    );
    expect(bulk!.ok).toBe(true);
  }, 240_000);

  /** A demo trajectory whose steps record a failed tool call. */
  async function trajectoryWithToolError(): Promise<{ t: Trajectory; steps: Step[] }> {
    const page = await server.pool.listTrajectories({ channel: 'train', limit: 100, offset: 0 });
    for (const t of page.items) {
      const steps = await server.pool.getTrajectorySteps(t.id);
      if (steps.some((s) => s.toolResults?.some((r) => r.error))) return { t, steps };
    }
    throw new Error('the demo store has no tool errors');
  }

  it('lists what listTrajectories finds for the filters, 50 a page, with next/previous links', async () => {
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/trajectories`);
    await page.getByLabel('Channel').fill('train');
    await page.getByLabel('Reward min').fill('1');
    await page.getByLabel('Status').selectOption('complete');
    await page.getByRole('button', { name: 'Filter' }).click();
    await page.waitForURL(/reward_min=1/);
    const expected = await server.pool.listTrajectories({
      channel: 'train',
      rewardMin: 1,
      status: 'complete',
      limit: 1,
      offset: 0,
    });
    expect(expected.total).toBeGreaterThan(0);
    expect(await page.locator('#traj-total').textContent()).toBe(String(expected.total));
    expect(await page.locator('table.trajectories tbody tr').count()).toBe(Math.min(50, expected.total));
    await screenshot(page, 'trajectories-list');

    // Paging: 60 in the bulk channel.
    await page.goto(`${server.url}/dashboard/trajectories?channel=bulk`);
    expect(await page.locator('#traj-total').textContent()).toBe('60');
    expect(await page.locator('table.trajectories tbody tr').count()).toBe(50);
    await page.getByRole('link', { name: 'next →' }).click();
    await page.waitForURL(/page=2/);
    expect(await page.locator('table.trajectories tbody tr').count()).toBe(10);
    await page.getByRole('link', { name: '← previous' }).click();
    await page.waitForURL((u) => !u.search.includes('page='));
    expect(await page.locator('table.trajectories tbody tr').count()).toBe(50);
    // Guided and derived trajectories are found by their flags.
    await page.goto(`${server.url}/dashboard/trajectories?derived=yes`);
    const derived = await server.pool.listTrajectories({ derived: true, limit: 1, offset: 0 });
    expect(await page.locator('#traj-total').textContent()).toBe(String(derived.total));
    await page.goto(`${server.url}/dashboard/trajectories?guided=yes`);
    expect(await page.locator('#traj-total').textContent()).toBe('1');
    expect(problems).toEqual([]);
  });

  it('answers invalid filters with a message naming the field, not a failure', async () => {
    const { page, problems } = await openPage(browser);
    const url = `${server.url}/dashboard/trajectories?reward_min=abc&policy_version=-1&derived=maybe`;
    const response = await page.goto(url);
    expect(response!.status()).toBe(400);
    const alert = (await page.getByRole('alert').textContent())!;
    expect(alert).toContain('reward_min');
    expect(alert).toContain('policy_version');
    expect(alert).toContain('derived');
    // The form keeps what was typed so it can be fixed.
    expect(await page.getByLabel('Reward min').inputValue()).toBe('abc');
    await screenshot(page, 'trajectories-invalid-filter');
    expect(problems).toEqual([
      `HTTP 400: ${url}`,
      'console: Failed to load resource: the server responded with a status of 400 (Bad Request)',
    ]);
  });

  it('shows a trajectory: its real messages, tool errors, token heat strip and signals', async () => {
    const { t, steps } = await trajectoryWithToolError();
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/trajectories/${t.id}`);
    const conversation = page.getByRole('list', { name: 'Conversation', exact: true });
    const last = steps.at(-1)!;
    const user = last.messages!.find((m) => m.role === 'user')!;
    expect(await conversation.textContent()).toContain(contentText(user.content).slice(0, 80));
    // Every message the agent saw plus the last step's answer.
    expect(await conversation.locator(':scope > li').count()).toBe(last.messages!.length + 1);
    // Failed tool results are flagged from the steps' own records.
    const failed = steps.flatMap((s) => s.toolResults ?? []).filter((r) => r.error).length;
    expect(await conversation.locator('li.msg.error').count()).toBe(failed);
    expect(await conversation.locator('li.msg.error').first().textContent()).toContain('error');
    // Tool calls by name with their arguments.
    const call = (steps[0]!.toolCalls![0] as { function: { name: string } }).function.name;
    expect(await conversation.locator('.tool-call .tool-name').first().textContent()).toBe(call);

    // A step's token view: one span per response token, titled with id, text and logprob.
    const step = steps.find((s) => s.responseLogprobs !== null)!;
    await page.locator(`#step-${step.index} > summary`).click();
    const tokens = page.locator(`#step-${step.index} .heat-strip .tok`);
    expect(await tokens.count()).toBe(Math.min(1500, step.responseIds.length));
    expect(await tokens.first().getAttribute('title')).toContain(
      `id ${step.responseIds[0]} ${JSON.stringify(loadQwen3Tokenizer().decode([step.responseIds[0]!]))} logprob ${step.responseLogprobs![0]!.toFixed(3)}`,
    );

    // Signals: every one stored, with its value.
    const signals = await server.pool.getSignals(t.id);
    expect(signals.length).toBeGreaterThan(0);
    const rows = page.locator('#signals tbody tr');
    expect(await rows.count()).toBe(signals.length);
    for (const s of signals) expect(await page.locator('#signals').textContent()).toContain(s.name);
    await screenshot(page, 'trajectory');
    expect(problems).toEqual([]);
  });

  it('shows provenance: a purified trajectory beside its original, and a guided one with its hint', async () => {
    expect(purified.length).toBeGreaterThan(0);
    const { source, derived } = purified[0]!;
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/trajectories/${derived}`);
    const t = (await server.pool.getTrajectory(derived))!;
    const provenance = page.locator('#provenance');
    expect(await provenance.locator('#original-link').getAttribute('href')).toBe(
      `/dashboard/trajectories/${source}`,
    );
    expect(await provenance.textContent()).toContain(String(t.derivation!.mode));
    expect(await page.getByRole('list', { name: 'Original conversation' }).count()).toBe(1);
    expect(await page.getByRole('list', { name: 'Derived conversation' }).count()).toBe(1);
    await screenshot(page, 'trajectory-derived');
    // The original links to what was derived from it.
    await page.goto(`${server.url}/dashboard/trajectories/${source}`);
    expect(await page.locator(`#provenance a[href="/dashboard/trajectories/${derived}"]`).count()).toBe(1);

    await page.goto(`${server.url}/dashboard/trajectories/guided-1`);
    expect(await page.locator('pre.hint').textContent()).toBe(HINT);
    const views = page.locator('.prompt-views .side');
    expect(await views.count()).toBe(2);
    // Token boundaries may take the hint's last character into the shared end.
    expect(await views.nth(0).locator('mark').textContent()).toContain(HINT.slice(0, -1));
    expect(await views.nth(1).textContent()).not.toContain('Hint:');
    await screenshot(page, 'trajectory-guided');
    expect(problems).toEqual([]);
  });

  it('a trajectory marked untrainable in the page is not trained on in the next lease', async () => {
    const [out] = await server.pool.store.submitBatch(
      [
        {
          channel: 'ui',
          nRollouts: 2,
          steps: [...episode('ui-a', 'ui-g', 3, 1, 5), ...episode('ui-b', 'ui-g', 3, 0, 9)],
        },
      ],
      Date.now(),
    );
    expect(out!.ok).toBe(true);
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/trajectories/ui-a`);
    // Nothing chosen: the form says so and writes nothing.
    await page.getByRole('button', { name: 'Save label' }).click();
    expect(await page.getByRole('alert').textContent()).toContain('Nothing to change');
    expect(await server.pool.labels('ui-a')).toEqual([]);
    problems.length = 0;

    await page.getByLabel('Trainable').selectOption('no');
    await page.getByLabel('Tags (comma-separated)').fill('reviewed, flaky');
    await page.getByLabel('Note').fill('reward hacked');
    await page.getByRole('button', { name: 'Save label' }).click();
    await page.waitForURL(`${server.url}/dashboard/trajectories/ui-a#labels`);
    expect(await page.locator('#labels-current tbody').textContent()).toContain('reward hacked');
    expect(await page.locator('#labels-history tbody').textContent()).toContain('dashboard');
    // A step of the other rollout gets its own label.
    await page.goto(`${server.url}/dashboard/trajectories/ui-b`);
    await page.getByLabel('step 1', { exact: true }).check();
    await page.getByLabel('Quality').selectOption('bad');
    await page.getByRole('button', { name: 'Save label' }).click();
    await page.waitForURL(/ui-b#labels/);
    expect(await server.pool.store.getCurrentLabels('ui-b')).toMatchObject([
      { stepIndex: 1, quality: 'bad', trainable: null },
    ]);
    await screenshot(page, 'trajectory-labelled');
    expect(problems).toEqual([]);

    expect(await server.pool.store.getCurrentLabels('ui-a')).toMatchObject([
      { stepIndex: null, trainable: false, tags: ['reviewed', 'flaky'], note: 'reward hacked' },
    ]);
    const batch = await server.pool.lease({
      channel: 'ui',
      batch_size: 1,
      wait_ms: 0,
      consumer: 'test',
      ttl_ms: 60_000,
    });
    expect(batch).not.toBeNull();
    const served = batch!.groups.flatMap((g) => g.trajectories);
    expect(served.find((s) => s.trajectory.id === 'ui-a')?.steps ?? []).toEqual([]);
    expect(served.find((s) => s.trajectory.id === 'ui-b')?.steps.length).toBe(3);
  });

  it('curates chosen rows of the list in bulk and returns to the same list', async () => {
    const { page, problems } = await openPage(browser);
    const listUrl = `${server.url}/dashboard/trajectories?channel=bulk&page=2`;
    await page.goto(listUrl);
    await page.getByRole('button', { name: 'Add tag' }).click();
    expect(await page.getByRole('alert').textContent()).toContain('Trajectories (id)');
    problems.length = 0;

    const boxes = page.locator('table.trajectories tbody input[name="id"]');
    const ids = [(await boxes.nth(0).getAttribute('value'))!, (await boxes.nth(1).getAttribute('value'))!];
    for (const id of ids) await page.getByLabel(`Choose trajectory ${id}`).check();
    await page.getByRole('button', { name: 'Mark untrainable' }).click();
    await page.waitForURL(listUrl);
    for (const id of ids)
      expect(await server.pool.store.getCurrentLabels(id)).toMatchObject([
        { stepIndex: null, trainable: false },
      ]);

    // The page's "choose all" box and a tag for every row of the page.
    await page.getByLabel('Choose every row on this page').check();
    await page.getByLabel('Tag', { exact: true }).fill('batch-2');
    await page.getByRole('button', { name: 'Add tag' }).click();
    await page.waitForURL(listUrl);
    const tagged = await server.pool.listTrajectories({ tag: 'batch-2', limit: 100, offset: 0 });
    expect(tagged.total).toBe(10);
    // Tags are added: the untrainable ones stay untrainable.
    expect(await server.pool.store.getCurrentLabels(ids[0]!)).toMatchObject([
      { trainable: false, tags: ['batch-2'] },
    ]);
    await page.goto(`${server.url}/dashboard/trajectories?tag=batch-2&trainable=no`);
    expect(await page.locator('#traj-total').textContent()).toBe('2');
    expect(problems).toEqual([]);
  });

  it("draws a group's rollouts and the prefix tree the packer builds for its steps", async () => {
    const { t } = await trajectoryWithToolError();
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard/trajectories/${t.id}`);
    await page.getByRole('link', { name: t.groupId }).click();
    await page.waitForURL(/\/dashboard\/groups\/train\//);
    const members = await server.pool.listTrajectories({
      channel: t.channel,
      groupId: t.groupId,
      limit: 256,
      offset: 0,
    });
    expect(await page.locator('table tbody tr').count()).toBe(members.total);
    const steps = (await Promise.all(members.items.map((m) => server.pool.getTrajectorySteps(m.id)))).flat();
    const packing = packPrefixTree(
      steps.map((s) => ({ tokens: [...s.promptIds, ...s.responseIds], promptLength: s.promptIds.length })),
    );
    expect(Number(await page.locator('#pack-ratio').getAttribute('data-ratio'))).toBe(packing.ratio);
    expect(packing.ratio).toBeLessThan(1);
    expect(await page.locator('.ptree > li').count()).toBe(Math.min(200, packing.nodeStart.length));
    // The root is shared by every step of the group.
    expect(await page.locator('.ptree > li').first().textContent()).toContain(`all ${steps.length} steps`);
    await screenshot(page, 'group');

    // A huge group's tree is cut, and says so.
    const big = Array.from({ length: 101 }, (_, i) =>
      episode(`big-${i}`, 'big-g', 2, i % 2, 10 * i + 1),
    ).flat();
    const [bigOut] = await server.pool.store.submitBatch(
      [{ channel: 'big', nRollouts: 101, steps: big }],
      Date.now(),
    );
    expect(bigOut!.ok).toBe(true);
    await page.goto(`${server.url}/dashboard/groups/big/big-g`);
    expect(await page.locator('.ptree > li').count()).toBe(200);
    expect(await page.locator('#tree-cut').textContent()).toContain('first 200 of 202 nodes');
    // An unknown group is a 404 page, not a failure.
    const missing = `${server.url}/dashboard/groups/train/no-such-group`;
    expect((await page.goto(missing))!.status()).toBe(404);
    expect(problems).toEqual([
      `HTTP 404: ${missing}`,
      'console: Failed to load resource: the server responded with a status of 404 (Not Found)',
    ]);
  });
});
