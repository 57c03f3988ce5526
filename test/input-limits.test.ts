import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * One set of input limits on both stores (issue 24, docs/security.md): what PostgreSQL cannot store
 * (NUL in text, a policy version beyond its integer) is refused with a 400 naming the field on
 * SQLite and PostgreSQL alike, before it reaches either, and nothing changes. Real HTTP on loopback;
 * the PostgreSQL half runs when STEPWISE_TEST_PG_URL is set.
 */

const dirs: string[] = [];
const schemas: string[] = [];
afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

const step = (trajectory: string, extra: Record<string, unknown> = {}) => ({
  trajectory_uid: trajectory,
  prompt_uid: 'p',
  step_index: 0,
  prompt_ids: [1, 2],
  response_ids: [3],
  is_last: true,
  reward: 1,
  ...extra,
});

const stores: [string, () => Promise<RunningServer>][] = [
  [
    'SQLite',
    async () => {
      const dir = mkdtempSync(join(tmpdir(), 'stepwise-limits-'));
      dirs.push(dir);
      return startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'] });
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_limits');
      schemas.push(schema);
      return startServer({ dbPath: '', pg: { url: pgUrl!, schema }, port: 0, engines: ['sim'] });
    },
  ]);
}

for (const [name, start] of stores) {
  describe(`input limits on ${name}`, () => {
    it('refuses NUL in metadata, label notes, tags and signal names, and a policy version beyond int32, storing nothing', async () => {
      const server = await start();
      try {
        const send = (method: string, path: string, body: unknown) =>
          fetch(`${server.url}${path}`, {
            method,
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify(body),
          });
        const cases: [string, string, unknown, string][] = [
          [
            'POST',
            '/v1/steps',
            { steps: [step('t1', { metadata: { note: 'a\u0000b' } })] },
            'steps.0.metadata.note',
          ],
          [
            'POST',
            '/v1/steps',
            { steps: [step('t1', { metadata: { 'k\u0000': 1 } })] },
            'steps.0.metadata.k\u0000',
          ],
          [
            'POST',
            '/v1/steps',
            { steps: [step('t1', { policy_version: 2_147_483_648 })] },
            'steps.0.policy_version',
          ],
          ['PUT', '/v1/policy-version', { version: 2_147_483_648 }, 'version'],
        ];
        for (const [method, path, body, field] of cases) {
          const res = await send(method, path, body);
          expect(res.status, `${method} ${path} ${field}`).toBe(400);
          expect(((await res.json()) as { error: { field: string } }).error.field).toBe(field);
        }
        // A stored trajectory, then labels and signals on it that carry NUL.
        expect((await send('POST', '/v1/steps', { steps: [step('t2')] })).status).toBe(200);
        for (const [path, body, field] of [
          ['/v1/labels', { labels: [{ trajectory_uid: 't2', note: 'x\u0000' }] }, 'labels.0.note'],
          ['/v1/labels', { labels: [{ trajectory_uid: 't2', tags: ['a\u0000'] }] }, 'labels.0.tags.0'],
          [
            '/v1/signals',
            { signals: [{ trajectory_uid: 't2', name: 's\u0000', value: 1, source: 'human' }] },
            'signals.0.name',
          ],
        ] as const) {
          const res = await send('POST', path, body);
          expect(res.status, field).toBe(400);
          expect(((await res.json()) as { error: { field: string } }).error.field).toBe(field);
        }
        // Nothing of the refused requests was stored; the server still serves.
        expect(await server.pool.store.getTrajectory('t1')).toBeNull();
        expect(await server.pool.store.getCurrentLabels('t2')).toEqual([]);
        expect(await server.pool.getSignals('t2', { current: true })).toEqual([]);
        expect(await server.pool.policyVersion()).toBe(0);
        expect((await send('PUT', '/v1/policy-version', { version: 2_147_483_647 })).status).toBe(200);
        expect((await send('POST', '/v1/steps', { steps: [step('t3')] })).status).toBe(200);
        expect(await server.pool.store.getTrajectory('t3')).not.toBeNull();
      } finally {
        await server.close();
      }
    }, 60_000);

    it('bounds every integer that reaches a column by that column, on either store', async () => {
      const server = await start();
      try {
        const send = (method: string, path: string, body?: unknown) =>
          fetch(`${server.url}${path}`, {
            method,
            headers: { 'content-type': 'application/json' },
            ...(body === undefined ? {} : { body: JSON.stringify(body) }),
          });
        const big = 2 ** 53 - 1;
        expect((await send('POST', '/v1/steps', { steps: [step('t1')] })).status).toBe(200);
        const refused: [string, string, unknown, string][] = [
          ['POST', '/v1/steps', { steps: [step('t2', { step_index: 2 ** 31 })] }, 'steps.0.step_index'],
          ['POST', '/v1/steps', { steps: [step('t2', { prompt_ids: [2 ** 32] })] }, 'steps.0.prompt_ids.0'],
          [
            'POST',
            '/v1/labels',
            { labels: [{ trajectory_uid: 't1', step_index: 2 ** 31, note: 'x' }] },
            'labels.0.step_index',
          ],
          ['POST', '/v1/batches/lease', { channel: 'train', batch_size: big }, 'batch_size'],
          ['POST', '/v1/batches/lease', { channel: 'train', batch_size: 1, ttl_ms: big }, 'ttl_ms'],
          ['POST', '/init_trajectory', { n_rollouts: 2 ** 31 }, 'n_rollouts'],
        ];
        for (const [method, path, body, field] of refused) {
          const res = await send(method, path, body);
          expect([path, field, res.status]).toEqual([path, field, 400]);
          const json = (await res.json()) as { error: { field?: string; param?: string } };
          expect(json.error.field ?? json.error.param).toBe(field);
        }
        // Accepted where the value is only compared, never stored in a narrower column.
        const taken: [string, string, unknown?][] = [
          ['PUT', '/v1/channels/train', { max_staleness: big, max_queue_size: big, idle_timeout_ms: big }],
          ['POST', '/v1/batches/lease', { channel: 'train', batch_size: 1, max_staleness: big }],
          ['GET', `/v1/events?cursor=${big}`],
          ['POST', '/v1/steps', { steps: [step('t3', { prompt_ids: [2 ** 32 - 1] })] }],
        ];
        for (const [method, path, body] of taken) {
          const res = await send(method, path, body);
          expect([path, res.status < 300]).toEqual([path, true]);
        }
        expect((await server.pool.getTrajectorySteps('t3'))[0]!.promptIds).toEqual([2 ** 32 - 1]);
        expect((await send('GET', '/ready')).status).toBe(200);
      } finally {
        await server.close();
      }
    }, 60_000);

    it("stores an LLM call's NUL characters losslessly: a tool's output is what it is", async () => {
      const server = await start();
      try {
        const init = await fetch(`${server.url}/init_trajectory`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: '{}',
        });
        const { base_url, trajectory_uid } = (await init.json()) as {
          base_url: string;
          trajectory_uid: string;
        };
        const messages = [
          { role: 'user', content: 'cat the binary file' },
          {
            role: 'assistant',
            content: null,
            tool_calls: [
              { id: 'c1', type: 'function', function: { name: 'cat', arguments: '{"p":"\u0000"}' } },
            ],
          },
          { role: 'tool', tool_call_id: 'c1', content: 'ELF\u0000\u0001\u0000' },
          { role: 'user', content: 'what was in it?\u0000' },
        ];
        const res = await fetch(`${base_url}/chat/completions`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: 'sim', messages, max_tokens: 8, stop: ['\u0000'] }),
        });
        expect(res.status).toBe(200);
        const [stored] = await server.pool.getTrajectorySteps(trajectory_uid);
        expect(stored!.messages).toEqual(messages);
        expect(stored!.metadata.stop).toEqual(['\u0000']);
      } finally {
        await server.close();
      }
    }, 60_000);
  });
}
