/**
 * Browser tests for the dashboard: Debian's chromium driven by playwright-core (never
 * `playwright install`), and a store filled by a real demo run, made once per test run and copied
 * for each test file (files label and lease, so none sees another's changes).
 */
import { createHash } from 'node:crypto';
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type Browser, chromium, type Page } from 'playwright-core';
import { afterAll, beforeAll } from 'vitest';
import { type RunningServer, startServer } from '../../packages/core/src/server/server.js';
import { runDemo } from '../../src/cli/demo.js';

export const CHROMIUM = process.env.STEPWISE_CHROMIUM ?? '/usr/bin/chromium';
export const chromiumReady = existsSync(CHROMIUM);

const ROOT = join(import.meta.dirname, '..', '..');
/** Keyed by what makes the demo's store: the schema and the demo itself. */
const DEMO_KEY = createHash('sha256')
  .update(readFileSync(join(ROOT, 'packages', 'core', 'src', 'store', 'sqlite', 'migrations.ts')))
  .update(readFileSync(join(ROOT, 'src', 'cli', 'demo.ts')))
  .digest('hex')
  .slice(0, 12);
const DEMO_DIR = join(ROOT, 'tmp', `stepwise-test-demo-${DEMO_KEY}`);
/** Screenshots of every page the tests open land here (CI keeps them as the run's record). */
export const SCREENSHOTS = join(ROOT, 'tmp', 'dashboard-screenshots');

export async function launchBrowser(): Promise<Browser> {
  return chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      '--no-first-run',
    ],
  });
}

/** A page at 1280×800 that records console errors and failed requests (tests assert none). */
export async function openPage(browser: Browser): Promise<{ page: Page; problems: string[] }> {
  const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // A live stream closed by navigation is not a failure.
    if (!r.url().includes('/stream')) problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`);
  });
  page.on('response', (r) => {
    if (r.status() >= 400) problems.push(`HTTP ${r.status()}: ${r.url()}`);
  });
  return { page, problems };
}

export async function screenshot(page: Page, name: string): Promise<void> {
  mkdirSync(SCREENSHOTS, { recursive: true });
  await page.screenshot({ path: join(SCREENSHOTS, `${name}.png`), fullPage: true });
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * The demo's store, made once per machine and code state (a lock directory keeps concurrent test
 * files from running it twice), copied to `into` (a fresh path per test file).
 */
export async function demoStoreCopy(into: string): Promise<string> {
  const done = join(DEMO_DIR, 'done');
  const lock = join(DEMO_DIR, 'lock');
  mkdirSync(DEMO_DIR, { recursive: true });
  for (;;) {
    if (existsSync(done)) break;
    try {
      mkdirSync(lock);
    } catch {
      // Another file is making it; a lock older than 5 minutes is a crashed run's.
      if (Date.now() - statSync(lock).mtimeMs > 300_000) rmSync(lock, { recursive: true, force: true });
      await sleep(250);
      continue;
    }
    try {
      rmSync(join(DEMO_DIR, 'out'), { recursive: true, force: true });
      await runDemo({
        out: join(DEMO_DIR, 'out'),
        port: 0,
        tasks: 4,
        rollouts: 3,
        batchSize: 2,
        seed: 11,
        errorRate: 0.4,
        giveUpRate: 0.3,
        concurrency: 4,
        cleanerTasks: 0,
        guideTasks: 0,
        print: () => {},
      });
      writeFileSync(done, `${new Date().toISOString()}\n`);
    } finally {
      rmSync(lock, { recursive: true, force: true });
    }
  }
  mkdirSync(into, { recursive: true });
  const db = join(into, 'stepwise.db');
  copyFileSync(join(DEMO_DIR, 'out', 'stepwise.db'), db);
  return db;
}

export interface DashboardContext {
  dir: string;
  server: RunningServer;
  browser: Browser;
}

/**
 * A describe block's server on a copy of the demo store, and a browser; `ready` receives them before
 * the first test, and both are closed after the last.
 */
export function dashboardFixture(tag: string, ready: (context: DashboardContext) => void): void {
  let context: Partial<DashboardContext> = {};
  beforeAll(async () => {
    const dir = mkdtempSync(join(tmpdir(), `stepwise-${tag}-`));
    context = { dir };
    const db = await demoStoreCopy(dir);
    context.server = await startServer({ dbPath: db, port: 0, engines: ['sim'] });
    context.browser = await launchBrowser();
    ready(context as DashboardContext);
  }, 180_000);
  afterAll(async () => {
    await context.browser?.close();
    await context.server?.close();
    if (context.dir) rmSync(context.dir, { recursive: true, force: true });
  });
}
