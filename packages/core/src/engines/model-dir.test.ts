import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { makeModelFolder } from '../../../../test/support/model-folders.js';
import { buildSimApp } from './sim/serve.js';
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

  it('speaks Gemma 3 (tools through its template), and refuses tools a template cannot write, naming the model', async () => {
    const tools = [
      {
        type: 'function',
        function: {
          name: 'read_file',
          parameters: { type: 'object', properties: { path: { type: 'string' } } },
        },
      },
    ];
    const call = (app: ReturnType<typeof buildSimApp>['app']) =>
      app.request('/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          model: 'sim',
          messages: [{ role: 'user', content: 'hi' }],
          tools,
          max_tokens: 64,
        }),
      });
    const vocab = JSON.parse(readFileSync(join(gemma.dir, 'tokenizer.json'), 'utf8')) as {
      added_tokens: { id: number; content: string }[];
    };
    const endOfTurn = vocab.added_tokens.find((t) => t.content === '<end_of_turn>')!.id;
    const served = await call(buildSimApp({ modelDir: gemma.dir }).app);
    expect(served.status).toBe(200);
    const body = (await served.json()) as { choices: { token_ids: number[] }[] };
    expect(body.choices[0]!.token_ids.at(-1)).toBe(endOfTurn);
    // Google's released template writes no tools: a request with tools is refused, never rendered without them.
    rmSync(join(gemma.dir, 'chat_template.jinja'));
    const refused = await call(buildSimApp({ modelDir: gemma.dir }).app);
    expect(refused.status).toBe(400);
    expect(((await refused.json()) as { error: { message: string } }).error.message).toMatch(
      /family gemma3\) does not support tools with this chat template/,
    );
  });
});
