import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runGym } from '../src/gym/runner.js';
import { checkSandbox } from '../src/gym/sandbox/index.js';
import { referenceTasks } from '../src/gym/tasks/index.js';
import { type RunningServer, startServer } from '../src/server/server.js';
import { jsonTask } from './support/gym-tasks.js';

/*
 * The sandbox's disk quota as a sample sees it: an agent that fills its workspace is stopped, and the
 * sample ends as the agent's failure (score 0, a training signal), with the quota named as the reason,
 * not as an infrastructure failure. Real bubblewrap, a real server on loopback, the runner.
 */

const sandboxReady = checkSandbox().ok;
const task = jsonTask();

describe.skipIf(!sandboxReady)('a sample whose agent writes past the disk quota', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-quota-'));
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([task]) },
    });
  });
  afterAll(async () => {
    await server?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("is the agent's failure, scored 0, with the quota as the reason", async () => {
    const { results, summary } = await runGym({
      tasks: [task],
      samples: 1,
      concurrency: 1,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent: {
        kind: 'command',
        template: 'for i in $(seq 400); do head -c 1M /dev/zero > {workspace}/junk-$i.bin; sleep 0.01; done',
      },
      limits: { diskMb: 16 },
      runId: 'quota',
      stateFile: join(dir, 'state.jsonl'),
      workDir: join(dir, 'work'),
      sampleTimeoutMs: 60_000,
    });
    expect(results).toHaveLength(1);
    expect(results[0]).toMatchObject({ status: 'complete', score: 0, agent: 'failed' });
    expect(results[0]!.reason).toMatch(/disk quota exceeded: .* over the 16 MiB quota/);
    expect(summary.infraFailed).toBe(0);
  }, 120_000);
});
