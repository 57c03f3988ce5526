import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { runGym } from '../packages/gym/src/runner.js';
import { checkSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { jsonTask } from './support/gym-tasks.js';
import { HOSTILE_TREE_PY, unmountUnder } from './support/hostile-trees.js';

/*
 * A sandboxed agent that builds a workspace to break the host (issue 38, finding 4): paths past
 * PATH_MAX with the verifier's `output/` a symlink into them, 1,800 nested folders, symlink loops, a
 * FIFO where the verifier reads, a socket, an unreadable folder. The run goes on, the sample is scored
 * 0 as the agent's (never `infra_failed`), its state line is written, and its folder is removed, with
 * and without --keep-workspaces. Real bubblewrap, a real server on loopback, the runner.
 */

const sandboxReady = checkSandbox().ok;
const task = jsonTask();
const agentFor = (kind: string) =>
  `python3 -c "$(echo ${Buffer.from(HOSTILE_TREE_PY).toString('base64')} | base64 -d)" {workspace} ${kind}`;

describe.skipIf(!sandboxReady)('an agent that builds a hostile workspace', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-hostile-'));
    server = await startServer({
      dbPath: join(dir, 'pool.db'),
      port: 0,
      engines: ['sim'],
      sim: { policy: 'reference', tasks: referenceTasks([task]) },
    });
  });
  afterAll(async () => {
    await server?.close();
    unmountUnder(dir);
    // GNU rm walks by descriptor: it removes what a path-based rmSync cannot.
    execFileSync('rm', ['-rf', dir]);
  });

  for (const kind of ['long', 'deep', 'special'] as const) {
    for (const keep of [false, true]) {
      it(`${kind} paths, ${keep ? 'kept' : 'removed'}: the run goes on and the sample scores 0`, async () => {
        const name = `${kind}-${keep}`;
        const workDir = join(dir, `work-${name}`);
        const stateFile = join(dir, `state-${name}.jsonl`);
        const { results, summary } = await runGym({
          tasks: [task],
          samples: 1,
          concurrency: 1,
          gatewayUrl: server.url,
          model: 'sim-qwen3',
          agent: { kind: 'command', template: agentFor(kind) },
          runId: name,
          stateFile,
          workDir,
          keepWorkspaces: keep,
          sampleTimeoutMs: 60_000,
        });
        expect(results).toHaveLength(1);
        expect(results[0]).toMatchObject({ status: 'complete', score: 0, agent: 'finished' });
        expect(summary.infraFailed).toBe(0);
        expect(readFileSync(stateFile, 'utf8').trim().split('\n')).toHaveLength(1);
        const trajectory = await server.pool.store.getTrajectory(results[0]!.trajectoryUid!);
        expect(trajectory).toMatchObject({ status: 'complete', reward: 0 });
        expect(readdirSync(workDir)).toHaveLength(keep ? 1 : 0);
      }, 120_000);
    }
  }
});
