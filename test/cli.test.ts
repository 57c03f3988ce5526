/**
 * The real `stepwise` CLI as a child process (`node --import tsx src/cli/main.ts ...`): help and
 * option errors, the refusal to listen publicly without API keys, and graceful shutdown on SIGTERM
 * (submitted steps are durable, a long-poll in flight is answered, the process exits 0).
 */
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { StepWireInput } from '../packages/core/src/domain/index.js';
import { StepwiseClient, StepwiseHttpError } from '../packages/core/src/sdk/client.js';
import { openSqliteStore } from '../packages/core/src/store/sqlite/sqlite-store.js';
import { seededRandom, syntheticTrajectory } from '../src/cli/synthetic.js';
import {
  killAllServerProcesses,
  runCli,
  type ServerProcess,
  startServerProcess,
  waitForExit,
} from './support/server-process.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let tempDir: string | null = null;

function dbFile(name: string): string {
  return join(tempDir!, name);
}

function trajectory(uid: string, steps: number, seed: number): StepWireInput[] {
  return syntheticTrajectory({
    trajectoryUid: uid,
    promptUid: `${uid}-p`,
    steps,
    systemTokens: 16,
    observationTokens: 8,
    responseTokens: 8,
    withLogprobs: true,
    random: seededRandom(seed),
  });
}

/** Parses the child's pino lines (stderr JSON); other lines are skipped. */
function logEntries(server: ServerProcess): Array<Record<string, unknown>> {
  const entries: Array<Record<string, unknown>> = [];
  for (const line of server.log().split('\n')) {
    try {
      const entry = JSON.parse(line);
      if (entry && typeof entry === 'object') entries.push(entry);
    } catch {
      // not a log line
    }
  }
  return entries;
}

/** Kills the server if it is still running (so a hung request fails), then closes the client. */
async function cleanUp(server: ServerProcess, client: StepwiseClient): Promise<void> {
  if (server.child.exitCode === null && server.child.signalCode === null) {
    server.child.kill('SIGKILL');
    await server.exited;
  }
  await client.close();
}

describe('stepwise CLI as a real process', () => {
  beforeAll(async () => {
    tempDir = await mkdtemp(join(tmpdir(), 'stepwise-cli-'));
  });

  afterAll(async () => {
    await killAllServerProcesses();
    if (tempDir) await rm(tempDir, { recursive: true, force: true });
    tempDir = null;
  });

  describe('help and option errors', () => {
    it('stepwise --help lists the serve, gateway, sim, demo, gym, bench and export commands', async () => {
      const result = await runCli(['--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/Usage: stepwise \[options\] \[command\]/);
      expect(result.stdout).toMatch(/^\s+serve \[options\]\s+serve the gateway and the DataPool HTTP API/m);
      expect(result.stdout).toMatch(/^\s+gateway \[options\]\s+serve only the gateway/m);
      expect(result.stdout).toMatch(/^\s+sim \[options\]\s+serve the built-in sim engine/m);
      expect(result.stdout).toMatch(/^\s+demo \[options\]\s+the main job/m);
      expect(result.stdout).toMatch(/^\s+gym\s+Claw-style tasks/m);
      expect(result.stdout).toMatch(/^\s+bench \[options\]\s+benchmark an agent/m);
      expect(result.stdout).toMatch(/^\s+export /m);
    });

    it('serve --help exits 0 and names its options', async () => {
      const result = await runCli(['serve', '--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/Usage: stepwise serve \[options\]/);
      for (const option of [
        '--db <path|url>',
        '--host <host>',
        '--port <port>',
        '--api-key <key:scopes>',
        '--sync <mode>',
        '--n-rollouts <n>',
        '--max-body-mb <mb>',
        '--engine <spec>',
        '--upstream-timeout-ms <ms>',
        '--sim-policy <name>',
      ]) {
        expect(result.stdout, option).toContain(option);
      }
      expect(result.stdout).toMatch(/--port <port>\s+port to listen on \(default: 8100\)/);
    });

    it('demo --help exits 0 and names its options', async () => {
      const result = await runCli(['demo', '--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/Usage: stepwise demo \[options\]/);
      for (const option of ['--out <dir>', '--port <port>', '--tasks <n>', '--rollouts <n>', '--seed <n>']) {
        expect(result.stdout, option).toContain(option);
      }
    });

    it('train --help exits 0 and names its options', async () => {
      const result = await runCli(['train', '--help']);
      expect(result.code, result.stderr).toBe(0);
      expect(result.stdout).toMatch(/Usage: stepwise train \[options\]/);
      for (const option of [
        '--out <dir>',
        '--seed <n>',
        '--versions <n>',
        '--rollouts <n>',
        '--warmup-steps <n>',
        '--init <dir>',
        '--groups <n>',
        '--lr <lr>',
        '--adam-eps <eps>',
        '--max-staleness <n>',
        '--no-update',
      ])
        expect(result.stdout, option).toContain(option);
    });

    it('train --rollouts 1 exits non-zero naming --rollouts, and writes nothing', async () => {
      const out = dbFile('train-out');
      const result = await runCli(['train', '--out', out, '--rollouts', '1']);
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.stderr).toMatch(/--rollouts must be an integer >= 2/);
      expect(existsSync(out)).toBe(false);
    });

    it('train --init with a folder that holds no model exits non-zero naming init, and writes nothing', async () => {
      const out = dbFile('train-init-out');
      const result = await runCli(['train', '--out', out, '--init', dbFile('no-model')]);
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.stderr).toMatch(/init: .*no-model is not a model folder/);
      expect(existsSync(out)).toBe(false);
    });

    it('serve --port abc exits non-zero naming --port, and does not start', async () => {
      const db = dbFile('bad-port.db');
      const result = await runCli(['serve', '--db', db, '--port', 'abc']);
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.stderr).toMatch(/--port/);
      expect(result.stderr).toMatch(/'abc' is invalid/);
      expect(result.stderr).not.toContain('stepwise serving');
      expect(existsSync(db)).toBe(false);
    });

    it('serve --host 0.0.0.0 without API keys exits non-zero about API keys and never listens', async () => {
      const db = dbFile('public.db');
      // STEPWISE_API_KEYS is emptied by spawnCli, so no key comes from the environment either.
      const result = await runCli(['serve', '--db', db, '--host', '0.0.0.0', '--port', '0']);
      expect(result.code).not.toBe(0);
      expect(result.code).not.toBeNull();
      expect(result.stderr).toMatch(/refusing to listen on 0\.0\.0\.0 without API keys/);
      expect(result.stderr).toContain('--api-key');
      expect(result.stderr).not.toContain('stepwise serving');
      // It refuses before opening the store, let alone binding a socket.
      expect(existsSync(db)).toBe(false);
    });
  });

  describe('graceful shutdown on SIGTERM', () => {
    it('exits 0 within 10 s and keeps every submitted step', async () => {
      const dbPath = dbFile('graceful.db');
      const server = await startServerProcess(dbPath);
      const client = new StepwiseClient({ baseUrl: server.url, timeoutMs: 5_000 });
      try {
        expect(await client.ready()).toBe(true);
        const complete = trajectory('graceful-a', 3, 1);
        const open = trajectory('graceful-b', 4, 2).slice(0, 2); // last step never sent: stays open
        expect(await client.submitSteps(complete)).toMatchObject({
          inserted: 3,
          duplicates: 0,
          completed: ['graceful-a'],
        });
        for (const step of open) {
          expect(await client.submitSteps([step])).toMatchObject({ inserted: 1, duplicates: 0 });
        }

        // More submissions on their way when the signal arrives (over connections opened beforehand,
        // so they are not simply refused): each one that is acknowledged must be stored; the others
        // may fail (connection closed, 503), but must not hang.
        await Promise.all(Array.from({ length: 8 }, () => client.ready()));
        const racing = Array.from({ length: 8 }, (_, i) => trajectory(`graceful-race-${i}`, 1, 10 + i));
        const racingResults = racing.map((steps) =>
          client.submitSteps(steps).then(
            () => true,
            () => false,
          ),
        );

        const sigtermAt = Date.now();
        server.child.kill('SIGTERM');
        const exit = await waitForExit(server.child, 10_000);
        const shutdownMs = Date.now() - sigtermAt;
        expect(exit, server.log()).toEqual({ code: 0, signal: null });
        expect(shutdownMs).toBeLessThan(10_000);
        expect(logEntries(server).some((e) => e.msg === 'shutting down' && e.signal === 'SIGTERM')).toBe(
          true,
        );
        const acknowledged = await Promise.all(racingResults);

        const store = await openSqliteStore({ path: dbPath });
        try {
          const a = await store.getTrajectory('graceful-a');
          expect(a?.status).toBe('complete');
          const aSteps = await store.getTrajectorySteps('graceful-a');
          expect(aSteps.map((s) => s.index)).toEqual([0, 1, 2]);
          for (const [j, s] of aSteps.entries()) {
            expect(s.promptIds).toEqual(complete[j]!.prompt_ids);
            expect(s.responseIds).toEqual(complete[j]!.response_ids);
            expect(s.isLast).toBe(j === 2);
          }

          const b = await store.getTrajectory('graceful-b');
          expect(b?.status).toBe('open');
          const bSteps = await store.getTrajectorySteps('graceful-b');
          expect(bSteps.map((s) => s.index)).toEqual([0, 1]);
          for (const [j, s] of bSteps.entries()) expect(s.responseIds).toEqual(open[j]!.response_ids);

          let racedStored = 0;
          for (const [i, ok] of acknowledged.entries()) {
            const stored = await store.getTrajectorySteps(`graceful-race-${i}`);
            if (ok) expect(stored, `graceful-race-${i} was acknowledged`).toHaveLength(1);
            else expect(stored.length).toBeLessThanOrEqual(1);
            racedStored += stored.length;
          }
          const total = (await store.listSteps({ limit: 1, offset: 0 })).total;
          expect(total).toBe(3 + 2 + racedStored);
        } finally {
          await store.close();
        }
      } finally {
        await cleanUp(server, client);
      }
    });

    it('answers a long-poll lease in flight with 204 and still exits 0 promptly', async () => {
      const server = await startServerProcess(dbFile('long-poll.db'));
      const client = new StepwiseClient({ baseUrl: server.url, timeoutMs: 5_000 });
      try {
        expect(await client.ready()).toBe(true);
        let settled = false;
        const lease = client.lease({ batchSize: 1, nRollouts: 2, waitMs: 30_000 }).then(
          (batch) => ({ answer: batch === null ? '204 (no batch)' : 'a batch', at: Date.now() }),
          (error: unknown) => ({
            answer:
              error instanceof StepwiseHttpError
                ? `HTTP ${error.status} ${error.code}: ${error.message}`
                : `error: ${String(error)}`,
            at: Date.now(),
          }),
        );
        void lease.finally(() => {
          settled = true;
        });
        await sleep(750); // the lease reaches the server and waits there (nothing is ready)
        expect(settled).toBe(false);

        const sigtermAt = Date.now();
        server.child.kill('SIGTERM');
        const outcome = await Promise.race([lease, sleep(10_000).then(() => null)]);
        expect(outcome, 'the long-poll was not answered within 10 s of SIGTERM').not.toBeNull();
        // Soft, so that the exit checks below still run when the answer is wrong.
        expect.soft(outcome!.answer, server.log()).toBe('204 (no batch)');
        expect(outcome!.at - sigtermAt).toBeLessThan(3_000);

        const exit = await waitForExit(server.child, 10_000);
        expect(exit, server.log()).toEqual({ code: 0, signal: null });
        expect(Date.now() - sigtermAt).toBeLessThan(5_000);
      } finally {
        await cleanUp(server, client);
      }
    });
  });
});
