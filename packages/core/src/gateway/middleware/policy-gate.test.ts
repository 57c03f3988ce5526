import { describe, expect, it } from 'vitest';
import { answer, callContext, testSession } from '../../../../../test/support/call-context.js';
import { PolicyGate } from '../policy-gate.js';
import { settle } from '../session.js';
import { policyGate } from './policy-gate.js';

const body = { messages: [{ role: 'user', content: 'x' }] };

describe('policyGate', () => {
  it('counts the call in flight until it ends, not when next returns (a stream ends later)', async () => {
    const gate = new PolicyGate();
    const session = testSession();
    const ctx = callContext({ session, body });
    await policyGate(gate)(ctx, async () => {
      expect(gate.running).toBe(1);
      expect(session.inFlight).toBe(1);
      return answer('streaming');
    });
    expect(gate.running).toBe(1);
    expect(session.writes.size).toBe(1);
    ctx.end();
    ctx.end(); // once only
    expect(gate.running).toBe(0);
    expect(session.inFlight).toBe(0);
    await settle(session);
    expect(session.writes.size).toBe(0);
  });

  it('releases the call when the rest of the pipeline fails', async () => {
    const gate = new PolicyGate();
    const session = testSession();
    const ctx = callContext({ session, body });
    await expect(
      policyGate(gate)(ctx, async () => {
        throw new Error('engine gone');
      }),
    ).rejects.toThrow('engine gone');
    expect(gate.running).toBe(0);
    expect(session.inFlight).toBe(0);
    await settle(session);
  });

  it('holds a new call while a drain is on', async () => {
    const gate = new PolicyGate();
    let switched = false;
    const running = callContext({ body });
    await policyGate(gate)(running, async () => answer('a'));
    const drain = gate.drain(async () => {
      switched = true;
    }, 1000);
    const held = policyGate(gate)(callContext({ body }), async () => {
      expect(switched).toBe(true);
      return answer('b');
    });
    running.end();
    await drain;
    await expect(held).resolves.toMatchObject({ body: 'b' });
  });
});
