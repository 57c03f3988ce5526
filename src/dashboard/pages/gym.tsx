import type { Hono } from 'hono';
import type { DashboardEnv, DashboardOptions } from '../index.js';
import { html } from '../index.js';
import { Page } from '../layout.js';

export function mountGymPages(app: Hono<DashboardEnv>, _options: DashboardOptions): void {
  app.get('/dashboard/gym', (c) =>
    html(
      c,
      <Page title="Gym" current="/dashboard/gym">
        <p class="muted">Coming next.</p>
      </Page>,
    ),
  );
}
