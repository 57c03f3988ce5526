import { withAssistantPrefix } from '../../curation/actguide/hint.js';
import type { CallMiddleware } from '../call-context.js';

/**
 * ActGuide's `assistant_prefix` mode: the engine sees the trajectory's hint as the assistant's
 * opening (stored so: the behaviour prompt); capture rebuilds the training prompt without it.
 */
export const actGuidePrefix: CallMiddleware = (ctx, next) => {
  const { chat, session } = ctx;
  if (chat === null || session.prefixHint === null) return next(ctx);
  const prefixed = withAssistantPrefix(chat.messages, session.prefixHint);
  chat.messages = prefixed.messages;
  // The engine continues the prefix in the same turn (the paper's `continue_final_message`); later
  // calls carry it at the head of the first reply, a closed turn like any other.
  if (prefixed.continueFinal) {
    chat.continue_final_message = true;
    chat.add_generation_prompt = false;
  }
  ctx.raw = null;
  return next(ctx);
};
