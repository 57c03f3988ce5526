import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { MAX_PROMPT_TOKENS } from '../packages/core/src/domain/index.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { OFFLOAD_BODY_BYTES } from '../packages/core/src/services/steps-body.js';
import { callJson } from './support/http.js';
import { dropSchema, freshSchema, pgUrl } from './support/postgres.js';

/*
 * Big step batches are parsed off the event loop (docs/security.md): from OFFLOAD_BODY_BYTES on, the
 * body goes to the gateway's offload thread and its token ids come back as moved Uint32Arrays. What
 * is stored must be exactly what was sent, on every store, and a bad step still a 400 naming its field.
 */

const dirs: string[] = [];
const schemas: string[] = [];
afterAll(async () => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  for (const schema of schemas) await dropSchema(schema);
});

const sqlite = (storeThread: 'main' | 'worker') => async () => {
  const dir = mkdtempSync(join(tmpdir(), 'stepwise-offload-'));
  dirs.push(dir);
  return startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: [], storeThread });
};
const stores: [string, () => Promise<RunningServer>][] = [
  ['SQLite', sqlite('main')],
  ['SQLite on its worker thread', sqlite('worker')],
];
if (pgUrl) {
  stores.push([
    'PostgreSQL',
    async () => {
      const schema = freshSchema('stepwise_offload');
      schemas.push(schema);
      return startServer({ dbPath: '', pg: { url: pgUrl!, schema }, port: 0, engines: [] });
    },
  ]);
}

/** An episode of `n` steps whose prompts extend each other, ids spread over the vocabulary. */
function episode(trajectory: string, n: number, promptLen: number, seed: number) {
  let history: number[] = Array.from({ length: promptLen }, (_, i) => (seed * 7919 + i * 104_729) % 151_000);
  return Array.from({ length: n }, (_, i) => {
    const prompt = history.concat([151_643, 4_000_000_000 + i]);
    const response = Array.from({ length: 50 }, (_, j) => (seed + i * 31 + j * 997) % 151_000);
    history = prompt.concat(response);
    return {
      trajectory_uid: trajectory,
      prompt_uid: `g-${trajectory}`,
      step_index: i,
      prompt_ids: prompt,
      response_ids: response,
      rollout_log_probs: response.map((_, j) => -(j + 1) / 64),
      // One guided step: its training view drops two ids from the middle of the prompt.
      ...(i === 1 ? { training_prompt_ids: prompt.filter((_, k) => k !== 3 && k !== 4) } : {}),
      is_last: i === n - 1,
      reward: i === n - 1 ? 1 : null,
      metadata: { seed, i },
    };
  });
}

for (const [name, start] of stores) {
  describe(`big step batches on ${name}`, () => {
    it('stores a batch parsed off the event loop exactly as sent, and parses none of it here', async () => {
      const server = await start();
      try {
        const steps = [
          ...episode(`big-a-${name.length}`, 12, 4_000, 1),
          ...episode(`big-b-${name.length}`, 12, 4_000, 2),
        ];
        const body = JSON.stringify({ steps });
        expect(body.length).toBeGreaterThan(OFFLOAD_BODY_BYTES);
        // The server runs in this process: a big body must not be JSON.parsed on this thread.
        const parse = vi.spyOn(JSON, 'parse');
        let res: Awaited<ReturnType<typeof callJson>>;
        let bigParses: number;
        try {
          res = await callJson('POST', `${server.url}/v1/steps`, body);
          bigParses = parse.mock.calls.filter(
            ([text]) => typeof text === 'string' && text.length >= OFFLOAD_BODY_BYTES,
          ).length;
        } finally {
          parse.mockRestore();
        }
        expect(bigParses).toBe(0);
        expect(res.status).toBe(200);
        expect(res.json.inserted).toBe(24);

        for (const trajectory of [steps[0]!.trajectory_uid, steps[12]!.trajectory_uid]) {
          const got = await callJson('GET', `${server.url}/v1/trajectories/${trajectory}`);
          expect(got.status).toBe(200);
          const stored = got.json;
          const sent = steps.filter((s) => s.trajectory_uid === trajectory);
          expect(stored.steps).toHaveLength(sent.length);
          stored.steps.forEach((s: Record<string, unknown>, i: number) => {
            expect(s.prompt_ids).toEqual(sent[i]!.prompt_ids);
            expect(s.response_ids).toEqual(sent[i]!.response_ids);
            expect(s.training_prompt_ids ?? null).toEqual(sent[i]!.training_prompt_ids ?? null);
            expect((s.rollout_log_probs as number[]).map((x) => Math.round(x * 64))).toEqual(
              sent[i]!.rollout_log_probs.map((x) => Math.round(x * 64)),
            );
            expect(s.metadata).toEqual(sent[i]!.metadata);
          });
        }
        // The same steps again are duplicates, whichever path parsed them.
        const again = await callJson('POST', `${server.url}/v1/steps`, body);
        expect(again.json).toMatchObject({ inserted: 0, duplicates: 24 });
      } finally {
        await server.close();
      }
    });

    it('refuses a big batch with one bad id, NUL or too long an array, naming its field, and stores none of it', async () => {
      const server = await start();
      try {
        const steps = episode(`bad-${name.length}`, 20, 4_000, 3);
        (steps[17]!.prompt_ids as number[])[5] = -1;
        const before = (await server.pool.stats()).produced.steps;
        const res = await callJson('POST', `${server.url}/v1/steps`, JSON.stringify({ steps }));
        expect(res.status).toBe(400);
        expect(res.json.error.field).toBe('steps.17.prompt_ids.5');
        expect(res.json.error.message).toContain('must be >= 0');
        const nul = episode(`nul-${name.length}`, 20, 4_000, 4);
        (nul[9]!.metadata as Record<string, unknown>).note = 'a\u0000b';
        const refused = await callJson('POST', `${server.url}/v1/steps`, JSON.stringify({ steps: nul }));
        expect(refused.status).toBe(400);
        expect(refused.json.error.field).toBe('steps.9.metadata.note');
        // A step is one LLM call: an id array longer than a call's prompt may be is refused.
        const long = episode(`long-${name.length}`, 2, 4_000, 5);
        long[1]!.prompt_ids = Array.from({ length: MAX_PROMPT_TOKENS + 1 }, (_, i) => i % 1000);
        const tooLong = await callJson('POST', `${server.url}/v1/steps`, JSON.stringify({ steps: long }));
        expect(tooLong.status).toBe(400);
        expect(tooLong.json.error.field).toBe('steps.1.prompt_ids');
        expect(tooLong.json.error.message).toContain(`at most ${MAX_PROMPT_TOKENS}`);
        expect((await server.pool.stats()).produced.steps).toBe(before);
      } finally {
        await server.close();
      }
    });
  });
}
