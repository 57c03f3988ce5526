import type { CallMiddleware } from '../call-context.js';
import { restoreEchoedCalls } from '../echoed-calls.js';

/** A call of ours echoed with its tool's defaults filled in goes back as generated (same tokens). */
export const echoedCalls: CallMiddleware = (ctx, next) => {
  if (ctx.chat !== null && restoreEchoedCalls(ctx.chat, ctx.session.generatedCalls)) ctx.raw = null;
  return next(ctx);
};
