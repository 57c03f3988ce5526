import { StepwiseError } from '../domain/index.js';
import { CompletionCapture } from '../engines/capture.js';
import { UpstreamError } from '../engines/upstream.js';
import { SseDecoder } from '../text/index.js';
import type { Answer, StreamSink, StreamSource } from './answer.js';
import { isObject } from './call-request.js';
import { partialOf, type RoutedCall } from './capture.js';
import type { Forwarding } from './forward.js';
import { openaiErrorBody } from './openai-errors.js';

/*
 * A streamed answer: the engine's events go to the agent as they come, except the one that finishes
 * the choice and what follows it, which wait for the step's commit; the agent going away stops the
 * generation and keeps what was made as an aborted call.
 */

const SSE_HEADERS = {
  'content-type': 'text/event-stream; charset=utf-8',
  'cache-control': 'no-cache',
  'x-accel-buffering': 'no',
};
/** An event that finishes its choice: it and what follows wait for the step's commit. */
const FINISHED = /"finish_reason":\s*"/;
/** Streamed events held for the capture at most, before they are read (see forwardStream). */
const UNREAD_EVENTS = 256;

export function forwardStream(ctx: RoutedCall, f: Forwarding): Answer {
  const stream = new ForwardedStream(ctx, f);
  const body: StreamSource = {
    pull: (controller) => stream.pull(controller),
    cancel: async () => stream.cancel(),
  };
  return { status: 200, headers: SSE_HEADERS, body };
}

/** One streamed answer: the engine's events read, forwarded, held and captured. */
class ForwardedStream {
  private readonly iterator: AsyncIterator<Uint8Array>;
  private readonly decoder = new SseDecoder();
  private readonly capture = new CompletionCapture();
  private readonly agentWantsUsage: boolean;
  private done = false;
  private sawDone = false;
  private garbage: string | null = null;
  /** From the chunk that ends the choice (its finish_reason) on: sent once the step is committed. */
  private held = '';
  // Events are forwarded as they come and read into the capture later (at [DONE], or every
  // UNREAD_EVENTS events), so parsing them never holds up the bytes the agent waits for.
  private unread: string[] = [];
  private unreadAt: number[] = [];

  constructor(
    private readonly ctx: RoutedCall,
    private readonly f: Forwarding,
  ) {
    this.iterator = ctx.routed.reply.body[Symbol.asyncIterator]();
    const options = ctx.request.stream_options;
    this.agentWantsUsage = isObject(options) && options.include_usage === true;
  }

  private get engineId(): string {
    return this.ctx.routed.engine.id;
  }

  /** Ends the answer (once). */
  private stop(): boolean {
    if (this.done) return false;
    this.done = true;
    return true;
  }

  private failed(): string {
    const message = this.garbage ?? `engine ${this.engineId} ended the stream without [DONE]`;
    this.f.recorder.record(this.ctx.session, this.ctx.attachments, {
      kind: 'upstream_error',
      engineId: this.engineId,
      status: 502,
      message,
      partial: partialOf(this.capture),
    });
    return message;
  }

  /** Reads one event into the capture; null when it is not JSON. */
  private read(data: string, at: number): unknown {
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      this.garbage ??= `engine ${this.engineId} streamed an event that is not JSON`;
      return null;
    }
    if (isObject(chunk) && isObject(chunk.error)) {
      this.garbage ??= `engine ${this.engineId} failed mid-stream: ${String((chunk.error as { message?: unknown }).message)}`;
    }
    this.capture.addChunk(chunk, at);
    return chunk;
  }

  private catchUp(): void {
    const { unread, unreadAt } = this;
    for (let i = 0; i < unread.length; i++) this.read(unread[i]!, unreadAt[i]!);
    this.unread = [];
    this.unreadAt = [];
  }

  /**
   * Returns the bytes to forward now: the engine's events in its framing, up to the one that
   * finishes the choice. That one and the rest up to [DONE] are held until the step is committed.
   */
  private take(events: { data: string }[], at: number): string {
    let out = '';
    for (const event of events) {
      if (event.data === '[DONE]') {
        this.sawDone = true;
        break; // nothing follows [DONE] in the protocol
      }
      if (!this.agentWantsUsage && event.data.includes('"usage"')) {
        // The gateway asked for the usage chunk; an agent that did not gets none.
        this.catchUp();
        if (usageOnly(this.read(event.data, at))) continue;
      } else {
        this.unread.push(event.data);
        this.unreadAt.push(at);
        if (this.unread.length >= UNREAD_EVENTS) this.catchUp();
      }
      if (this.held === '' && !FINISHED.test(event.data)) out += `data: ${event.data}\n\n`;
      else this.held += `data: ${event.data}\n\n`;
    }
    return out;
  }

  async pull(controller: StreamSink): Promise<void> {
    try {
      for (;;) {
        const next = await this.iterator.next();
        if (next.done) break;
        const text = this.take(this.decoder.push(next.value), performance.now());
        if (this.sawDone) return await this.answer(controller, text);
        // A chunk that completed no event yields nothing yet: read on rather than stall the pull.
        if (text !== '') return forward(controller, text);
      }
      const text = this.take(this.decoder.end(), performance.now());
      if (this.sawDone) return await this.answer(controller, text);
      forward(controller, text + this.held);
      if (!this.stop()) return;
      this.ctx.routed.done();
      this.catchUp();
      controller.enqueue(sseError(502, this.failed()));
      this.ctx.finish();
      controller.close();
    } catch (error) {
      this.brokeOff(controller, error);
    }
  }

  /**
   * The engine sent [DONE]: the agent's answer ends here, without waiting for the engine's body to
   * end (the step is captured at once; the rest of that body is read in the background, so its
   * connection can serve the next call).
   */
  private async answer(controller: StreamSink, text: string): Promise<void> {
    forward(controller, text);
    if (!this.stop()) return;
    void this.drainRest();
    try {
      this.catchUp();
      if (this.garbage !== null) {
        forward(controller, this.held);
        controller.enqueue(sseError(502, this.failed()));
        return;
      }
      try {
        await this.f.recorder.capture(this.ctx, this.capture.result(), this.capture.firstTokenAt);
      } catch (error) {
        const known = error instanceof StepwiseError;
        controller.enqueue(
          sseError(known ? error.status : 500, known ? error.message : 'internal error', 'capture_failed'),
        );
        return;
      }
      controller.enqueue(`${this.held}data: [DONE]\n\n`);
    } finally {
      this.ctx.finish();
      controller.close();
    }
  }

  private async drainRest(): Promise<void> {
    const { routed } = this.ctx;
    const discard = () => routed.reply.discard();
    this.f.draining.add(discard);
    try {
      for (;;) if ((await this.iterator.next()).done) break;
    } catch {
      // the answer is whole already; a body that breaks off after [DONE] changes nothing
    } finally {
      this.f.draining.delete(discard);
      routed.done();
    }
  }

  /** The engine's body broke off, or the agent went away while it was read. */
  private brokeOff(controller: StreamSink, error: unknown): void {
    if (!this.stop()) return;
    this.ctx.routed.done();
    const aborted = this.ctx.clientGone();
    // An engine gone silent (the body timeout) is named as such, to the agent too: a 504.
    const silent = error instanceof UpstreamError && error.status === 504;
    this.catchUp();
    this.f.recorder.record(this.ctx.session, this.ctx.attachments, {
      kind: aborted ? 'aborted' : 'upstream_error',
      engineId: this.engineId,
      status: aborted ? null : silent ? 504 : 502,
      message: aborted
        ? 'the agent went away mid-stream'
        : `the engine's stream broke off (${(error as Error).message})`,
      partial: partialOf(this.capture),
    });
    this.ctx.finish();
    if (aborted) controller.error(error);
    else {
      controller.enqueue(
        silent
          ? sseError(504, (error as Error).message, 'upstream_timeout')
          : sseError(502, `engine ${this.engineId} broke off the stream`),
      );
      controller.close();
    }
  }

  /**
   * The agent went away before [DONE]: stop the generation (dropping the engine's body ends its
   * request) and keep what was made as an aborted call.
   */
  cancel(): void {
    if (!this.stop()) return;
    const { routed } = this.ctx;
    routed.done();
    routed.reply.discard();
    this.catchUp();
    this.f.recorder.record(this.ctx.session, this.ctx.attachments, {
      kind: 'aborted',
      engineId: this.engineId,
      status: null,
      message: 'the agent went away mid-stream',
      partial: partialOf(this.capture),
    });
    this.ctx.finish();
  }
}

const forward = (controller: StreamSink, text: string) => {
  if (text !== '') controller.enqueue(text);
};

/** A usage chunk with no choice: the one the gateway asked for. */
const usageOnly = (chunk: unknown): boolean =>
  isObject(chunk) && isObject(chunk.usage) && Array.isArray(chunk.choices) && chunk.choices.length === 0;

function sseError(status: number, message: string, code = 'upstream_error'): string {
  return `data: ${JSON.stringify(openaiErrorBody(status, message, null, code))}\n\n`;
}
