import type { NewStep } from '../domain/index.js';
import type { RoutedReply } from '../engines/router.js';
import type { DataPool } from '../pool/data-pool.js';
import type { Answer } from './answer.js';
import type { CallContext, ForwardAnswer } from './call-context.js';
import type { RoutedCall, StepRecorder } from './capture.js';
import { type Forwarding, forwardError, forwardWhole } from './forward.js';
import { forwardStream } from './forward-stream.js';
import type { SpliceDeps } from './partial/continuation.js';
import { splicedStream } from './partial/stream.js';
import { splicedWhole } from './partial/whole.js';

/*
 * The core of every call, inside its middleware: route to an engine, forward its answer, capture
 * the step and commit it before the answer ends (forward.ts, forward-stream.ts, capture.ts).
 */

export interface CallCoreOptions {
  pool: Pick<DataPool, 'policyVersion'>;
  recorder: Pick<StepRecorder, 'fail'>;
  /** Continues answers a weight switch cut (partial rollouts, partial/); absent: they pass as cut. */
  splice?: SpliceDeps;
}

/** Routes the call as its middleware left it, and forwards the engine's answer with `ctx.forward`. */
export function callCore({ pool, recorder, splice }: CallCoreOptions): (ctx: CallContext) => Promise<Answer> {
  return async (ctx) => {
    const version = await pool.policyVersion();
    const started = performance.now();
    let routed: RoutedReply;
    try {
      routed = await ctx.router.send(
        ctx.session.id,
        'POST',
        (engine) => ctx.upstream.path(engine),
        null,
        ctx.signal,
        (engine) => ctx.upstream.body(engine),
      );
    } catch (error) {
      recorder.fail(ctx.session, ctx.attachments, error, null, ctx.signal.aborted);
      throw error;
    }
    if (splice && routed.reply.status === 200 && routed.engine.kind !== 'openai') {
      const reply = (ctx.request.stream === true ? splicedStream : splicedWhole)(
        ctx,
        routed,
        version,
        splice,
      );
      routed = { ...routed, reply };
    }
    return await ctx.forward(routedCall(ctx, routed, version, started));
  };
}

/** The call as its answer's forwarding and capture see it. */
function routedCall(ctx: CallContext, routed: RoutedReply, version: number, started: number): RoutedCall {
  return {
    session: ctx.session,
    kind: ctx.kind,
    request: ctx.request,
    attachments: ctx.attachments,
    version,
    started,
    origin: ctx.origin,
    routed,
    clientGone: () => ctx.signal.aborted,
    finish: ctx.end,
    metadata: ctx.metadata,
    // Read when the step is stored: a middleware may ask to be told as late as its forwarding.
    onStored: (step: NewStep) => {
      for (const told of ctx.stored) told(step);
    },
  };
}

/** The answer forwarded as the engine gave it: an error, a stream, or a whole completion. */
export const forwardAnswer =
  (f: Forwarding): ForwardAnswer =>
  (call) => {
    if (call.routed.reply.status !== 200) return forwardError(call, f);
    if (call.request.stream === true) return forwardStream(call, f);
    return forwardWhole(call, f);
  };
