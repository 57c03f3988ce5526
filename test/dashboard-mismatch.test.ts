import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { chromiumReady, launchBrowser, openPage, screenshot } from './support/browser.js';
import { lease, report, step, submitGroup } from './support/mismatch.js';

/*
 * The mismatch page (/dashboard/mismatch): two engines report over three leases through the real
 * HTTP route, one of them jumping on the third; the page, server-rendered, shows each engine's k3
 * line with one point per lease in order, and the one that jumped flagged (marked, bordered in the
 * theme's "bad" colour, and named in an alert). The same in a real browser where chromium is.
 */

describe('dashboard: mismatch per engine', () => {
  let dir = '';
  let server: RunningServer;
  const leases: string[] = [];
  const jumpy = [0.01, 0.01, 0.05];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-dash-mismatch-'));
    server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: [] });
    for (let i = 0; i < 3; i++) {
      await submitGroup(server.url, 'dm', `g${i}`, [
        { uid: `s${i}`, engine: 'steady', versions: [i] },
        { uid: `j${i}`, engine: 'jumpy', versions: [i] },
      ]);
      await new Promise((r) => setTimeout(r, 5)); // distinct lease times: the line's order
      const l = await lease(server.url, 'dm');
      leases.push(l.id);
      const answer = await report(server.url, l.id, [
        step(`s${i}`, 0, 10, 0.002, 0.002, 0.1, 0),
        step(`j${i}`, 0, 10, jumpy[i]!, jumpy[i]!, 0.4, 0.5),
      ]);
      expect(answer.status).toBe(200);
    }
  }, 60_000);
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('renders each engine’s line and flags the one that jumped, without a script', async () => {
    const res = await fetch(`${server.url}/dashboard/mismatch?channel=dm`);
    expect(res.status).toBe(200);
    const page = await res.text();
    expect(page).toMatch(/<section class="card engine flagged"[^>]*data-engine="jumpy" data-jump="true"/);
    expect(page).toMatch(/<section class="card engine"[^>]*data-engine="steady" data-jump="false"/);
    expect(page).toContain('Mismatch jumped on jumpy.');
    const empty = await (await fetch(`${server.url}/dashboard/mismatch?channel=elsewhere`)).text();
    expect(empty).toContain('No mismatch reported yet');
    expect((await fetch(`${server.url}/dashboard/mismatch?channel=a%20b`)).status).toBe(400);
  });

  it.skipIf(!chromiumReady)(
    'in a browser: one point per lease, oldest first; the flagged engine stands out',
    async () => {
      const browser: Browser = await launchBrowser();
      try {
        const { page, problems } = await openPage(browser);
        await page.goto(`${server.url}/dashboard`);
        await page.getByRole('link', { name: 'Mismatch' }).click();
        await page.waitForURL(`${server.url}/dashboard/mismatch`);
        expect(await page.locator('nav a[aria-current="page"]').textContent()).toBe('Mismatch');

        const flagged = page.getByRole('region', { name: 'Engine jumpy' });
        const steady = page.getByRole('region', { name: 'Engine steady' });
        const points = await flagged
          .locator('svg.sparkline circle')
          .evaluateAll((cs) =>
            cs.map((c) => [c.getAttribute('data-lease-id'), Number(c.getAttribute('data-k3'))]),
          );
        expect(points).toEqual(leases.map((id, i) => [id, jumpy[i]]));
        // Later leases to the right; the jump is the highest point (smallest y).
        const xy = await flagged
          .locator('svg.sparkline circle')
          .evaluateAll((cs) => cs.map((c) => [Number(c.getAttribute('cx')), Number(c.getAttribute('cy'))]));
        expect(xy[0]![0]).toBeLessThan(xy[1]![0]!);
        expect(xy[1]![0]).toBeLessThan(xy[2]![0]!);
        expect(xy[2]![1]).toBeLessThan(xy[1]![1]!);
        expect(await flagged.getByRole('status').textContent()).toContain('jump');
        // k3 over all its leases: (0.1 + 0.1 + 0.5) / 30; before the jump 0.01.
        expect(await flagged.locator('dd[data-field="k3"]').textContent()).toBe((0.7 / 30).toExponential(2));
        expect(await flagged.locator('dd[data-field="baseline"]').textContent()).toBe('1.00e-2');
        expect(await page.getByRole('alert').textContent()).toContain('jumpy');
        // Bordered in the theme's "bad" colour (#a4161a), the steady engine in the plain line colour.
        // A string is evaluated in the page (this project's TypeScript has no DOM types).
        const border = (name: string) =>
          page.evaluate(
            `getComputedStyle(document.querySelector('section[aria-label="Engine ${name}"]')).borderTopColor`,
          );
        expect(await border('jumpy')).toBe('rgb(164, 22, 26)');
        expect(await border('steady')).not.toBe('rgb(164, 22, 26)');
        expect(await steady.getByRole('status').count()).toBe(0);
        expect(await steady.locator('svg.sparkline circle').count()).toBe(3);
        await screenshot(page, 'mismatch');
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
      }
    },
  );
});
