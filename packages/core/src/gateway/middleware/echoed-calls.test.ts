import { describe, expect, it } from 'vitest';
import { answered, callContext, testSession } from '../../../../../test/support/call-context.js';
import { echoedCalls } from './echoed-calls.js';

const tools = [
  {
    type: 'function',
    function: {
      name: 'read',
      parameters: { type: 'object', properties: { path: { type: 'string' }, limit: { default: 100 } } },
    },
  },
];

const turn = (args: string) => ({
  role: 'assistant',
  content: null,
  tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'read', arguments: args } }],
});

describe('echoedCalls', () => {
  it('restores a call of ours echoed with its defaults filled in, as generated', async () => {
    const session = testSession();
    session.generatedCalls.set('call_1', '{"path": "a.txt"}');
    const ctx = callContext({
      session,
      raw: '{}',
      body: { messages: [{ role: 'user', content: 'x' }, turn('{"path":"a.txt","limit":100}')], tools },
    });
    await echoedCalls(ctx, answered());
    const assistant = ctx.chat?.messages[1];
    expect(assistant?.role === 'assistant' && assistant.tool_calls?.[0]?.function.arguments).toBe(
      '{"path": "a.txt"}',
    );
    expect(ctx.raw).toBeNull();
  });

  it('keeps a call the agent changed, and the request text', async () => {
    const session = testSession();
    session.generatedCalls.set('call_1', '{"path": "a.txt"}');
    const ctx = callContext({
      session,
      raw: '{}',
      body: { messages: [{ role: 'user', content: 'x' }, turn('{"path":"b.txt"}')], tools },
    });
    await echoedCalls(ctx, answered());
    const assistant = ctx.chat?.messages[1];
    expect(assistant?.role === 'assistant' && assistant.tool_calls?.[0]?.function.arguments).toBe(
      '{"path":"b.txt"}',
    );
    expect(ctx.raw).toBe('{}');
  });
});
