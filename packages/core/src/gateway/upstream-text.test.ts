import { describe, expect, it } from 'vitest';
import type { Engine } from '../engines/router.js';
import { upstreamText } from './call-request.js';

const vllm = { id: 'vllm@a', kind: 'vllm' } as Engine;
const openai = { id: 'openai@b', kind: 'openai' } as Engine;

/** The agent's text as an agent might write it: its own spacing and escapes. */
const agentText =
  '{ "model": "qwen3",\n  "messages": [ {"role": "user", "content": "caf\\u00e9 \\"quoted\\""} ] }\n';
const parsed = () => JSON.parse(agentText) as Record<string, unknown>;

const count = (text: string, key: string) => text.split(`"${key}"`).length - 1;

describe('upstreamText', () => {
  it("appends the missing fields to the agent's own text, which reaches the engine byte for byte", () => {
    const out = upstreamText('chat', parsed(), agentText, vllm, ['qwen3']);
    expect(out.startsWith(agentText.slice(0, agentText.lastIndexOf('}')))).toBe(true);
    expect(JSON.parse(out)).toEqual({ ...parsed(), return_token_ids: true, logprobs: true });
  });

  it('forwards the text untouched when the agent already asked for everything', () => {
    const text =
      '{"model":"qwen3","messages":[{"role":"user","content":"x"}],"logprobs":true,"return_token_ids":true}';
    expect(upstreamText('chat', JSON.parse(text), text, vllm, ['qwen3'])).toBe(text);
  });

  it('re-serializes, without duplicate keys, when the agent set a field differently', () => {
    const text = '{"model":"qwen3","messages":[{"role":"user","content":"x"}],"logprobs":false}';
    const out = upstreamText('chat', JSON.parse(text), text, vllm, ['qwen3']);
    expect(count(out, 'logprobs')).toBe(1);
    expect(JSON.parse(out)).toMatchObject({ logprobs: true, return_token_ids: true });
  });

  it('replaces a model the engine does not serve', () => {
    const out = upstreamText('chat', parsed(), agentText, vllm, ['served-model']);
    expect(count(out, 'model')).toBe(1);
    expect(JSON.parse(out).model).toBe('served-model');
  });

  it('asks for the usage chunk of a stream, keeping the stream options the agent set', () => {
    const text =
      '{"messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":false,"continuous_usage_stats":true}}';
    const out = upstreamText('chat', JSON.parse(text), text, vllm, []);
    expect(count(out, 'stream_options')).toBe(1);
    expect(JSON.parse(out).stream_options).toEqual({ include_usage: true, continuous_usage_stats: true });
    const plain = '{"messages":[{"role":"user","content":"x"}],"stream":true}';
    expect(JSON.parse(upstreamText('chat', JSON.parse(plain), plain, vllm, [])).stream_options).toEqual({
      include_usage: true,
    });
  });

  it('adds nothing for an OpenAI-compatible API (no token ids to ask for), and prints the object without its text', () => {
    expect(upstreamText('chat', parsed(), agentText, openai, [])).toBe(agentText);
    const out = upstreamText('text', { prompt: 'hi', logprobs: 3 }, null, vllm, []);
    expect(JSON.parse(out)).toEqual({ prompt: 'hi', logprobs: 3, return_token_ids: true });
  });
});
