import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { type GymRunOptions, runGym } from '../packages/gym/src/runner.js';
import { checkSandbox, runInSandbox } from '../packages/gym/src/sandbox/index.js';
import { referenceTasks } from '../packages/gym/src/tasks/index.js';
import { jsonTask } from './support/gym-tasks.js';
import { unmountUnder } from './support/hostile-trees.js';

/*
 * The sandbox's disk quota as a sample sees it: an agent that fills its workspace is stopped, and the
 * sample ends as the agent's failure (score 0, a training signal), with the quota named as the reason,
 * not as an infrastructure failure. Real bubblewrap, a real server on loopback, the runner.
 *
 * Then the quotas the kernel holds (issue 38, finding 5): where the host runs as root, a sample's
 * workspace is a tmpfs capped in bytes and inodes, and each sandbox a control group capped in memory
 * for all its processes together.
 */

const sandboxReady = checkSandbox().ok;
const root = process.getuid?.() === 0;
const MIB = 1024 * 1024;
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

describe.skipIf(!sandboxReady || !root)('quotas the kernel holds', () => {
  let dir: string;
  let server: RunningServer;
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'stepwise-kernel-quota-'));
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
    rmSync(dir, { recursive: true, force: true });
  });

  /** Runs one sample of `template`, keeping its workspace; returns the result and the workspace. */
  async function sample(name: string, template: string, limits: GymRunOptions['limits']) {
    const workDir = join(dir, `work-${name}`);
    const { results } = await runGym({
      tasks: [task],
      samples: 1,
      concurrency: 1,
      gatewayUrl: server.url,
      model: 'sim-qwen3',
      agent: { kind: 'command', template },
      limits,
      runId: name,
      stateFile: join(dir, `state-${name}.jsonl`),
      workDir,
      keepWorkspaces: true,
      sampleTimeoutMs: 60_000,
    });
    return { result: results[0]!, workspace: join(workDir, readdirSync(workDir)[0]!, 'workspace') };
  }

  it('no write lands past the disk quota, however fast: 64 MiB at once against 8 MiB', async () => {
    const { result, workspace } = await sample('bytes', 'head -c 64M /dev/zero > {workspace}/big.bin; true', {
      diskMb: 8,
    });
    expect(result).toMatchObject({ status: 'complete', score: 0 });
    expect(statSync(join(workspace, 'big.bin')).size).toBeLessThanOrEqual(8 * MIB);
    // Kept, it was copied out of its tmpfs: a plain folder on the work dir's filesystem, nothing mounted.
    expect(statSync(workspace).dev).toBe(statSync(dirname(workspace)).dev);
  }, 120_000);

  it('no file past the inode quota: 1,000 empty files against 200', async () => {
    const { result, workspace } = await sample(
      'inodes',
      'cd {workspace} && for i in $(seq 1000); do : > f$i || break; done; true',
      { inodes: 200 },
    );
    expect(result).toMatchObject({ status: 'complete', score: 0 });
    const files = readdirSync(workspace).filter((name) => name.startsWith('f'));
    expect(files.length).toBeGreaterThan(100);
    expect(files.length).toBeLessThanOrEqual(200);
  }, 120_000);

  it("memory is the whole sandbox's: 4 processes of 300 MiB never hold it at once under 512 MiB", async () => {
    const workspace = join(dir, 'memory');
    mkdirSync(workspace);
    const r = await runInSandbox(
      { workspace, mountDir: '/root/.openclaw/workspace', limits: { memoryMb: 512 } },
      `python3 -c "$(echo ${Buffer.from(HOLD_300_MIB).toString('base64')} | base64 -d)"`,
      { timeoutMs: 60_000 },
    );
    // Each process fits the per-process RLIMIT_AS (512 MiB); together they would hold 1.2 GiB.
    expect(r.stdout).toMatch(/^holding at once: [01]$/m);
    expect(r.limitHit).toBe('memory');
  }, 120_000);
});

/**
 * Four children each fill 300 MiB, then wait; once none is still filling, the parent says how many
 * are alive holding theirs.
 */
const HOLD_300_MIB = `
import os, subprocess, sys, time
child = "import sys, time\\nx = b'x' * (300 << 20)\\nopen('/tmp/held-' + sys.argv[1], 'w').close()\\ntime.sleep(600)\\n"
procs = [subprocess.Popen([sys.executable, '-c', child, str(i)]) for i in range(4)]
def held(i):
    return os.path.exists('/tmp/held-%d' % i)
while any(p.poll() is None and not held(i) for i, p in enumerate(procs)):
    time.sleep(0.05)
print('holding at once: %d' % sum(1 for i, p in enumerate(procs) if p.poll() is None and held(i)))
for p in procs:
    p.kill()
`;
