import OpenAI from 'openai';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenDecoders } from '../packages/core/src/dashboard/pages/trajectories/decoders.js';
import { findTrainPython, runPython } from '../src/train/python.js';
import { type FixtureFamily, makeModelFolder } from './support/model-folders.js';
import { makeStep } from './support/steps.js';
import { testServers } from './support/test-servers.js';

/*
 * The dashboard reads each step's ids with its own model's tokenizer: a Llama 3.1, a gpt-oss and a
 * Gemma 3 step stored through the gateway (the sim serving that folder, the openai client as the
 * agent) are shown as the tokenizers library (transformers' decoder) decodes them over the same
 * folder; a step of a model this server does not serve is shown as ids, with a note naming the
 * model. Pages are fetched over loopback, as a browser would.
 */

const python = findTrainPython();
const required = Boolean(process.env.STEPWISE_TRAIN_PYTHON);
const { serve } = testServers('dash-families');

const folders = new Map<FixtureFamily, { dir: string; remove(): void }>();
beforeAll(() => {
  for (const f of ['llama3_1', 'gpt-oss', 'gemma3'] as const) folders.set(f, makeModelFolder(f));
});
afterAll(() => {
  for (const f of folders.values()) f.remove();
});

const escapeHtml = (s: string) =>
  s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** The tokenizers library's decoding of ids over the folder's tokenizer.json, special tokens kept (the reference). */
async function hfDecode(dir: string, ids: number[]): Promise<string> {
  const code =
    'import json, sys\nfrom tokenizers import Tokenizer\n' +
    't = Tokenizer.from_file(sys.argv[1] + "/tokenizer.json")\n' +
    'print(json.dumps(t.decode(json.loads(sys.argv[2]), skip_special_tokens=False)))';
  return JSON.parse(await runPython(python!, ['-c', code, dir, JSON.stringify(ids)], { timeoutMs: 120_000 }));
}

describe.each([
  { folder: 'llama3_1' as const, family: 'llama3', end: '<|eot_id|>' },
  { folder: 'gpt-oss' as const, family: 'gpt-oss', end: '<|return|>' },
  // A SentencePiece decoder: `▁` for spaces, byte tokens for what the vocabulary lacks.
  { folder: 'gemma3' as const, family: 'gemma3', end: '<end_of_turn>' },
])('a $family step on the trajectory page', ({ folder, family, end }) => {
  it('is decoded with its own vocabulary', async () => {
    const dir = folders.get(folder)!.dir;
    const server = await serve({
      engines: [`sim,model-dir=${dir}`],
      sim: { policy: 'scripted', script: [{ answer: 'Ship it — déjà vu.' }] },
    });
    const init = (await (
      await fetch(`${server.url}/init_trajectory`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      })
    ).json()) as { trajectory_uid: string; base_url: string };
    const client = new OpenAI({ baseURL: init.base_url, apiKey: 'unused', maxRetries: 0 });
    await client.chat.completions.create({ model: 'any', messages: [{ role: 'user', content: 'Go.' }] });
    const [step] = await server.pool.getTrajectorySteps(init.trajectory_uid);
    expect(step!.metadata.model_family).toBe(family);
    const html = await (await fetch(`${server.url}/dashboard/trajectories/${init.trajectory_uid}`)).text();
    // The answer the script gave and the family's end-of-turn token, spelled by its tokenizer.json.
    expect(html).toContain(escapeHtml(`Ship it — déjà vu.${end}`));
    expect(html).not.toContain('no engine of this server serves');
    if (!python) {
      if (required) throw new Error('STEPWISE_TRAIN_PYTHON is set but has no tokenizers');
      return;
    }
    expect(html).toContain(escapeHtml(await hfDecode(dir, Array.from(step!.responseIds))));
  }, 120_000);
});

describe('a step of a model this server does not serve', () => {
  it('shows its ids with a note naming the model, not Qwen3 text', async () => {
    const server = await serve({});
    const step = makeStep('stranger', 'g-stranger', 0, [128000, 9906], [9906, 128009], {
      isLast: true,
      reward: 1,
      metadata: { model_family: 'llama3', model_name: 'acme/Llama-3.1-8B-ft' },
    });
    const [out] = await server.pool.store.submitBatch(
      [{ channel: 'train', nRollouts: null, steps: [step] }],
      Date.now(),
    );
    expect(out).toBeTruthy();
    const html = await (await fetch(`${server.url}/dashboard/trajectories/stranger`)).text();
    expect(html).toContain(
      'token ids of model acme/Llama-3.1-8B-ft (family llama3), which no engine of this server serves',
    );
    expect(html).toContain('9906 128009');
  });

  it('a decoder table that cannot be built says why, and the ids stay ids', async () => {
    const decoders = new TokenDecoders(
      [{ ref: { dir: '/nowhere' }, family: 'gemma3', name: 'google/gemma-3-1b-it' }],
      async (ref) => {
        if (ref)
          throw new Error("its tokenizer's decoder is WordPiece, neither byte-level nor SentencePiece's");
        return { offsets: new Uint32Array([0, 1]), bytes: new Uint8Array([65]) };
      },
    );
    await decoders.ready();
    const gemma = decoders.of({ model_family: 'gemma3', model_name: 'google/gemma-3-1b-it' });
    expect(gemma.note).toMatch(
      /model google\/gemma-3-1b-it \(family gemma3\), shown as ids: .*WordPiece, neither byte-level/,
    );
    expect(gemma.decode([2, 3])).toBe('2 3');
    expect(decoders.of({}).decode([0])).toBe('A');
  });
});
