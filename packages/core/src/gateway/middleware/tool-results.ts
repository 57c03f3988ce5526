import type { CallMiddleware } from '../call-context.js';
import type { StepRecorder } from '../capture.js';

/**
 * The tool results a chat request carries go with the step they answer (the session's last); a call
 * that fails before using them leaves them for its retry.
 */
export function toolResults(recorder: Pick<StepRecorder, 'toolResultsOf'>): CallMiddleware {
  return async (ctx, next) => {
    const { take, drop } = recorder.toolResultsOf(ctx.session, ctx.kind, ctx.request);
    ctx.attachments = take;
    try {
      return await next(ctx);
    } catch (error) {
      drop();
      throw error;
    }
  };
}
