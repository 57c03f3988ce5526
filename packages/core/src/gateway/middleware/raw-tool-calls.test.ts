import { describe, expect, it } from 'vitest';
import { answer, callContext, simEngine, testSession } from '../../../../../test/support/call-context.js';
import { type NewStep, ValidationError } from '../../domain/index.js';
import type { RoutedCall } from '../capture.js';
import { rawToolCallAnswer, rawToolCalls } from './raw-tool-calls.js';

const tokenizing = { decodeGenerated: async () => '<tool_call>\n{"name": "ls"}\n</tool_call>' };
const body = (stream: boolean) => ({ messages: [{ role: 'user', content: 'x' }], stream });
const completion = {
  choices: [
    {
      index: 0,
      finish_reason: 'tool_calls',
      message: {
        role: 'assistant',
        content: null,
        tool_calls: [{ id: 'c1', type: 'function', function: { name: 'ls', arguments: '{}' } }],
      },
    },
  ],
};

describe('rawToolCalls', () => {
  it('refuses stream: true for a raw_tool_calls trajectory, naming the field', async () => {
    const ctx = callContext({ session: testSession({ rawToolCalls: true }), body: body(true) });
    const refused = rawToolCalls(tokenizing)(ctx, async () => answer('never'));
    await expect(refused).rejects.toBeInstanceOf(ValidationError);
    await expect(refused).rejects.toMatchObject({ field: 'stream' });
  });

  it('lets a stream through where the trajectory asked for no raw text', async () => {
    const ctx = callContext({ body: body(true) });
    await expect(rawToolCalls(tokenizing)(ctx, async () => answer('streamed'))).resolves.toMatchObject({
      body: 'streamed',
    });
  });

  it('answers a stored call with its tool call as generated text in content', async () => {
    const ctx = callContext({
      session: testSession({ rawToolCalls: true }),
      body: body(false),
      forward: async () => answer(JSON.stringify(completion)),
    });
    ctx.forward = (() => {
      const inner = ctx.forward;
      return async (call) => {
        for (const told of ctx.stored) told({ responseIds: [1, 2], tokenSource: 'engine' } as NewStep);
        const got = await inner(call);
        return { ...got, body: Buffer.from(String(got.body)) };
      };
    })();
    const routed = { routed: { engine: simEngine() } } as RoutedCall;
    const out = await rawToolCalls(tokenizing)(ctx, (c) => Promise.resolve(c.forward(routed)));
    const parsed = JSON.parse(String(out.body));
    expect(parsed.choices[0].message).toEqual({
      role: 'assistant',
      content: await tokenizing.decodeGenerated(),
    });
    expect(parsed.choices[0].finish_reason).toBe('stop');
  });

  it('rawToolCallAnswer leaves an answer with no call or reasoning as it is', () => {
    expect(
      rawToolCallAnswer({ choices: [{ message: { role: 'assistant', content: 'hi' } }] }, null),
    ).toBeNull();
  });
});
