import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../src/gateway/server.js';
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
      return startServer({ dbPath: join(dir, 'pool.db'), port: 0 });
    },
  ],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_limits');
      schemas.push(schema);
      return startServer({ dbPath: '', pg: { url: pgUrl!, schema }, port: 0 });
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
  });
}
