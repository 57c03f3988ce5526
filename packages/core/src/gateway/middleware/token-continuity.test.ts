import { describe, expect, it } from 'vitest';
import { answer, callContext, simEngine, testSession } from '../../../../../test/support/call-context.js';
import type { NewStep } from '../../domain/index.js';
import type { RoutedCall } from '../capture.js';
import { ContinuityCounters } from '../continuity.js';
import type { Forwarding } from '../forward.js';
import { tokenContinuity } from './token-continuity.js';

const forwarding = {} as Forwarding;
const first = { model: 'm', messages: [{ role: 'user', content: 'hi' }] };

/** Runs the middleware, routes to `engine`, forwards (not continued: the inner forward answers). */
async function run(session = testSession(), body: unknown = first, engine = simEngine()) {
  const counters = new ContinuityCounters();
  const ctx = callContext({ session, body, forward: async () => answer('chat path') });
  const tokenizing = { continuationIds: async () => [1, 2, 3] };
  let path = '';
  const out = await tokenContinuity({ tokenizing, counters, forwarding })(ctx, async (c) => {
    path = c.upstream.path(engine);
    const routed = { routed: { engine, reply: { status: 200 } } } as RoutedCall;
    return c.forward(routed);
  });
  return { ctx, counters, out, path };
}

describe('tokenContinuity', () => {
  it('takes a first call by the chat path, counting why and keeping it with the step', async () => {
    const { ctx, counters, out, path } = await run();
    expect(path).toBe('/v1/chat/completions');
    expect(out.body).toBe('chat path');
    expect(ctx.metadata).toEqual({ token_continuity: 'first_step' });
    expect(counters.toJSON()).toEqual({ continued: 0, fallback: { first_step: 1 } });
  });

  it('keeps the stored step as the next call’s base', async () => {
    const session = testSession();
    const { ctx } = await run(session);
    const step = {
      promptIds: [1],
      responseIds: [2],
      tokenSource: 'engine',
      messages: first.messages,
      tools: null,
      responseText: 'hello',
      toolCalls: null,
      metadata: { served_model: 'qwen3' },
    } as unknown as NewStep;
    for (const told of ctx.stored) told(step);
    expect(session.continuity).toMatchObject({ promptIds: [1], responseIds: [2], content: 'hello' });
  });

  it('sends a call that continues the base to /v1/completions as ids', async () => {
    const session = testSession();
    session.continuity = {
      messages: first.messages,
      tools: null,
      templateKwargs: null,
      content: 'hello',
      toolCalls: [],
      promptIds: [1],
      responseIds: [2],
      servedModel: 'qwen3',
      model: null,
    };
    const next = {
      model: 'm',
      messages: [
        ...first.messages,
        { role: 'assistant', content: 'hello' },
        { role: 'user', content: 'more' },
      ],
    };
    const counters = new ContinuityCounters();
    const ctx = callContext({ session, body: next });
    const tokenizing = { continuationIds: async () => [1, 2, 3] };
    const engine = simEngine();
    await tokenContinuity({ tokenizing, counters, forwarding })(ctx, async (c) => {
      expect(c.upstream.path(engine)).toBe('/v1/completions');
      expect(JSON.parse(c.upstream.body(engine))).toMatchObject({ prompt: [1, 2, 3], model: 'm' });
      // An engine that cannot continue ids takes the chat path.
      expect(c.upstream.path(simEngine({ kind: 'openai' }))).toBe('/v1/chat/completions');
      return answer('not forwarded');
    });
  });
});
