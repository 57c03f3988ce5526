import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, describe, expect, it } from 'vitest';
import { fakeServer } from './rewards-support.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import {
  killAllServerProcesses,
  logLine,
  runCli,
  spawnCli,
  startServerProcess,
} from './support/server-process.js';

/*
 * Reward workers over PostgreSQL: a server that only queues reward jobs (`--reward-workers 0`) and
 * two `stepwise worker rewards` processes that run them, one of them killed while it holds a job.
 */

const schema = freshSchema('stepwise_rw');
const dir = mkdtempSync(join(tmpdir(), 'stepwise-reward-worker-'));
const closers: (() => Promise<void>)[] = [];

afterAll(async () => {
  await killAllServerProcesses();
  for (const close of closers) await close();
  await dropSchema(schema);
  rmSync(dir, { recursive: true, force: true });
});

describe.skipIf(!pgUrl)('stepwise worker rewards (PostgreSQL)', () => {
  it('scores what queue-only servers queue; a job held by a killed worker is run by another after its lease', async () => {
    // A reward model that takes a while, so the first worker is killed while it holds a job.
    let calls = 0;
    const rm = await fakeServer(() => {
      calls++;
      return { body: '{"score": 0.5}', delayMs: calls === 1 ? 5_000 : 50 };
    });
    closers.push(rm.close);
    const config = join(dir, 'rewards.json');
    writeFileSync(
      config,
      JSON.stringify({
        functions: {
          exact: { plugin: 'rule', params: { kind: 'regex', pattern: '\\b42\\b' } },
          rm: { plugin: 'rm', params: { url: `${rm.url}/score` } },
        },
        channels: { train: { functions: ['exact', 'rm'], combination: '0.5*exact + 0.5*rm' } },
        // A claimed job is another worker's after 2 s without an answer.
        workers: {
          concurrency: 2,
          timeout_ms: 2_000,
          max_attempts: 3,
          backoff_ms: 20,
          backoff_max_ms: 50,
          poll_ms: 50,
        },
      }),
    );
    const pg = ['--pg', pgUrl!, '--pg-schema', schema];
    const server = await startServerProcess('', [
      ...pg,
      '--engine',
      'sim',
      '--rewards',
      config,
      '--reward-workers',
      '0',
    ]);
    const first = spawnCli(['worker', 'rewards', ...pg, '--rewards', config]);
    await logLine(first, (e) => e.msg === 'stepwise reward worker ready');

    const episode = async (say: string) => {
      const init = (await (
        await fetch(`${server.url}/init_trajectory`, {
          method: 'POST',
          body: '{}',
          headers: { 'content-type': 'application/json' },
        })
      ).json()) as { trajectory_uid: string; base_url: string };
      const client = new OpenAI({ baseURL: init.base_url, apiKey: 'x', maxRetries: 0 });
      await client.chat.completions.create({ model: 'sim', messages: [{ role: 'user', content: say }] });
      await fetch(`${server.url}/v1/trajectories/${init.trajectory_uid}/complete`, {
        method: 'POST',
        body: '{}',
        headers: { 'content-type': 'application/json' },
      });
      return init.trajectory_uid;
    };
    const a = await episode('The answer is 42.');
    // The first worker holds a's reward-model job (5 s): kill it now.
    await expect.poll(() => calls, { timeout: 10_000 }).toBeGreaterThan(0);
    first.kill('SIGKILL');
    const second = spawnCli(['worker', 'rewards', ...pg, '--rewards', config]);
    await logLine(second, (e) => e.msg === 'stepwise reward worker ready');
    const b = await episode('no number here');

    const reward = async (id: string) =>
      ((await (await fetch(`${server.url}/v1/trajectories/${id}`)).json()) as { reward: number | null })
        .reward;
    await expect.poll(() => reward(a), { timeout: 20_000, interval: 200 }).toBe(0.75);
    await expect.poll(() => reward(b), { timeout: 20_000, interval: 200 }).toBe(0.25);
    // The server ran nothing itself: every model call came from a worker (a's twice, b's once).
    expect(calls).toBe(3);
    const signals = (await (
      await fetch(`${server.url}/v1/trajectories/${a}/signals?current=true`)
    ).json()) as {
      items?: { name: string; value: number }[];
    };
    expect(JSON.stringify(signals)).toContain('"rm"');
  }, 60_000);

  it('needs --pg and --rewards, and says so', async () => {
    const noPg = await runCli(['worker', 'rewards', '--rewards', 'x.json'], { STEPWISE_PG_URL: '' });
    expect(noPg.code).not.toBe(0);
    expect(noPg.stderr).toMatch(/--pg/);
    const noRewards = await runCli(['worker', 'rewards', '--pg', pgUrl!]);
    expect(noRewards.code).not.toBe(0);
    expect(noRewards.stderr).toMatch(/--rewards/);
    const help = await runCli(['worker', 'rewards', '--help'], {
      STEPWISE_PG_URL: 'postgres://u:hunter2@h/db',
    });
    expect(help.stdout).toMatch(/--concurrency/);
    expect(help.stdout).not.toContain('hunter2');
  });
});
