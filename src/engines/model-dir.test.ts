import { afterAll, describe, expect, it } from 'vitest';
import { makeModelFolder } from '../../test/support/model-folders.js';
import { buildSimApp, checkSimOptions } from './sim/serve.js';
import { parseEngineSpec } from './upstream.js';

const llama = makeModelFolder('llama3_1');
const qwen = makeModelFolder('qwen3');
const gemma = makeModelFolder('gemma3');
afterAll(() => {
  llama.remove();
  qwen.remove();
  gemma.remove();
});

describe('--engine KIND[=URL],model-dir=DIR,family=NAME', () => {
  it('reads the model folder and family after the URL', () => {
    expect(parseEngineSpec('vllm=http://127.0.0.1:8000/v1,model-dir=/models/llama,family=llama3')).toEqual({
      kind: 'vllm',
      url: 'http://127.0.0.1:8000',
      id: 'vllm@127.0.0.1:8000',
      modelDir: '/models/llama',
      family: 'llama3',
    });
    expect(parseEngineSpec('sim,model-dir=/models/qwen')).toEqual({
      kind: 'sim',
      url: null,
      id: 'sim',
      modelDir: '/models/qwen',
    });
  });

  it('refuses an unknown option or an empty value, naming it', () => {
    expect(() => parseEngineSpec('vllm=http://h:1,model=/x')).toThrow(/unknown option 'model'/);
    expect(() => parseEngineSpec('sim,model-dir=')).toThrow(/model-dir needs a value/);
  });
});

describe('the sim with a model folder', () => {
  it('speaks with a Qwen3 folder', async () => {
    const { app } = buildSimApp({ modelDir: qwen.dir });
    const res = await app.request('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'hi' }], max_tokens: 4 }),
    });
    expect(res.status).toBe(200);
  });

  it('speaks with a folder of another family in its own format', async () => {
    const { app } = buildSimApp({ modelDir: llama.dir });
    const res = await app.request('/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: 'sim', messages: [{ role: 'user', content: 'hi' }], max_tokens: 64 }),
    });
    expect(res.status).toBe(200);
    const body = (await res.json()) as { choices: { token_ids: number[] }[] };
    // Llama 3's end of turn (tokenizer.json: <|eot_id|> = 128009), never Qwen3's <|im_end|>.
    expect(body.choices[0]!.token_ids.at(-1)).toBe(128009);
  });

  it('refuses a folder of a family with no tool-call format, naming the model, instead of writing Qwen3 text', () => {
    expect(() => checkSimOptions({ modelDir: gemma.dir })).toThrow(
      /family gemma3\) does not support the built-in sim/,
    );
  });
});
