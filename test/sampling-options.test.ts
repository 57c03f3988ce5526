import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';

/*
 * The gateway's input limits on LLM calls (issue 24, docs/security.md): sampling options are
 * type-checked before anything is forwarded or stored, and /generate refuses a trajectory nobody
 * opened. Real HTTP on loopback, a real SQLite file, the built-in sim as the engine.
 */

let dir: string;
let server: RunningServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-sampling-'));
  server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'] });
});
afterAll(async () => {
  await server.close();
  rmSync(dir, { recursive: true, force: true });
});

const post = (path: string, body: unknown) =>
  fetch(path.startsWith('http') ? path : `${server.url}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });

/** A fresh trajectory's base_url, as an agent gets it. */
async function baseUrl(): Promise<string> {
  return ((await (await post('/init_trajectory', {})).json()) as { base_url: string }).base_url;
}

const chat = async (extra: Record<string, unknown>) =>
  post(`${await baseUrl()}/chat/completions`, {
    model: 'sim',
    messages: [{ role: 'user', content: 'hi' }],
    ...extra,
  });

async function storedSteps(): Promise<number> {
  return (await server.pool.store.listSteps({ limit: 1000, offset: 0 })).items.length;
}

describe('sampling options are type-checked: a 400 naming the field, nothing forwarded or stored', () => {
  const cases: [string, Record<string, unknown>, string][] = [
    ['temperature as text', { temperature: 'hot' }, 'temperature'],
    ['logprobs as text', { logprobs: 'x' }, 'logprobs'],
    ['a negative logprobs count', { logprobs: -1 }, 'logprobs'],
    ['max_tokens as a fraction', { max_tokens: 2.5 }, 'max_tokens'],
    ['top_p as a boolean', { top_p: true }, 'top_p'],
    ['seed as text', { seed: '7' }, 'seed'],
    ['stop as a number', { stop: 3 }, 'stop'],
    ['stop with a number inside', { stop: ['a', 3] }, 'stop'],
  ];
  for (const [what, extra, field] of cases) {
    it(`chat: ${what}`, async () => {
      const before = await storedSteps();
      const res = await chat(extra);
      expect(res.status).toBe(400);
      const body = (await res.json()) as { error: { message: string; param?: string; field?: string } };
      expect(body.error.message).toMatch(new RegExp(`^${field}: must be`));
      expect(await storedSteps()).toBe(before);
    });
  }

  it('completions: temperature as text', async () => {
    const res = await post(`${await baseUrl()}/completions`, {
      model: 'sim',
      prompt: 'hi',
      temperature: 'hot',
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /^temperature: must be a number/,
    );
  });

  it('well-typed options still go through, nulls count as absent', async () => {
    const before = await storedSteps();
    const res = await chat({
      temperature: 0.7,
      top_p: 1,
      max_tokens: 8,
      seed: 3,
      stop: ['\n\n'],
      logprobs: true,
      top_logprobs: 2,
      presence_penalty: null,
    });
    expect(res.status).toBe(200);
    // The step is written just after the answer (commit-before-answer is issue 24's item 3).
    await expect.poll(storedSteps).toBe(before + 1);
  });
});

describe('/generate', () => {
  it('refuses an unknown trajectory_uid with a 404 naming it', async () => {
    const res = await post('/generate', { prompt_ids: [1, 2, 3], trajectory_uid: 'nobody-opened-this' });
    expect(res.status).toBe(404);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /^trajectory_uid: no trajectory nobody-opened-this/,
    );
  });

  it('type-checks sampling_params, naming the nested field', async () => {
    const res = await post('/generate', { prompt_ids: [1, 2, 3], sampling_params: { temperature: 'hot' } });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toMatch(
      /^sampling_params\.temperature: must be a number/,
    );
  });

  it('still generates for a trajectory that exists, and without one', async () => {
    const init = (await (await post('/init_trajectory', {})).json()) as { trajectory_uid: string };
    const withTrajectory = await post('/generate', {
      prompt_ids: [1, 2, 3],
      trajectory_uid: init.trajectory_uid,
      sampling_params: { max_new_tokens: 4, temperature: 0 },
    });
    expect(withTrajectory.status).toBe(200);
    expect(((await withTrajectory.json()) as { response_ids: number[] }).response_ids.length).toBeGreaterThan(
      0,
    );
    const without = await post('/generate', { prompt_ids: [1, 2, 3], sampling_params: { max_tokens: 4 } });
    expect(without.status).toBe(200);
  });
});
