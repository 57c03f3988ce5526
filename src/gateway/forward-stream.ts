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
  const { routed } = ctx;
  const iterator = routed.reply.body[Symbol.asyncIterator]();
  const decoder = new SseDecoder();
  const capture = new CompletionCapture();
  let done = false;
  let sawDone = false;
  let garbage: string | null = null;
  /** From the chunk that ends the choice (its finish_reason) on: sent once the step is committed. */
  let held = '';
  /** Ends the answer (once). */
  const stop = () => {
    if (done) return false;
    done = true;
    return true;
  };
  const options = ctx.request.stream_options;
  const agentWantsUsage = isObject(options) && options.include_usage === true;
  const failed = () => {
    const message = garbage ?? `engine ${routed.engine.id} ended the stream without [DONE]`;
    f.recorder.record(ctx.session, ctx.attachments, {
      kind: 'upstream_error',
      engineId: routed.engine.id,
      status: 502,
      message,
      partial: partialOf(capture),
    });
    return message;
  };
  /** Reads one event into the capture; null when it is not JSON. */
  const read = (data: string, at: number): unknown => {
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      garbage ??= `engine ${routed.engine.id} streamed an event that is not JSON`;
      return null;
    }
    if (isObject(chunk) && isObject(chunk.error)) {
      garbage ??= `engine ${routed.engine.id} failed mid-stream: ${String((chunk.error as { message?: unknown }).message)}`;
    }
    capture.addChunk(chunk, at);
    return chunk;
  };
  // Events are forwarded as they come and read into the capture later (at [DONE], or every
  // UNREAD_EVENTS events), so parsing them never holds up the bytes the agent waits for.
  let unread: string[] = [];
  let unreadAt: number[] = [];
  const catchUp = () => {
    for (let i = 0; i < unread.length; i++) read(unread[i]!, unreadAt[i]!);
    unread = [];
    unreadAt = [];
  };
  /**
   * Returns the bytes to forward now: the engine's events in its framing, up to the one that
   * finishes the choice. That one and the rest up to [DONE] are held until the step is committed.
   */
  const take = (events: { data: string }[], at: number): string => {
    let out = '';
    for (const event of events) {
      if (event.data === '[DONE]') {
        sawDone = true;
        break; // nothing follows [DONE] in the protocol
      }
      if (!agentWantsUsage && event.data.includes('"usage"')) {
        // The gateway asked for the usage chunk; an agent that did not gets none.
        catchUp();
        const chunk = read(event.data, at);
        const usageOnly =
          isObject(chunk) &&
          isObject(chunk.usage) &&
          Array.isArray(chunk.choices) &&
          chunk.choices.length === 0;
        if (usageOnly) continue;
      } else {
        unread.push(event.data);
        unreadAt.push(at);
        if (unread.length >= UNREAD_EVENTS) catchUp();
      }
      if (held === '' && !FINISHED.test(event.data)) out += `data: ${event.data}\n\n`;
      else held += `data: ${event.data}\n\n`;
    }
    return out;
  };
  const forward = (controller: StreamSink, text: string) => {
    if (text !== '') controller.enqueue(text);
  };
  /**
   * The engine sent [DONE]: the agent's answer ends here, without waiting for the engine's body to
   * end (the step is captured at once; the rest of that body is read in the background, so its
   * connection can serve the next call).
   */
  const answer = async (controller: StreamSink, text: string) => {
    forward(controller, text);
    if (!stop()) return;
    void drainRest();
    try {
      catchUp();
      if (garbage !== null) {
        forward(controller, held);
        controller.enqueue(sseError(502, failed()));
        return;
      }
      try {
        await f.recorder.capture(ctx, capture.result(), capture.firstTokenAt);
      } catch (error) {
        const known = error instanceof StepwiseError;
        controller.enqueue(
          sseError(known ? error.status : 500, known ? error.message : 'internal error', 'capture_failed'),
        );
        return;
      }
      controller.enqueue(`${held}data: [DONE]\n\n`);
    } finally {
      ctx.finish();
      controller.close();
    }
  };
  const drainRest = async () => {
    const discard = () => routed.reply.discard();
    f.draining.add(discard);
    try {
      for (;;) if ((await iterator.next()).done) break;
    } catch {
      // the answer is whole already; a body that breaks off after [DONE] changes nothing
    } finally {
      f.draining.delete(discard);
      routed.done();
    }
  };
  const body: StreamSource = {
    pull: async (controller) => {
      try {
        for (;;) {
          const next = await iterator.next();
          if (next.done) break;
          const text = take(decoder.push(next.value), performance.now());
          if (sawDone) return await answer(controller, text);
          // A chunk that completed no event yields nothing yet: read on rather than stall the pull.
          if (text !== '') return forward(controller, text);
        }
        const text = take(decoder.end(), performance.now());
        if (sawDone) return await answer(controller, text);
        forward(controller, text + held);
        if (!stop()) return;
        routed.done();
        catchUp();
        controller.enqueue(sseError(502, failed()));
        ctx.finish();
        controller.close();
      } catch (error) {
        if (!stop()) return;
        routed.done();
        const aborted = ctx.clientGone();
        // An engine gone silent (the body timeout) is named as such, to the agent too: a 504.
        const silent = error instanceof UpstreamError && error.status === 504;
        catchUp();
        f.recorder.record(ctx.session, ctx.attachments, {
          kind: aborted ? 'aborted' : 'upstream_error',
          engineId: routed.engine.id,
          status: aborted ? null : silent ? 504 : 502,
          message: aborted
            ? 'the agent went away mid-stream'
            : `the engine's stream broke off (${(error as Error).message})`,
          partial: partialOf(capture),
        });
        ctx.finish();
        if (aborted) controller.error(error);
        else {
          controller.enqueue(
            silent
              ? sseError(504, (error as Error).message, 'upstream_timeout')
              : sseError(502, `engine ${routed.engine.id} broke off the stream`),
          );
          controller.close();
        }
      }
    },
    cancel: async () => {
      // The agent went away before [DONE]: stop the generation (dropping the engine's body ends
      // its request) and keep what was made as an aborted call.
      if (!stop()) return;
      routed.done();
      routed.reply.discard();
      catchUp();
      f.recorder.record(ctx.session, ctx.attachments, {
        kind: 'aborted',
        engineId: routed.engine.id,
        status: null,
        message: 'the agent went away mid-stream',
        partial: partialOf(capture),
      });
      ctx.finish();
    },
  };
  return { status: 200, headers: SSE_HEADERS, body };
}

function sseError(status: number, message: string, code = 'upstream_error'): string {
  return `data: ${JSON.stringify(openaiErrorBody(status, message, null, code))}\n\n`;
}
