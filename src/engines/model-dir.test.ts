import { afterAll, describe, expect, it } from 'vitest';
import { makeModelFolder } from '../../test/support/model-folders.js';
import { buildSimApp, checkSimOptions } from './sim/serve.js';
import { parseEngineSpec } from './upstream.js';

const llama = makeModelFolder('llama3_1');
const qwen = makeModelFolder('qwen3');
afterAll(() => {
  llama.remove();
  qwen.remove();
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

  it('refuses a folder of another family, naming the model, instead of writing Qwen3 text', () => {
    expect(() => checkSimOptions({ modelDir: llama.dir })).toThrow(
      /Llama-3\.1-8B-Instruct.*family llama3\) does not support the built-in sim/,
    );
  });
});
