import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';
import { killAllServerProcesses, startServerProcess } from './support/server-process.js';

/*
 * The CLI as people run it: `stepwise serve --engine sim` (gateway and pool on one port), and a
 * `stepwise gateway` beside it over the same SQLite file; the official openai client as the agent.
 */

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-gateway-cli-'));
});
afterAll(async () => {
  await killAllServerProcesses();
  rmSync(dir, { recursive: true, force: true });
});

async function post(url: string, body: unknown) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, json: (await res.json()) as Record<string, unknown> };
}

describe('stepwise serve --engine sim and stepwise gateway', () => {
  const schema = freshSchema('stepwise_gateway_cli');
  afterAll(() => (pgUrl ? dropSchema(schema) : undefined));
  // One store, two processes: a SQLite file, and (when the tests have one) a PostgreSQL schema.
  const stores: [string, () => [string, string[]]][] = [
    ['a SQLite file', () => [join(dir, 'shared.db'), []]],
    ...(pgUrl
      ? [
          ['a PostgreSQL schema', () => [pgUrl, ['--pg-schema', schema]]] as [
            string,
            () => [string, string[]],
          ],
        ]
      : []),
  ];
  it.each(stores)(
    'captures calls made through a separate gateway process into the shared store (%s)',
    async (_, where) => {
      const [db, extra] = where();
      const pool = await startServerProcess(db, [...extra, '--engine', 'sim']);
      const gateway = await startServerProcess(
        db,
        [...extra, '--engine', 'sim', '--sim-seed', '5'],
        {},
        'gateway',
      );
      // The trajectory is minted by one process and written through the other: sessions live in the store.
      const init = await post(`${pool.url}/init_trajectory`, { group_id: 'p1', n_rollouts: 1 });
      expect(init.status).toBe(200);
      const id = init.json.trajectory_uid as string;
      const viaGateway = new OpenAI({ baseURL: `${gateway.url}/${id}/p1/v1`, apiKey: 'x', maxRetries: 0 });
      const answer = await viaGateway.chat.completions.create({
        model: 'anything',
        messages: [{ role: 'user', content: 'hello from another process' }],
      });
      expect(answer.choices[0]!.message.content).toBe('hello from another process');
      const done = await post(`${gateway.url}/v1/trajectories/${id}/complete`, { reward: 1 });
      expect(done.json).toMatchObject({ status: 'complete', n_steps: 1 });
      // The gateway process exposes no trainer routes; the pool process serves the step.
      expect((await fetch(`${gateway.url}/v1/stats`)).status).toBe(404);
      const res = await fetch(`${pool.url}/v1/trajectories/${id}`);
      const body = (await res.json()) as {
        steps: { response_text: string; engine_id: string; token_source: string }[];
      };
      expect(body.steps).toEqual([
        expect.objectContaining({
          response_text: 'hello from another process',
          engine_id: 'sim',
          token_source: 'engine',
        }),
      ]);
    },
  );

  it('without an engine, LLM calls get a 503 that says how to configure one', async () => {
    const server = await startServerProcess(join(dir, 'none.db'));
    const init = await post(`${server.url}/init_trajectory`, {});
    const client = new OpenAI({ baseURL: init.json.base_url as string, apiKey: 'x', maxRetries: 0 });
    await expect(
      client.chat.completions.create({ model: 'm', messages: [{ role: 'user', content: 'hi' }] }),
    ).rejects.toMatchObject({ status: 503, message: expect.stringMatching(/--engine sim/) });
  });
});
