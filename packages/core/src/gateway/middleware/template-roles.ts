import type { CallMiddleware } from '../call-context.js';
import { templateMessages } from '../wire/openai-chat.js';

/**
 * Roles and legacy fields no chat template reads (`developer`, `function`, ...) are rewritten into
 * ones it does, and stored so (wire/openai-chat.ts#templateMessages).
 */
export const templateRoles: CallMiddleware = (ctx, next) => {
  const { chat } = ctx;
  if (chat !== null) {
    const rendered = templateMessages(chat.messages);
    if (rendered.rewritten) {
      chat.messages = [...rendered.messages];
      ctx.raw = null;
    }
  }
  return next(ctx);
};
