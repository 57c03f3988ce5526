import type { CallMiddleware } from '../call-context.js';
import { admitCall, type EpisodeServices } from '../episode.js';

/**
 * The episode policy (gateway/episode.ts), outermost: a call past one of its episode's limits is
 * refused before anything reaches the engine, and the trajectory records which limit; the channel's
 * forced sampling replaces the agent's, max_tokens is clamped to the budget left, and the stored step
 * keeps both values (metadata `forced_sampling`). Responses and Messages calls are chat calls here.
 */
export function episodePolicy(services: EpisodeServices): CallMiddleware {
  return async (ctx, next) => {
    const { session } = ctx;
    const policy = session.episode;
    if (!policy) return next(ctx);
    session.usage ??= await services.usage(session.id);
    const usage = session.usage;
    const request = ctx.request as Record<string, unknown>;
    const rewrite = await admitCall(
      policy,
      usage,
      {
        temperature: request.temperature,
        top_p: request.top_p,
        max_tokens: request.max_completion_tokens ?? request.max_tokens,
      },
      (error) => services.ended(session.id, error),
    );
    if (Object.keys(rewrite.set).length > 0) {
      Object.assign(request, rewrite.set);
      // One name for the limit: a chat request's max_completion_tokens would override it upstream.
      if ('max_tokens' in rewrite.set) delete request.max_completion_tokens;
      ctx.raw = null;
      ctx.metadata.forced_sampling = rewrite.record;
    }
    ctx.stored.push((step) => {
      usage.turns += 1;
      usage.responseTokens += step.responseIds.length;
      usage.context = step.promptIds.length + step.responseIds.length;
    });
    return next(ctx);
  };
}
