import { describe, expect, it } from 'vitest';
import { newStep, type Step } from '../domain/index.js';
import { buildConversation, firstAssistantIndex, stepToolCalls } from './conversation.js';

function step(index: number, over: Partial<Step>): Step {
  const { channel = 'train', createdAt = 0, policyVersion = 0, ...rest } = over;
  return {
    ...newStep({ trajectoryId: 't', groupId: 'g', index, promptIds: [1], responseIds: [2], ...rest }),
    channel,
    createdAt,
    policyVersion,
  };
}

const user = { role: 'user', content: 'go' };
const callA = { id: 'a', type: 'function', function: { name: 'ls', arguments: '{}' } };
const callB = { id: 'b', type: 'function', function: { name: 'cat', arguments: '{"f":1}' } };

describe('buildConversation', () => {
  it('says why there is nothing to train on', () => {
    expect(buildConversation([])).toBe('no_steps');
    expect(buildConversation([step(0, { responseText: 'hi' })])).toBe('no_messages');
    expect(buildConversation([step(0, { messages: [user], responseText: '' })])).toBe('no_answer');
  });

  it('places missing tool outputs after the call they answer, in call order, and never twice', () => {
    const steps = [
      step(0, {
        messages: [user],
        toolCalls: [callA, callB],
        toolResults: [
          { tool_call_id: 'a', content: 'A', error: false },
          { tool_call_id: 'b', content: 'B', error: false },
        ],
      }),
      // The agent sent back only b's output; a's comes from the step's tool results.
      step(1, {
        messages: [
          user,
          { role: 'assistant', content: null, tool_calls: [callA, callB] },
          { role: 'tool', tool_call_id: 'b', content: 'B (sent)' },
        ],
        responseText: 'done',
      }),
    ];
    const c = buildConversation(steps);
    if (typeof c === 'string') throw new Error(c);
    expect(c.messages).toEqual([
      user,
      { role: 'assistant', content: null, tool_calls: [callA, callB] },
      { role: 'tool', tool_call_id: 'b', content: 'B (sent)' },
      { role: 'tool', tool_call_id: 'a', content: 'A' },
      { role: 'assistant', content: 'done' },
    ]);
    expect(c).toMatchObject({ addedToolResults: 1, unplacedToolResults: 0 });
    expect(firstAssistantIndex(c.messages)).toBe(1);
  });

  it('counts outputs whose call is not in the conversation instead of inventing a turn', () => {
    const steps = [
      step(0, { messages: [user], toolCalls: [callA], toolResults: [{ content: 'A', error: false }] }),
      // The agent dropped its history: the call to answer is gone.
      step(1, { messages: [{ role: 'user', content: 'fresh start' }], responseText: 'ok' }),
    ];
    const c = buildConversation(steps);
    if (typeof c === 'string') throw new Error(c);
    expect(c.messages).toHaveLength(2);
    expect(c).toMatchObject({ addedToolResults: 0, unplacedToolResults: 1 });
  });
});

describe('stepToolCalls', () => {
  it('gives every call an id and string arguments, and drops calls without a name', () => {
    expect(
      stepToolCalls({
        index: 4,
        toolCalls: [{ function: { name: 'ls', arguments: { path: '.' } } }, { id: 'x', function: {} }, callA],
      }),
    ).toEqual([
      { id: 'call_4_0', type: 'function', function: { name: 'ls', arguments: '{"path":"."}' } },
      callA,
    ]);
  });
});
