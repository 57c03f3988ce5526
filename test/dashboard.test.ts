import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import type { PoolStats } from '../packages/core/src/store/store.js';
import { chromiumReady, dashboardFixture, openPage, screenshot } from './support/browser.js';
import { episode } from './support/steps.js';

/*
 * The dashboard in a real browser (Debian's chromium through playwright-core) against a server on a
 * store filled by a real demo run: pages load without console errors, show the numbers /v1/stats
 * gives, and stay live.
 */

describe.skipIf(!chromiumReady)('dashboard: overview', () => {
  let dir: string;
  let server: RunningServer;
  let browser: Browser;
  dashboardFixture('dash', (c) => {
    ({ dir, server, browser } = c);
  });

  it('shows the pool numbers /v1/stats gives, and updates them live when steps arrive', async () => {
    const stats = (await (await fetch(`${server.url}/v1/stats`)).json()) as PoolStats;
    expect(stats.produced.steps).toBeGreaterThan(0);
    const { page, problems } = await openPage(browser);
    await page.goto(`${server.url}/dashboard`);
    const number = async (id: string) =>
      Number((await page.locator(`#${id}`).textContent())!.replace(/,/g, ''));
    expect(await number('s-steps')).toBe(stats.produced.steps);
    expect(await number('s-trajectories')).toBe(stats.produced.trajectories);
    expect(await number('s-consumed')).toBe(stats.consumed.groups);
    expect(await page.getByRole('heading', { name: 'Overview' }).isVisible()).toBe(true);
    // The distributions are the store's: the outcome mix counts the demo's settled groups.
    const summary = await server.pool.store.dashboardSummary(null);
    const outcomes = page.getByRole('figure', { name: 'Group outcomes' });
    expect(await outcomes.textContent()).toContain(`all zero${summary.outcomes.allZero}`);
    await page.waitForSelector('.chart .uplot');
    await screenshot(page, 'overview');

    // New steps arrive: the page shows them without a reload.
    const [out] = await server.pool.store.submitBatch(
      [{ channel: 'live', nRollouts: 1, steps: episode('live-1', 'live-g', 3, 1, 5) }],
      Date.now(),
    );
    expect(out!.ok).toBe(true);
    await page.waitForFunction(
      `document.getElementById('s-steps').textContent.replace(/,/g, '') === '${stats.produced.steps + 3}'`,
      undefined,
      { timeout: 10_000 },
    );
    expect(problems).toEqual([]);
  });

  it('with API keys, a browser signs in with an admin key; other keys and none are turned away', async () => {
    const keyed = await startServer({
      dbPath: join(dir, 'keyed.db'),
      port: 0,
      engines: ['sim'],
      apiKeys: ['admin-key-0123456789:admin', 'trainer-key-0123456789:trainer'],
    });
    try {
      const { page, problems } = await openPage(browser);
      await page.goto(`${keyed.url}/dashboard`);
      expect(new URL(page.url()).pathname).toBe('/dashboard/login');
      await page.getByLabel('API key').fill('trainer-key-0123456789');
      await page.getByRole('button', { name: 'Sign in' }).click();
      expect(await page.getByRole('alert').textContent()).toContain('admin scope');
      await page.getByLabel('API key').fill('admin-key-0123456789');
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL(`${keyed.url}/dashboard`);
      expect(await page.getByRole('heading', { name: 'Overview' }).isVisible()).toBe(true);
      // The wrong key's attempt answered 401 (the browser logs it); nothing else failed.
      expect(problems.sort()).toEqual([
        `HTTP 401: ${keyed.url}/dashboard/login`,
        'console: Failed to load resource: the server responded with a status of 401 (Unauthorized)',
      ]);
      const cookie = (await page.context().cookies()).find((c) => c.name === 'stepwise_key');
      expect(cookie).toMatchObject({ httpOnly: true, sameSite: 'Strict' });
      // Without the cookie the API still wants a key.
      expect((await fetch(`${keyed.url}/v1/stats`)).status).toBe(401);
      // The server's bare address leads to the sign-in too, and past it to the overview.
      await page.context().clearCookies();
      await page.goto(`${keyed.url}/`);
      expect(new URL(page.url()).pathname).toBe('/dashboard/login');
    } finally {
      await keyed.close();
    }
  });

  it("opening the server's address, or /dashboard/, in a browser lands on the dashboard", async () => {
    for (const path of ['/', '/dashboard/']) {
      const answer = await fetch(`${server.url}${path}`, { redirect: 'manual' });
      expect([answer.status, answer.headers.get('location')]).toEqual([302, '/dashboard']);
      const { page, problems } = await openPage(browser);
      await page.goto(`${server.url}${path}`);
      expect(new URL(page.url()).pathname).toBe('/dashboard');
      expect(await page.getByRole('heading', { name: 'Overview' }).isVisible()).toBe(true);
      expect(problems).toEqual([]);
      await page.close();
    }
    // Other unknown paths keep the API's JSON 404.
    const unknown = await fetch(`${server.url}/nowhere`);
    expect(unknown.status).toBe(404);
    expect(((await unknown.json()) as { error: { code: string } }).error.code).toBe('not_found');
  });
});
