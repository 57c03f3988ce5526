import { CompletionCapture } from '../engines/capture.js';
import { UpstreamError } from '../engines/upstream.js';
import { parseEngineJson } from '../http/offload-json.js';
import type { CaptureTokenizer } from '../services/capture-tokenizer.js';
import { idArray } from '../util/typed-json.js';
import { type Answer, JSON_HEADERS } from './answer.js';
import { isObject } from './call-request.js';
import type { RoutedCall, StepRecorder } from './capture.js';
import { normalizeUpstreamError, openaiError } from './openai-errors.js';

/*
 * The engine's answer on its way to the agent: an error answer, or a whole (not streamed) completion
 * whose step is committed before the agent gets a byte of it. Streams are forward-stream.ts's.
 */

/** What forwarding an answer needs beside the call itself. */
export interface Forwarding {
  recorder: StepRecorder;
  tokenizing: CaptureTokenizer;
  /** Engine bodies still being read after their [DONE] (each entry stops reading one). */
  draining: Set<() => void>;
}

/** The engine's answer broke off while it was read whole: recorded, and raised for the agent. */
export function brokenAnswer(ctx: RoutedCall, f: Forwarding, error: unknown): never {
  const { engine } = ctx.routed;
  const aborted = ctx.clientGone();
  f.recorder.fail(ctx.session, ctx.attachments, error, engine, aborted);
  if (aborted) throw error;
  throw new UpstreamError(
    `engine ${engine.id} broke off its answer (${(error as Error).message})`,
    error instanceof UpstreamError && error.status === 504 ? 504 : 502, // 504: its body timeout cut it
    true,
  );
}

export async function forwardError(ctx: RoutedCall, f: Forwarding): Promise<Answer> {
  const { routed } = ctx;
  try {
    let text: string;
    try {
      text = await routed.reply.text();
    } catch (error) {
      return brokenAnswer(ctx, f, error);
    }
    const { body, message } = normalizeUpstreamError(routed.reply.status, text, routed.engine.id);
    // Recorded before the agent sees the error: whoever reads the events after it finds the call.
    await f.recorder.record(ctx.session, ctx.attachments, {
      kind: 'upstream_error',
      engineId: routed.engine.id,
      status: routed.reply.status,
      message,
      partial: null,
    });
    return { status: routed.reply.status, headers: JSON_HEADERS, body };
  } finally {
    routed.done();
    ctx.finish();
  }
}

export async function forwardWhole(ctx: RoutedCall, f: Forwarding): Promise<Answer> {
  const { routed } = ctx;
  let bytes: Buffer;
  try {
    bytes = await routed.reply.bytes();
  } catch (error) {
    routed.done();
    ctx.finish();
    return brokenAnswer(ctx, f, error);
  }
  routed.done();
  try {
    const answer = await completionOf(bytes);
    if (answer === null) {
      const message = `engine ${routed.engine.id} returned something that is not a completion`;
      f.recorder.record(ctx.session, ctx.attachments, {
        kind: 'upstream_error',
        engineId: routed.engine.id,
        status: 502,
        message,
        partial: null,
      });
      return openaiError(502, message, null, 'bad_upstream_answer');
    }
    if (ctx.clientGone()) {
      f.recorder.record(ctx.session, ctx.attachments, {
        kind: 'aborted',
        engineId: routed.engine.id,
        status: null,
        message: 'the agent went away before the answer was sent',
        partial: null,
      });
      return { status: 499, headers: {}, body: null };
    }
    const capture = new CompletionCapture();
    capture.addCompletion(answer);
    // Committed before the agent sees a byte of it: no answered call is ever without its step.
    await f.recorder.capture(ctx, capture.result(), null);
    return { status: 200, headers: JSON_HEADERS, body: bytes };
  } finally {
    ctx.finish();
  }
}

/**
 * The engine's answer parsed, when it is a completion (an object with choices); else null. A big one
 * (its prompt's ids echoed) is parsed on the offload thread; its ids become plain arrays again here,
 * a loop far cheaper than the parse, for the step's path that reads them as arrays.
 */
async function completionOf(bytes: Buffer): Promise<Record<string, unknown> | null> {
  const parsed = await parseEngineJson(bytes, true);
  if (!parsed.ok) return null;
  const answer = parsed.value;
  if (!isObject(answer) || !Array.isArray(answer.choices) || answer.choices.length === 0) return null;
  unpackIds(answer);
  for (const choice of answer.choices) if (isObject(choice)) unpackIds(choice);
  return answer;
}

function unpackIds(o: Record<string, unknown>): void {
  for (const key in o) if (o[key] instanceof Uint32Array) o[key] = idArray(o[key]);
}
