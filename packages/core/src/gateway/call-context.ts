import type { JsonObject, NewStep } from '../domain/index.js';
import type { Engine, EngineRouter } from '../engines/router.js';
import type { CaptureTokenizer } from '../services/capture-tokenizer.js';
import type { Answer } from './answer.js';
import { type CallKind, type CallRequest, chatRequestOf, upstreamText } from './call-request.js';
import type { CallOrigin } from './call-trace.js';
import type { Attachments, RoutedCall, StepRecorder } from './capture.js';
import type { ContinuityCounters } from './continuity.js';
import type { EpisodeServices } from './episode.js';
import type { Forwarding } from './forward.js';
import type { PolicyGate } from './policy-gate.js';
import type { Session } from './session.js';
import type { ChatCompletionRequest } from './wire/openai-chat.js';

/*
 * The gateway's call pipeline (docs/gateway.md#call-pipeline): each feature is a CallMiddleware
 * `(ctx, next)` that may rewrite the request, change how the engine is asked and how its answer is
 * forwarded, or hold the call, around a core that routes, forwards, captures and commits the step
 * before the answer ends. server/ assembles the list.
 */

/** How the routed engine is asked: the path and body for the engine the router picks. */
export interface UpstreamRequest {
  path(engine: Engine): string;
  body(engine: Engine): string;
}

/** The router as a call uses it: to send, and to name the engines' models and context lengths. */
export type CallRouter = Pick<EngineRouter, 'send' | 'models' | 'maxModelLen'>;

/** Forwards the routed engine's answer to the agent, capturing its step (forward.ts, forward-stream.ts). */
export type ForwardAnswer = (call: RoutedCall) => Answer | Promise<Answer>;

export interface CallInput {
  session: Session;
  kind: CallKind;
  /** The agent's request, checked by its protocol's wire schema. */
  request: CallRequest<CallKind>;
  /** The request's text as the agent sent it (null: none at hand, or the request was rewritten). */
  raw: string | null;
  /** Aborts when the agent goes away before its answer ended; it is the engine request's signal. */
  signal: AbortSignal;
  origin: CallOrigin | null;
}

/** One LLM call on its way through the pipeline. */
export class CallContext {
  readonly session: Session;
  readonly kind: CallKind;
  readonly request: CallRequest<CallKind>;
  /** The same request where the call is a chat completion; null for a text completion. */
  readonly chat: ChatCompletionRequest | null;
  /** A middleware that rewrites the request sets it null: the engine gets the request re-serialized. */
  raw: string | null;
  readonly signal: AbortSignal;
  readonly origin: CallOrigin | null;
  readonly router: CallRouter;
  upstream: UpstreamRequest;
  forward: ForwardAnswer;
  /** The tool results the request carries, for the step they answer (none unless a middleware finds some). */
  attachments: Attachments = noAttachments;
  /** Kept with the step's metadata. */
  readonly metadata: JsonObject = {};
  /** Told of the step once it is stored. */
  readonly stored: ((step: NewStep) => void)[] = [];
  private readonly enders: (() => void)[] = [];
  private ended = false;

  constructor(input: CallInput, router: CallRouter, forward: ForwardAnswer) {
    this.session = input.session;
    this.kind = input.kind;
    this.request = input.request;
    this.chat = chatRequestOf(input.kind, input.request);
    this.raw = input.raw;
    this.signal = input.signal;
    this.origin = input.origin;
    this.router = router;
    this.forward = forward;
    const path = input.kind === 'chat' ? '/v1/chat/completions' : '/v1/completions';
    this.upstream = { path: () => path, body: (engine) => this.upstreamBody(engine) };
  }

  /** The agent's request as the engine takes it (call-request.ts#upstreamText). */
  upstreamBody(engine: Engine): string {
    return upstreamText(this.kind, this.request, this.raw, engine, this.router.models(engine.id));
  }

  /** Runs `ender` once, when the call ends: its answer ended, or it failed. */
  onEnd(ender: () => void): void {
    this.enders.push(ender);
  }

  /** Ends the call (once; later calls do nothing). */
  readonly end = (): void => {
    if (this.ended) return;
    this.ended = true;
    for (const ender of this.enders) ender();
  };
}

const noAttachments: Attachments = () => [];

/** One feature of the call path: it may act before and after `next` runs the rest of the pipeline. */
export type CallMiddleware = (
  ctx: CallContext,
  next: (ctx: CallContext) => Promise<Answer>,
) => Promise<Answer>;

/** What the gateway lends the middleware server/ assembles. */
export interface CallServices {
  gate: PolicyGate;
  recorder: StepRecorder;
  tokenizing: CaptureTokenizer;
  forwarding: Forwarding;
  continuity: ContinuityCounters;
  episodes: EpisodeServices;
}

/** The middleware, outermost first, around `core`, as one function. */
export function composeCall(
  middleware: readonly CallMiddleware[],
  core: (ctx: CallContext) => Promise<Answer>,
): (ctx: CallContext) => Promise<Answer> {
  return middleware.reduceRight<(ctx: CallContext) => Promise<Answer>>(
    (next, step) => (ctx) => step(ctx, next),
    core,
  );
}
