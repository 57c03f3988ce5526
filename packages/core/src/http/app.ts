import { Hono } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { Logger } from 'pino';
import { BusyError, StepwiseError } from '../domain/index.js';
import type { DataPool } from '../pool/data-pool.js';
import { type ApiKey, type AuthVariables, authenticate } from './auth.js';
import { refuseNulQuery } from './json-body.js';

/*
 * The API's Hono app before any resource is mounted: one error shape for every route, `/ready`, and
 * the caller identified (and a NUL in the query refused) before a route runs. Each resource mounts
 * its routes on it (steps.ts, trajectories.ts, ..., and the export, rewards and dashboard modules);
 * server/app.ts decides which, in what order.
 */

export type ApiEnv = { Variables: AuthVariables };
export type ApiApp = Hono<ApiEnv>;

export interface ApiAppOptions {
  pool: DataPool;
  apiKeys?: readonly ApiKey[];
  logger?: Logger;
}

export function createApiApp(options: ApiAppOptions): ApiApp {
  const { pool } = options;
  const app = new Hono<ApiEnv>();

  app.onError((error, c) => {
    if (error instanceof BusyError) c.header('Retry-After', String(error.retryAfterS));
    if (error instanceof StepwiseError) return c.json(error.toJSON(), error.status as 400);
    if (error instanceof HTTPException) {
      return c.json(
        { error: { code: 'http_error', message: error.message || 'request failed' } },
        error.status,
      );
    }
    options.logger?.error({ err: error, path: c.req.path }, 'request failed');
    return c.json({ error: { code: 'internal', message: 'internal error' } }, 500);
  });
  app.notFound((c) =>
    c.json({ error: { code: 'not_found', message: `no route for ${c.req.method} ${c.req.path}` } }, 404),
  );

  app.get('/ready', async (c) => c.json({ ok: true, store: pool.store.kind }));

  app.use('*', authenticate(options.apiKeys ?? []));
  app.use('*', async (c, next) => {
    refuseNulQuery(c.req.url, () => c.req.queries());
    return next();
  });
  // Body sizes are limited where requests are read (util/http-server.ts), before any route runs.
  return app;
}
