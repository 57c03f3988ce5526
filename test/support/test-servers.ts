import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll } from 'vitest';
import {
  type RunningServer,
  type ServerOptions,
  startServer,
} from '../../packages/core/src/server/server.js';

/**
 * Servers a test file starts, each on a fresh SQLite file in one temp folder: closed after every
 * test, the folder removed after the file. Call at the top level of the file.
 */
export function testServers(name: string, defaults: Partial<ServerOptions> = {}) {
  let dir = '';
  let count = 0;
  const running: RunningServer[] = [];
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), `stepwise-${name}-`));
  });
  afterEach(async () => {
    await Promise.all(running.splice(0).map((s) => s.close()));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  return {
    /** The file's temp folder (set once its tests run). */
    dir: () => dir,
    /** Starts a server on a new database (options override the file's defaults); closed after the test. */
    async serve(options: Partial<ServerOptions> = {}): Promise<RunningServer> {
      const server = await startServer({
        dbPath: join(dir, `${count++}.db`),
        port: 0,
        ...defaults,
        ...options,
      });
      running.push(server);
      return server;
    },
  };
}
