import type { CallMiddleware } from '../call-context.js';
import type { PolicyGate } from '../policy-gate.js';

/**
 * Counts the call in flight, for a policy-version drain (the gate) and for completing its trajectory
 * (the session's writes): it ends once its answer ended with its step queued or its failure
 * recorded (an agent may act on a stream's finish_reason before the engine's [DONE]).
 */
export function policyGate(gate: PolicyGate): CallMiddleware {
  return async (ctx, next) => {
    const { session } = ctx;
    await gate.enter();
    session.inFlight++;
    let ended: () => void = () => {};
    const inFlight: Promise<void> = new Promise<void>((resolve) => {
      ended = resolve;
    }).finally(() => session.writes.delete(inFlight));
    session.writes.add(inFlight);
    ctx.onEnd(() => {
      session.inFlight--;
      // Idle time counts from the end of the last call (online sessions close on it).
      session.usedAt = Date.now();
      gate.exit();
      ended();
    });
    try {
      return await next(ctx);
    } catch (error) {
      ctx.end();
      throw error;
    }
  };
}
