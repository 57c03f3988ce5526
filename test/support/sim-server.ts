import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll } from 'vitest';
import type { SimServerOptions } from '../../packages/core/src/engines/sim/index.js';
import { type RunningServer, startServer } from '../../packages/core/src/server/server.js';

export interface SimServerFixture {
  /** A temporary folder, removed after the block: the store's file and anything else the tests write. */
  dir: string;
  server: RunningServer;
}

/**
 * An in-process server on a SQLite file with the built-in sim engine, started before the calling
 * describe block's tests and closed after them (read `dir` and `server` inside tests, not before).
 */
export function simServerFixture(prefix: string, sim: SimServerOptions): SimServerFixture {
  const fixture = {} as SimServerFixture;
  beforeAll(async () => {
    fixture.dir = mkdtempSync(join(tmpdir(), `stepwise-${prefix}-`));
    fixture.server = await startServer({
      dbPath: join(fixture.dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim,
    });
  });
  afterAll(async () => {
    await fixture.server?.close();
    rmSync(fixture.dir, { recursive: true, force: true });
  });
  return fixture;
}
