import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Hono } from 'hono';
import { setCookie } from 'hono/cookie';
import { findKey, isPublicDashboardPath, KEY_COOKIE, requireScope } from '../http/auth.js';
import { CsrfField, csrfTokens } from './csrf.js';
import { Page } from './layout.js';
import type { DashboardEnv, DashboardOptions } from './options.js';
import { mountBatchPages } from './pages/batches.js';
import { mountEventPages } from './pages/events.js';
import { mountGymPages } from './pages/gym.js';
import { mountMismatchPage } from './pages/mismatch.js';
import { mountOverview } from './pages/overview.js';
import { mountTrajectoryPages } from './pages/trajectories.js';
import { html, readForm } from './respond.js';

export type { DashboardEnv, DashboardOptions } from './options.js';

/*
 * The dashboard (`/dashboard`, same port as the API): server-rendered pages over the real store, with
 * a little client script for what must be live. Every page requires the admin scope when the server
 * has API keys (a browser signs in once; the key travels as an HttpOnly, SameSite=Strict cookie);
 * on loopback without keys it is open like the rest of the API.
 */

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

/** Static files: our own, and uPlot from its package. */
const ASSETS: Record<string, { path: string; type: string }> = {
  'dashboard.css': { path: join(here, 'assets', 'dashboard.css'), type: 'text/css; charset=utf-8' },
  'dashboard.js': { path: join(here, 'assets', 'dashboard.js'), type: 'text/javascript; charset=utf-8' },
  'trajectory.js': { path: join(here, 'assets', 'trajectory.js'), type: 'text/javascript; charset=utf-8' },
  'events.js': { path: join(here, 'assets', 'events.js'), type: 'text/javascript; charset=utf-8' },
  'event-summary.js': {
    path: join(here, 'assets', 'event-summary.js'),
    type: 'text/javascript; charset=utf-8',
  },
  'uPlot.min.css': {
    path: join(dirname(require.resolve('uplot')), 'uPlot.min.css'),
    type: 'text/css; charset=utf-8',
  },
  'uPlot.iife.min.js': {
    path: join(dirname(require.resolve('uplot')), 'uPlot.iife.min.js'),
    type: 'text/javascript; charset=utf-8',
  },
};
const assetCache = new Map<string, string>();

export function mountDashboard(app: Hono<DashboardEnv>, options: DashboardOptions): void {
  const csrf = csrfTokens(options.csrfSecret);
  app.use('/dashboard', csrf);
  app.use('/dashboard/*', csrf);
  app.get('/dashboard/assets/:name', (c) => {
    // Own names only: `constructor` or `__proto__` would find Object's prototype (a 500, not a 404).
    const name = c.req.param('name');
    const asset = Object.hasOwn(ASSETS, name) ? ASSETS[name] : undefined;
    if (!asset) return c.text('not found', 404);
    let body = assetCache.get(asset.path);
    if (body === undefined) {
      body = readFileSync(asset.path, 'utf8');
      assetCache.set(asset.path, body);
    }
    return c.body(body, 200, { 'content-type': asset.type, 'cache-control': 'max-age=300' });
  });

  app.get('/dashboard/login', (c) => html(c, <LoginPage next={safeNext(c.req.query('next'))} />));
  app.post('/dashboard/login', async (c) => {
    const form = await readForm(c, false);
    const key = typeof form.key === 'string' ? form.key.trim() : '';
    const next = safeNext(typeof form.next === 'string' ? form.next : undefined);
    const match = key ? findKey(options.apiKeys, key) : null;
    if (!match?.scopes.includes('admin'))
      return html(
        c,
        <LoginPage next={next} error={match ? 'This key lacks the admin scope.' : 'Unknown key.'} />,
        401,
      );
    setCookie(c, KEY_COOKIE, key, {
      httpOnly: true,
      sameSite: 'Strict',
      path: '/',
      secure: new URL(c.req.url).protocol === 'https:',
    });
    return c.redirect(next, 303);
  });

  // Whoever opens the server's address (or `/dashboard/`) in a browser lands on the dashboard; it
  // asks for a key itself, so the redirect shows nothing.
  for (const path of ['/', '/dashboard/']) app.get(path, (c) => c.redirect('/dashboard', 302));

  const admin = requireScope('admin');
  app.use('/dashboard', admin);
  app.use('/dashboard/*', (c, next) => (isPublicDashboardPath(c.req.path) ? next() : admin(c, next)));

  mountOverview(app, options);
  mountEventPages(app, options);
  mountTrajectoryPages(app, options);
  mountBatchPages(app, options);
  mountGymPages(app, options);
  mountMismatchPage(app, options);
}

/** Only a dashboard path is a place to return to after signing in. */
function safeNext(next: string | undefined): string {
  return next && /^\/dashboard(\/[\w\-./%]*)?$/.test(next) && !next.includes('//') ? next : '/dashboard';
}

function LoginPage({ next, error }: { next: string; error?: string }) {
  return (
    <Page title="Sign in" current={null}>
      <form method="post" action="/dashboard/login" class="card narrow">
        <p>This server has API keys: sign in with a key that has the admin scope.</p>
        {error ? (
          <p class="error" role="alert">
            {error}
          </p>
        ) : null}
        <label for="key">API key</label>
        <input id="key" name="key" type="password" autocomplete="current-password" required />
        <input type="hidden" name="next" value={next} />
        <CsrfField />
        <button type="submit">Sign in</button>
      </form>
    </Page>
  );
}
