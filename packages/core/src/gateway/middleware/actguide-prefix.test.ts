import { describe, expect, it } from 'vitest';
import { answered, callContext, testSession } from '../../../../../test/support/call-context.js';
import { assistantPrefix } from '../../curation/actguide/hint.js';
import { actGuidePrefix } from './actguide-prefix.js';

const guided = () =>
  testSession({ guided: true, metadata: { guidance: { hint: 'Try ls first.', mode: 'assistant_prefix' } } });

describe('actGuidePrefix', () => {
  it('puts the hint as the assistant prefix and has the engine continue it', async () => {
    const ctx = callContext({
      session: guided(),
      body: { model: 'm', messages: [{ role: 'user', content: 'list files' }] },
      raw: '{"model":"m"}',
    });
    await actGuidePrefix(ctx, answered());
    const last = ctx.chat?.messages.at(-1);
    expect(last?.role).toBe('assistant');
    expect(last?.content).toBe(assistantPrefix('Try ls first.'));
    expect(ctx.chat?.continue_final_message).toBe(true);
    expect(ctx.chat?.add_generation_prompt).toBe(false);
    // The request was rewritten: the engine gets it re-serialized, not the agent's text.
    expect(ctx.raw).toBeNull();
  });

  it('leaves a trajectory without an assistant_prefix hint as it came', async () => {
    const ctx = callContext({ body: { messages: [{ role: 'user', content: 'hi' }] }, raw: '{}' });
    await actGuidePrefix(ctx, answered());
    expect(ctx.chat?.messages).toEqual([{ role: 'user', content: 'hi' }]);
    expect(ctx.chat?.continue_final_message).toBeUndefined();
    expect(ctx.raw).toBe('{}');
  });
});
