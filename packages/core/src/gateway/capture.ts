import type { Logger } from 'pino';
import {
  ConflictError,
  type JsonObject,
  type NewStep,
  StepwiseError,
  ValidationError,
  type VersionSpans,
} from '../domain/index.js';
import type { Captured, CompletionCapture, EngineVersionSpan } from '../engines/capture.js';
import type { Engine, RoutedReply } from '../engines/router.js';
import type { DataPool } from '../pool/data-pool.js';
import type { CaptureTokenizer } from '../services/capture-tokenizer.js';
import type { ToolResultAttachment } from '../store/store.js';
import { type CallKind, type CallRequest, chatRequestOf } from './call-request.js';
import { type CallOrigin, type CallTracer, epochNow } from './call-trace.js';
import { rememberCalls } from './echoed-calls.js';
import type { Session } from './session.js';
import { toolResultsFor } from './tool-results.js';
import { templateMessages } from './wire/openai-chat.js';

/*
 * Capture: a finished generation becomes the session's next step, committed through the pool's group
 * commit before the agent's answer ends; a call that failed is recorded as such; the tool results a
 * request carries go with the step they answer.
 */

/** Tool results of a request for the step they answer. */
export type Attachments = () => ToolResultAttachment[];

/** A call's tool results: `take` them for the step they answer, or `drop` them unused. */
export interface PendingResults {
  take: Attachments;
  /** The call ended before it could use them: a retry of the same messages brings them again. */
  drop(): void;
}

/** A finished generation that could not become a stored step: the agent gets an error, not the answer. */
class CaptureFailed extends StepwiseError {
  constructor(message: string, status = 500) {
    super(message, status, 'capture_failed', undefined, true);
  }
}

/** Request fields kept with each step (what shaped the sampling), beside messages and tools. */
const SAMPLING_FIELDS = [
  'model',
  'temperature',
  'top_p',
  'top_k',
  'min_p',
  'max_tokens',
  'max_completion_tokens',
  'seed',
  'stop',
  'presence_penalty',
  'frequency_penalty',
  'repetition_penalty',
  'tool_choice',
  'parallel_tool_calls',
  'response_format',
  'chat_template_kwargs',
  // How the engine closed the prompt: a new assistant turn (the default) or the last message continued.
  'add_generation_prompt',
  'continue_final_message',
] as const;

/**
 * The policy version of each run of a step's response ids, from the spans its engine reported. A
 * run's label counts when it names a version after the one before it (the call's own, for the first
 * run) and not past the pool's version now: a call that waited at a paused engine ran wholly on the
 * weights a switch loaded. A label outside that (an engine's own numbering, weights pushed without
 * a switch) leaves the run to the version before it. Null spans when one version made them all.
 */
export function stepVersions(
  reported: EngineVersionSpan[] | null,
  callVersion: number,
  nowVersion: number,
): { first: number; spans: VersionSpans | null } | null {
  if (!reported || reported.length === 0) return null;
  const spans: VersionSpans = [];
  let previous = callVersion;
  for (const [raw, count] of reported) {
    const n =
      typeof raw === 'number' ? raw : typeof raw === 'string' && /^\d{1,10}$/.test(raw) ? Number(raw) : NaN;
    const version = Number.isSafeInteger(n) && n > previous && n <= nowVersion ? n : previous;
    const last = spans[spans.length - 1];
    if (last && last[0] === version) last[1] += count;
    else spans.push([version, count]);
    previous = version;
  }
  return { first: spans[0]![0], spans: spans.length > 1 ? spans : null };
}

/** One LLM call on its way from the engine to the agent. */
export interface RoutedCall {
  session: Session;
  kind: CallKind;
  request: CallRequest<CallKind>;
  attachments: Attachments;
  version: number;
  started: number;
  /** The agent's request as it arrived (null: a call not made over HTTP). */
  origin: CallOrigin | null;
  routed: RoutedReply;
  clientGone(): boolean;
  finish(): void;
  /** Kept with the step's metadata (how token continuity took the call). */
  metadata?: JsonObject;
  /** Told of the step once it is stored (token continuity keeps it as the next call's base). */
  onStored?(step: NewStep): void;
}

export interface StepRecorderOptions {
  pool: DataPool;
  tokenizing: CaptureTokenizer;
  logger?: Pick<Logger, 'warn' | 'error'>;
  tracer?: CallTracer;
  /** The session ran ahead of the store (a write failed): the next call reloads it. */
  forget(session: Session): void;
}

/** Writes captured steps and failed calls of the gateway's sessions. */
export class StepRecorder {
  /** Steps whose write failed (logged; the agent got an error instead of the answer). */
  lostSteps = 0;

  constructor(private readonly options: StepRecorderOptions) {}

  /**
   * The tool results this request carries for the step they answer: the session's last step. Every
   * step is stored, and becomes the last, before its answer goes out, so a request that answers it
   * always finds it here.
   */
  toolResultsOf(session: Session, kind: CallKind, request: CallRequest<CallKind>): PendingResults {
    let results: ToolResultAttachment[];
    try {
      results = this.pendingToolResults(session, kind, request);
    } catch (error) {
      // Never fatal to the call: its step is kept without them.
      results = [];
      this.options.logger?.error({ err: error, trajectory: session.id }, 'tool results could not be matched');
    }
    let taken = false;
    return {
      take: () => {
        taken = true;
        return results;
      },
      drop: () => {
        // Matched but never written: the step they answer takes them from the retry.
        const last = session.last;
        if (!taken && last !== null && results.some((r) => r.index === last.index)) last.answered = false;
      },
    };
  }

  private pendingToolResults(
    session: Session,
    kind: CallKind,
    request: CallRequest<CallKind>,
  ): ToolResultAttachment[] {
    const last = session.last;
    const chat = chatRequestOf(kind, request);
    if (!chat || !last || last.answered || last.calls.length === 0) return [];
    const results = toolResultsFor(chat.messages, last.calls);
    if (results.length === 0) return [];
    last.answered = true;
    return [{ trajectoryId: session.id, index: last.index, results }];
  }

  /**
   * Turns a finished generation into the session's next step and commits it; the agent's answer
   * waits for this. A step that cannot be stored is a CaptureFailed (or the ConflictError of a
   * trajectory closed meanwhile), never a silent loss.
   */
  async capture(
    ctx: RoutedCall,
    captured: Captured,
    firstTokenAt: number | null,
  ): Promise<Pick<NewStep, 'responseIds' | 'tokenSource'>> {
    const endedAt = performance.now();
    const { session, routed } = ctx;
    const chat = chatRequestOf(ctx.kind, ctx.request);
    // Before this step becomes the session's last: the results answer the step before it.
    const toolResults = ctx.attachments();
    if (captured.malformed)
      throw this.refuse(
        ctx,
        toolResults,
        `engine ${routed.engine.id} sent a malformed answer: ${captured.malformed}`,
      );
    const ids = await this.idsOf(ctx, captured, toolResults);
    const metadata = stepMetadata(ctx, captured, ids);
    const trainingPromptIds = await this.trainingPromptOf(ctx, ids, metadata);
    const index = session.nextIndex++;
    const versions =
      ids.source === 'engine'
        ? stepVersions(captured.versionSpans, ctx.version, await this.options.pool.policyVersion())
        : null;
    const step: NewStep = {
      trajectoryId: session.id,
      groupId: session.groupId,
      index,
      promptIds: ids.promptIds,
      responseIds: ids.responseIds,
      responseLogprobs: ids.logprobs,
      versionSpans: versions?.spans ?? null,
      reward: null,
      policyVersion: versions?.first ?? ctx.version,
      isLast: false,
      metadata,
      tokenSource: ids.source,
      finishReason: captured.finishReason,
      messages: chat ? chat.messages : null,
      tools: chat?.tools ?? null,
      responseText: captured.content,
      toolCalls: captured.toolCalls.length > 0 ? (captured.toolCalls as unknown as JsonObject[]) : null,
      toolResults: null,
      latencyMs: endedAt - ctx.started,
      ttftMs: firstTokenAt !== null ? firstTokenAt - ctx.started : null,
      engineId: routed.engine.id,
      trainingPromptIds,
      routedExperts: null,
      multiModalData: null,
    };
    session.last = {
      index,
      calls: captured.toolCalls.map((c) => ({ id: c.id, name: c.function.name })),
      answered: false,
    };
    rememberCalls(session.generatedCalls, captured.toolCalls);
    await this.commit(ctx, step, toolResults);
    ctx.onStored?.(step);
    this.traced(ctx, step, captured.id ?? null);
    return step;
  }

  /** An engine answer no step can be made of: recorded as the engine's failure, answered 502. */
  private refuse(ctx: RoutedCall, toolResults: ToolResultAttachment[], message: string): CaptureFailed {
    this.record(ctx.session, () => toolResults, {
      kind: 'upstream_error',
      engineId: ctx.routed.engine.id,
      status: 502,
      message,
      partial: null,
    });
    return new CaptureFailed(message, 502);
  }

  /** The step's ids: the engine's, else rebuilt by the engine's model's tokenizer (no logprobs then). */
  private async idsOf(
    ctx: RoutedCall,
    captured: Captured,
    toolResults: ToolResultAttachment[],
  ): Promise<StepIds> {
    const { promptIds, responseIds } = captured;
    if (promptIds && responseIds)
      return { promptIds, responseIds, logprobs: captured.logprobs, source: 'engine' };
    const { engine } = ctx.routed;
    const chat = chatRequestOf(ctx.kind, ctx.request);
    try {
      const rebuilt = chat
        ? await this.options.tokenizing.retokenizeChat(
            {
              messages: templateMessages(chat.messages).messages,
              tools: chat.tools ?? null,
              enableThinking: thinkingOf(chat.chat_template_kwargs),
              continueFinalMessage: chat.continue_final_message === true,
            },
            captured,
            engine.model,
          )
        : await this.options.tokenizing.retokenizeText(
            promptText(ctx.request.prompt),
            captured,
            engine.model,
          );
      return { ...rebuilt, logprobs: null, source: 'retokenized' };
    } catch (error) {
      throw this.refuse(
        ctx,
        toolResults,
        `engine ${engine.id} answered without token ids, and they could not be rebuilt (${(error as Error).message})`,
      );
    }
  }

  /** ActGuide: the prompt a guided step is trained on, rebuilt without its hint (null: no hint). */
  private async trainingPromptOf(
    ctx: RoutedCall,
    ids: StepIds,
    metadata: JsonObject,
  ): Promise<number[] | null> {
    const { session } = ctx;
    const chat = chatRequestOf(ctx.kind, ctx.request);
    if (session.hint === null || !chat) return null;
    const view = await this.options.tokenizing.trainingPromptOf(
      {
        trajectoryId: session.id,
        index: session.nextIndex,
        promptIds: ids.promptIds,
        responseIds: ids.responseIds,
        messages: chat.messages,
        tools: chat.tools ?? null,
        metadata,
      },
      session.hint,
      session.hintMode,
      ctx.routed.engine.model,
    );
    if (view.problem !== null) metadata.training_prompt_unavailable = view.problem;
    return view.ids;
  }

  /** Writes the step; one that is not stored is recorded and raised as a CaptureFailed (503). */
  private async commit(ctx: RoutedCall, step: NewStep, toolResults: ToolResultAttachment[]): Promise<void> {
    const { session } = ctx;
    try {
      await this.write(session, [step], toolResults);
    } catch (error) {
      if (error instanceof ConflictError) throw error;
      const message = `the step of this call could not be stored (${(error as Error).message}); its answer is withheld so that no answered call goes unrecorded: send the call again`;
      void this.options.pool
        .recordCallFailure({
          channel: session.channel,
          trajectoryId: session.id,
          groupId: session.groupId,
          kind: 'capture_failed',
          engineId: ctx.routed.engine.id,
          status: 503,
          message,
          partial: null,
        })
        .catch((err: unknown) =>
          this.options.logger?.warn({ err }, 'a failed capture could not be recorded'),
        );
      throw new CaptureFailed(message, 503);
    }
  }

  /** Tells the tracer of a stored step; its failure is logged, never the call's. */
  private traced(ctx: RoutedCall, step: NewStep, responseId: string | null): void {
    const { tracer } = this.options;
    if (!tracer) return;
    const storedAt = epochNow();
    // A call not made over HTTP has no arrival time of its own: its span starts when it was sent on.
    const origin = ctx.origin ?? { receivedAt: storedAt - (step.latencyMs ?? 0), traceparent: null };
    try {
      tracer.stepStored({
        step,
        channel: ctx.session.channel,
        kind: ctx.kind,
        request: ctx.request,
        origin,
        storedAt,
        engineKind: ctx.routed.engine.kind,
        responseId,
      });
    } catch (error) {
      this.options.logger?.warn({ err: error }, 'a stored step could not be traced');
    }
  }

  /** Commits steps and tool results through the pool's group commit; rejects when they are not stored. */
  private async write(
    session: Session,
    steps: NewStep[],
    toolResults: ToolResultAttachment[],
  ): Promise<void> {
    if (steps.length === 0 && toolResults.length === 0) return;
    const write = this.options.pool.submitSteps(steps, { channel: session.channel, toolResults });
    // Completing the trajectory waits for it, whatever its outcome.
    const tracked: Promise<void> = write
      .then(
        () => {},
        () => {},
      )
      .finally(() => session.writes.delete(tracked));
    session.writes.add(tracked);
    try {
      await write;
    } catch (error) {
      this.lostSteps += steps.length;
      if (error instanceof ConflictError) session.closed ??= 'closed';
      // The cache ran ahead of the store: the next call starts again from what is stored.
      else this.options.forget(session);
      this.options.logger?.error(
        { err: error, trajectory: session.id, steps: steps.map((s) => s.index) },
        'a captured step could not be stored',
      );
      throw error;
    }
  }

  record(
    session: Session,
    attachments: Attachments,
    failure: {
      kind: 'aborted' | 'upstream_error';
      engineId: string | null;
      status: number | null;
      message: string;
      partial: { promptTokens: number; responseIds: number[]; responseText: string } | null;
    },
  ): Promise<void> {
    // Best effort: the call failed already, its tool results go with the next call when these do not.
    const results = this.write(session, [], attachments()).catch(() => {});
    const recorded = this.options.pool
      .recordCallFailure({
        channel: session.channel,
        trajectoryId: session.id,
        groupId: session.groupId,
        ...failure,
      })
      .catch((err: unknown) => this.options.logger?.warn({ err }, 'a failed call could not be recorded'));
    return Promise.all([results, recorded]).then(() => {});
  }

  fail(
    session: Session,
    attachments: Attachments,
    error: unknown,
    engine: Engine | null,
    aborted: boolean,
  ): void {
    this.record(session, attachments, {
      kind: aborted ? 'aborted' : 'upstream_error',
      engineId: engine?.id ?? null,
      status: aborted ? null : error instanceof StepwiseError ? error.status : 502,
      message: aborted ? 'the agent went away before the engine answered' : (error as Error).message,
      partial: null,
    });
  }
}

/** A step's token ids and where they came from. */
interface StepIds {
  promptIds: number[];
  responseIds: number[];
  logprobs: Captured['logprobs'];
  source: NewStep['tokenSource'];
}

/** What a step keeps of its call beside its ids: sampling fields, model, reasoning, how it was taken. */
function stepMetadata(ctx: RoutedCall, captured: Captured, ids: StepIds): JsonObject {
  const { request } = ctx;
  const metadata: JsonObject = {};
  for (const field of SAMPLING_FIELDS) {
    const value = request[field];
    // A value of the agent's parsed JSON body.
    if (value !== undefined) metadata[field] = value as JsonObject[string];
  }
  if (captured.model) metadata.served_model = captured.model;
  // Which model's tokens these are, for every feature that reads them later (text/model-ref.ts).
  const adapter = ctx.routed.engine.adapter;
  if (adapter) {
    metadata.model_family = adapter.family;
    metadata.model_name = adapter.model;
  }
  if (captured.reasoning !== null) metadata.reasoning = captured.reasoning;
  if (captured.idsIncomplete) metadata.ids_incomplete = true;
  if (ctx.metadata) Object.assign(metadata, ctx.metadata);
  if (ids.source === 'retokenized') {
    // How far the rebuilt ids are from what the engine counted: the drift of retokenizing.
    const drift = retokenizeDrift(ids.promptIds, ids.responseIds, captured.usage);
    if (drift) metadata.retokenize_drift = drift;
  }
  return metadata;
}

export function partialOf(
  capture: CompletionCapture,
): { promptTokens: number; responseIds: number[]; responseText: string } | null {
  if (!capture.generated) return null;
  const r = capture.result();
  return {
    promptTokens: r.promptIds?.length ?? 0,
    responseIds: r.responseIds ?? [],
    responseText: r.content,
  };
}

/** `chat_template_kwargs.enable_thinking` when it is a switch. */
function thinkingOf(kwargs: Record<string, unknown> | null | undefined): boolean | undefined {
  const value = kwargs?.enable_thinking;
  return typeof value === 'boolean' ? value : undefined;
}

function promptText(prompt: unknown): string {
  if (typeof prompt === 'string') return prompt;
  if (Array.isArray(prompt) && typeof prompt[0] === 'string') return prompt[0];
  throw new ValidationError('prompt: a text prompt is needed to rebuild ids', 'prompt');
}

/**
 * Rebuilt ids minus the engine's own counts (`usage`), for the prompt and the completion; null when
 * the engine sent no usage. Non-zero: the template or tokenizer here is not what the engine used.
 */
export function retokenizeDrift(
  promptIds: readonly number[],
  responseIds: readonly number[],
  usage: Captured['usage'],
): { prompt_tokens: number; completion_tokens: number } | null {
  if (typeof usage?.prompt_tokens !== 'number' || typeof usage.completion_tokens !== 'number') return null;
  return {
    prompt_tokens: promptIds.length - usage.prompt_tokens,
    completion_tokens: responseIds.length - usage.completion_tokens,
  };
}
