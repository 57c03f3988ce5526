import type { Engine } from '../../engines/router.js';
import type { CaptureTokenizer } from '../../services/capture-tokenizer.js';
import type { CallContext, CallMiddleware } from '../call-context.js';
import {
  baseOfStep,
  type ContinuityBase,
  type ContinuityCounters,
  completionsBody,
  continuesOn,
  type FallbackReason,
  forwardContinued,
  planContinuation,
  sameModel,
} from '../continuity.js';
import type { Forwarding } from '../forward.js';
import { templateMessages } from '../wire/openai-chat.js';

/*
 * Token continuity (docs/gateway.md#token-continuity): a chat call that continues what the gateway
 * sent and got before goes to a vLLM (or sim) engine serving the same model as the previous ids +
 * the new turns' ids, over /v1/completions; every call's step says how it was taken.
 */

export interface TokenContinuityOptions {
  tokenizing: Pick<CaptureTokenizer, 'continuationIds'>;
  counters: ContinuityCounters;
  forwarding: Forwarding;
}

/** A call's continuation: the prompt ids and the base they extend, or why there is none. */
type Continuation =
  | { ids: number[]; base: ContinuityBase; outcome: null }
  | { ids: null; base: null; outcome: FallbackReason | null };

export function tokenContinuity({
  tokenizing,
  counters,
  forwarding,
}: TokenContinuityOptions): CallMiddleware {
  return async (ctx, next) => {
    const continuation = await continuationOf(tokenizing, ctx);
    // The ids are the base's model's: only an engine serving that model can continue them.
    const fits = (engine: Engine) =>
      continuation.ids !== null && continuesOn(engine) && sameModel(engine, continuation.base);
    if (continuation.ids !== null) {
      const { ids } = continuation;
      const inner = ctx.upstream;
      ctx.upstream = {
        path: (engine) => (fits(engine) ? '/v1/completions' : inner.path(engine)),
        body: (engine) => (fits(engine) ? continuedBody(ctx, ids, engine) : inner.body(engine)),
      };
    }
    const forward = ctx.forward;
    ctx.forward = (call) => {
      const { engine } = call.routed;
      const continued = fits(engine);
      const outcome = continuation.ids !== null ? (continued ? 'continued' : 'engine') : continuation.outcome;
      if (outcome !== null) {
        counters.count(outcome);
        ctx.metadata.token_continuity = outcome;
      }
      ctx.stored.push((step) => {
        ctx.session.continuity = baseOfStep(step, engine.model ?? null);
      });
      if (continued && call.routed.reply.status === 200) return forwardContinued(call, forwarding);
      return forward(call);
    };
    return next(ctx);
  };
}

/** The `/v1/completions` body of a continued call, naming a model the engine serves. */
function continuedBody(ctx: CallContext, ids: number[], engine: Engine): string {
  const served = ctx.router.models(engine.id);
  const asked = ctx.request.model;
  const model = typeof asked === 'string' && served.includes(asked) ? asked : (served[0] ?? null);
  return completionsBody(ctx.request, ids, model, ctx.router.maxModelLen(engine.id));
}

/**
 * The prompt as the previous ids + the new turns' (rendered by the base's model's adapter), when
 * this call continues them; else why not (null for a text completion, which has no turns).
 */
async function continuationOf(
  tokenizing: Pick<CaptureTokenizer, 'continuationIds'>,
  { session, chat }: CallContext,
): Promise<Continuation> {
  if (chat === null) return { ids: null, base: null, outcome: null };
  const plan = planContinuation(session, session.continuity, chat);
  if (typeof plan === 'string') return { ids: null, base: null, outcome: plan };
  try {
    const ids = await tokenizing.continuationIds(
      {
        messages: templateMessages(chat.messages).messages,
        tools: chat.tools ?? null,
        ...(plan.enableThinking !== undefined ? { enableThinking: plan.enableThinking } : {}),
        promptIds: plan.base.promptIds,
        responseIds: plan.base.responseIds,
      },
      plan.base.model,
    );
    return { ids, base: plan.base, outcome: null };
  } catch {
    // The model's template has no such shape (its adapter refused it, naming the model).
    return { ids: null, base: null, outcome: 'template_unknown' };
  }
}
