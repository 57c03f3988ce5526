import { describe, expect, it } from 'vitest';
import { answered, callContext } from '../../../../../test/support/call-context.js';
import { templateRoles } from './template-roles.js';

describe('templateRoles', () => {
  it('rewrites a role no chat template reads and drops the agent text', async () => {
    const ctx = callContext({
      body: {
        messages: [
          { role: 'developer', content: 'be brief' },
          { role: 'user', content: 'hi' },
        ],
      },
      raw: '{}',
    });
    await templateRoles(ctx, answered());
    expect(ctx.chat?.messages[0]?.role).toBe('system');
    expect(ctx.raw).toBeNull();
  });

  it('keeps a request every template reads byte for byte', async () => {
    const ctx = callContext({ body: { messages: [{ role: 'user', content: 'hi' }] }, raw: '{}' });
    await templateRoles(ctx, answered());
    expect(ctx.raw).toBe('{}');
  });

  it('passes a text completion through', async () => {
    const ctx = callContext({ kind: 'text', body: { prompt: 'hi' }, raw: '{}' });
    const seen = [ctx].slice(0, 0);
    await templateRoles(ctx, answered(seen));
    expect(seen).toEqual([ctx]);
    expect(ctx.raw).toBe('{}');
  });
});
