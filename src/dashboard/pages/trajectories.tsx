import type { Hono } from 'hono';
import type { DashboardEnv, DashboardOptions } from '../index.js';
import { html } from '../index.js';
import { Page } from '../layout.js';

export function mountTrajectoryPages(app: Hono<DashboardEnv>, _options: DashboardOptions): void {
  app.get('/dashboard/trajectories', (c) =>
    html(
      c,
      <Page title="Trajectories" current="/dashboard/trajectories">
        <p class="muted">Coming next.</p>
      </Page>,
    ),
  );
}
