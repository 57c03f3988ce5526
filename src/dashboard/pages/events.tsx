import type { Hono } from 'hono';
import type { DashboardEnv, DashboardOptions } from '../index.js';
import { html } from '../index.js';
import { Page } from '../layout.js';

export function mountEventPages(app: Hono<DashboardEnv>, _options: DashboardOptions): void {
  app.get('/dashboard/events', (c) =>
    html(
      c,
      <Page title="Events" current="/dashboard/events">
        <p class="muted">Coming next.</p>
      </Page>,
    ),
  );
}
