import type { JsonObject } from '../../packages/core/src/domain/index.js';
import type { Engine } from '../../packages/core/src/engines/router.js';
import type { Answer } from '../../packages/core/src/gateway/answer.js';
import {
  CallContext,
  type CallRouter,
  type ForwardAnswer,
} from '../../packages/core/src/gateway/call-context.js';
import { type CallKind, checkCallRequest } from '../../packages/core/src/gateway/call-request.js';
import { newSession, type Session } from '../../packages/core/src/gateway/session.js';

/** A call's context for a middleware's unit test: no engine is reached unless `router` says so. */
export function callContext(options: {
  kind?: CallKind;
  body: unknown;
  raw?: string | null;
  session?: Session;
  router?: Partial<CallRouter>;
  forward?: ForwardAnswer;
  signal?: AbortSignal;
}): CallContext {
  const kind = options.kind ?? 'chat';
  const router: CallRouter = {
    send: () => Promise.reject(new Error('no engine in this test')),
    models: () => ['m'],
    maxModelLen: () => null,
    ...options.router,
  };
  return new CallContext(
    {
      session: options.session ?? testSession(),
      kind,
      request: checkCallRequest(kind, options.body),
      raw: options.raw ?? null,
      signal: options.signal ?? new AbortController().signal,
      origin: null,
    },
    router,
    options.forward ?? (() => answer('forwarded')),
  );
}

/** A session of an open trajectory; `metadata` as init_trajectory stores it. */
export function testSession(
  options: { guided?: boolean; metadata?: JsonObject; rawToolCalls?: boolean } = {},
): Session {
  return newSession(
    {
      id: 'traj-1',
      groupId: 'group-1',
      channel: 'train',
      guided: options.guided ?? false,
      probe: false,
      metadata: options.metadata ?? {},
    },
    0,
    null,
    options.rawToolCalls ?? false,
  );
}

export const answer = (body: string, status = 200): Answer => ({ status, headers: {}, body });

/** The rest of the pipeline: answers at once, having seen the context. */
export const answered =
  (seen: CallContext[] = []) =>
  async (ctx: CallContext): Promise<Answer> => {
    seen.push(ctx);
    return answer('answered');
  };

export const simEngine = (over: Partial<Engine> = {}): Engine => ({
  id: 'e1',
  kind: 'sim',
  transport: { send: () => Promise.reject(new Error('not used')), close: async () => {} },
  ...over,
});
