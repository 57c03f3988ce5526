import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAX_PROMPT_TOKENS } from '../packages/core/src/domain/index.js';
import type { Captured } from '../packages/core/src/engines/capture.js';
import { type RunningServer, startServer } from '../packages/core/src/server/server.js';
import { inThreadTokenizer } from '../packages/core/src/services/capture-tokenizer.js';
import { offThreadTokenizer } from '../packages/core/src/services/offload.js';
import { loadQwen3Tokenizer } from '../packages/core/src/text/tokenizer.js';
import { callJson } from './support/http.js';

/*
 * The event loop stays free (docs/security.md): the CPU-heavy work of a big call (the built-in
 * sim's tokenising, the gateway's retokenising) runs on worker threads, and a call's prompt of ids
 * is bounded. Shown by order, not by timing: while the heavy work runs, the server (or this thread)
 * keeps answering.
 */

let dir: string;
let server: RunningServer;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'stepwise-loop-'));
  server = await startServer({ dbPath: join(dir, 'pool.db'), port: 0, engines: ['sim'] });
});
afterAll(async () => {
  await server?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** How many times /ready answered while `work` ran (one request at a time, as fast as it answers). */
async function readyWhile<T>(work: Promise<T>): Promise<{ answered: number; result: T }> {
  let done = false;
  const result = work.finally(() => {
    done = true;
  });
  let answered = 0;
  while (!done) {
    const ready = await fetch(`${server.url}/ready`);
    expect(ready.status).toBe(200);
    await ready.text();
    if (!done) answered++;
  }
  return { answered, result: await result };
}

const ids = (n: number) => Array.from({ length: n }, (_, i) => 100 + (i % 5000));

describe('the event loop stays free', () => {
  it('answers /ready many times while the built-in sim tokenises a prompt of MAX_PROMPT_TOKENS ids', async () => {
    const t = (await callJson('POST', `${server.url}/init_trajectory`, {})).json;
    const { answered, result } = await readyWhile(
      callJson('POST', `${server.url}/generate`, {
        trajectory_uid: t.trajectory_uid,
        prompt_ids: ids(MAX_PROMPT_TOKENS),
        sampling_params: { max_tokens: 4 },
      }),
    );
    expect(result.status).toBe(200);
    expect(result.json.response_ids.length).toBeGreaterThan(0);
    // On the event loop, the sim's seconds of tokenising held every /ready until it ended: only the
    // few sent before it began got through (6 where it ran there; thousands on its worker).
    expect(answered).toBeGreaterThanOrEqual(30);
  });

  it('answers /ready many times while the first dashboard page that decodes tokens gets its table', async () => {
    // This process has loaded no tokenizer on its event loop: the sim and the offload thread own theirs.
    const trajectory = `decoded-${Date.now()}`;
    const stored = await callJson('POST', `${server.url}/v1/steps`, {
      steps: [
        {
          trajectory_uid: trajectory,
          prompt_uid: 'g',
          step_index: 0,
          prompt_ids: ids(3_000),
          response_ids: ids(200),
        },
      ],
    });
    expect(stored.status).toBe(200);
    const { answered, result } = await readyWhile(
      fetch(`${server.url}/dashboard/trajectories/${trajectory}`).then(async (res) => ({
        status: res.status,
        html: await res.text(),
      })),
    );
    expect(result.status).toBe(200);
    expect(result.html).toContain('Response (decoded)');
    // Loading the tokenizer here held every /ready for about half a second (a handful got through).
    expect(answered).toBeGreaterThanOrEqual(30);
  });

  it(`refuses a prompt of more than MAX_PROMPT_TOKENS (${MAX_PROMPT_TOKENS}) ids, naming the field, before any work`, async () => {
    const t = (await callJson('POST', `${server.url}/init_trajectory`, {})).json;
    const before = (await server.pool.stats()).produced.steps;
    const generate = await callJson('POST', `${server.url}/generate`, {
      trajectory_uid: t.trajectory_uid,
      prompt_ids: ids(MAX_PROMPT_TOKENS + 1),
    });
    expect(generate.status).toBe(400);
    expect(generate.json.error.param).toBe('prompt_ids');
    expect(generate.json.error.message).toContain(String(MAX_PROMPT_TOKENS));
    const viaInputIds = await callJson('POST', `${server.url}/generate`, {
      trajectory_uid: t.trajectory_uid,
      input_ids: ids(MAX_PROMPT_TOKENS + 1),
    });
    expect(viaInputIds.status).toBe(400);
    const completion = await callJson('POST', `${t.base_url}/completions`, {
      model: 'sim-qwen3',
      prompt: ids(MAX_PROMPT_TOKENS + 1),
      max_tokens: 2,
    });
    expect(completion.status).toBe(400);
    expect(completion.json.error.param).toBe('prompt');
    // At the limit, a call goes through.
    const atLimit = await callJson('POST', `${t.base_url}/completions`, {
      model: 'sim-qwen3',
      prompt: ids(MAX_PROMPT_TOKENS),
      max_tokens: 2,
    });
    expect(atLimit.status).toBe(200);
    expect((await server.pool.stats()).produced.steps - before).toBe(1);
  });

  it('checks a big /generate body (parsed on the offload thread) as it checks a small one', async () => {
    const t = (await callJson('POST', `${server.url}/init_trajectory`, {})).json;
    for (const n of [8, 100_000]) {
      const bad = ids(n);
      bad[n - 3] = -1;
      const negative = await callJson('POST', `${server.url}/generate`, {
        trajectory_uid: t.trajectory_uid,
        prompt_ids: bad,
      });
      expect([negative.status, negative.json.error.param]).toEqual([400, `prompt_ids.${n - 3}`]);
      const nul = await callJson('POST', `${server.url}/generate`, {
        trajectory_uid: t.trajectory_uid,
        prompt_ids: ids(n),
        model: 'sim\u0000',
      });
      expect([nul.status, nul.json.error.param]).toEqual([400, 'model']);
    }
    // Good ids reach the engine unchanged (the sim answers with the prompt it was given).
    const good = await callJson('POST', `${server.url}/generate`, {
      trajectory_uid: t.trajectory_uid,
      input_ids: ids(100_000),
      sampling_params: { max_tokens: 2 },
    });
    expect(good.status).toBe(200);
    expect(good.json.prompt_ids).toEqual(ids(100_000));
  });

  it('retokenises on a worker thread: this thread keeps running, the ids are the same as on it', async () => {
    const messages = [
      { role: 'system' as const, content: 'You are terse.' },
      { role: 'user' as const, content: 'alpha beta gamma delta '.repeat(40_000) },
    ];
    const captured: Captured = {
      promptIds: null,
      responseIds: null,
      logprobs: null,
      content: 'done',
      reasoning: null,
      toolCalls: [],
      finishReason: 'stop',
      usage: null,
      model: null,
      idsIncomplete: false,
      versionSpans: null,
    };
    // Warm the worker (its tokenizer loads once), then count this thread's ticks during one call.
    await offThreadTokenizer.retokenizeText('warm', captured);
    let ticks = 0;
    const ticker = setInterval(() => ticks++, 1);
    const off = await offThreadTokenizer.retokenizeChat({ messages }, captured);
    clearInterval(ticker);
    const on = await inThreadTokenizer(loadQwen3Tokenizer).retokenizeChat({ messages }, captured);
    expect(off).toEqual(on);
    expect(on.promptIds.length).toBeGreaterThan(100_000);
    expect(ticks).toBeGreaterThanOrEqual(10);
  });
});
