import type { Hono } from 'hono';
import type { DashboardEnv, DashboardOptions } from '../index.js';
import { html } from '../index.js';
import { Page } from '../layout.js';

export function mountBatchPages(app: Hono<DashboardEnv>, _options: DashboardOptions): void {
  app.get('/dashboard/batches', (c) =>
    html(
      c,
      <Page title="Batches" current="/dashboard/batches">
        <p class="muted">Coming next.</p>
      </Page>,
    ),
  );
}
