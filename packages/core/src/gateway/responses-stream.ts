import { SSE_DONE, SseDecoder } from '../text/index.js';
import type { StreamSink, StreamSource } from './answer.js';
import { isObject } from './call-request.js';
import {
  finishedStatus,
  functionCallItem,
  messageItem,
  newItemId,
  type OutputItem,
  outputText,
  type ResponseFrame,
  reasoningItem,
  responseObject,
  usageOf,
} from './responses-output.js';

/*
 * A streamed Responses answer, translated event by event from the chat stream the gateway forwards:
 * `response.created` and `response.in_progress` first, then each output item added, its deltas and
 * its done events, and `response.completed` (or `response.incomplete` at max_output_tokens) last.
 * The chat stream holds its finishing chunk until the step is committed, so the items' done events
 * and the terminal event leave only after the commit too; a chat stream that ends in an error event
 * ends this one with `response.failed`.
 */

const utf8 = new TextEncoder();

interface TextItem {
  kind: 'message' | 'reasoning';
  index: number;
  id: string;
  text: string;
}

interface CallItem {
  index: number;
  id: string;
  callId: string;
  name: string;
  arguments: string;
  done: boolean;
}

type Failure = { code: string; message: string };

/**
 * Wraps the chat stream of a Responses call. `completed` gets the output items once the response
 * completed (the step is stored by then), before its terminal event goes out.
 */
export function responseEvents(
  frame: ResponseFrame,
  chat: StreamSource,
  completed: (output: OutputItem[]) => void,
): StreamSource {
  const decoder = new SseDecoder();
  const events = new ResponseEventWriter(frame, completed);
  let started = false;
  let ended = false;
  const flush = (sink: StreamSink) => {
    const out = events.take();
    if (out !== '') sink.enqueue(out);
  };
  return {
    pull: async (sink) => {
      if (!started) {
        started = true;
        events.start();
        // The agent sees the response begin before the engine's first token.
        flush(sink);
      }
      await chat.pull({
        enqueue: (text) => {
          if (ended) return;
          for (const event of decoder.push(utf8.encode(text))) events.read(event.data);
          flush(sink);
        },
        close: () => {
          if (ended) return;
          ended = true;
          for (const event of decoder.end()) events.read(event.data);
          events.finish();
          flush(sink);
          sink.close();
        },
        error: (error) => {
          if (ended) return;
          ended = true;
          sink.error(error);
        },
      });
      flush(sink);
    },
    cancel: () => chat.cancel(),
  };
}

/** The Responses events of one answer, written as the chat chunks are read. */
class ResponseEventWriter {
  private readonly output: OutputItem[] = [];
  private readonly calls = new Map<number, CallItem>();
  private sequence = 0;
  private sawDone = false;
  private failure: Failure | null = null;
  private finishReason: unknown = null;
  private usage: Record<string, unknown> | null = null;
  private open: TextItem | null = null;
  private out = '';

  constructor(
    private readonly frame: ResponseFrame,
    private readonly completed: (output: OutputItem[]) => void,
  ) {}

  /** The events written since the last take, as SSE text. */
  take(): string {
    const out = this.out;
    this.out = '';
    return out;
  }

  start(): void {
    const response = responseObject(this.frame, 'in_progress', [], null);
    this.emit('response.created', { response });
    this.emit('response.in_progress', { response });
  }

  /** One chat chunk's data. */
  read(data: string): void {
    if (data === SSE_DONE) {
      this.sawDone = true;
      return;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      this.failure ??= { code: 'upstream_error', message: 'the engine streamed an event that is not JSON' };
      return;
    }
    if (!isObject(chunk)) return;
    if (isObject(chunk.error)) {
      this.failure ??= failureOf(chunk.error);
      return;
    }
    if (chunk.usage != null) this.usage = usageOf(chunk.usage);
    const choice = Array.isArray(chunk.choices)
      ? chunk.choices.find((c) => isObject(c) && (c.index ?? 0) === 0)
      : null;
    if (isObject(choice)) this.readChoice(choice);
  }

  /** The terminal events: the items' done events and completed (or incomplete), else failed. */
  finish(): void {
    if (this.failure === null && !this.sawDone)
      this.failure = { code: 'upstream_error', message: 'the answer ended before it was complete' };
    if (this.failure !== null) {
      const response = responseObject(this.frame, 'failed', this.output, this.usage, this.failure);
      this.emit('response.failed', { response });
      return;
    }
    if (this.output.length === 0) this.textDelta('message', '');
    this.closeText();
    for (const call of this.calls.values()) this.closeCall(call);
    this.completed(this.output);
    const final = this.status();
    this.emit(final === 'completed' ? 'response.completed' : 'response.incomplete', {
      response: responseObject(this.frame, final, this.output, this.usage),
    });
  }

  private readChoice(choice: Record<string, unknown>): void {
    const delta = isObject(choice.delta) ? choice.delta : {};
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === 'string' && reasoning !== '') this.textDelta('reasoning', reasoning);
    if (typeof delta.content === 'string' && delta.content !== '') this.textDelta('message', delta.content);
    if (Array.isArray(delta.tool_calls)) for (const c of delta.tool_calls) if (isObject(c)) this.callDelta(c);
    if (choice.finish_reason != null) this.finishReason = choice.finish_reason;
  }

  private emit(type: string, fields: Record<string, unknown>): void {
    const event = { type, sequence_number: this.sequence++, ...fields };
    this.out += `event: ${type}\ndata: ${JSON.stringify(event)}\n\n`;
  }

  private status() {
    return finishedStatus(this.finishReason);
  }

  /** Appends text to the open message or reasoning item, opening one (and closing the other) first. */
  private textDelta(kind: TextItem['kind'], delta: string): void {
    const open = this.open?.kind === kind ? this.open : this.openText(kind);
    if (delta === '') return;
    open.text += delta;
    const at = { item_id: open.id, output_index: open.index, content_index: 0 };
    if (kind === 'message') this.emit('response.output_text.delta', { ...at, delta, logprobs: [] });
    else this.emit('response.reasoning_text.delta', { ...at, delta });
  }

  private openText(kind: TextItem['kind']): TextItem {
    this.closeText();
    const id = newItemId(kind === 'message' ? 'msg' : 'rs');
    const index = this.output.length;
    this.output.push(kind === 'message' ? messageItem(id, '', 'in_progress') : reasoningItem(id, null));
    this.open = { kind, index, id, text: '' };
    this.emit('response.output_item.added', { output_index: index, item: this.output[index] });
    this.emit('response.content_part.added', {
      item_id: id,
      output_index: index,
      content_index: 0,
      part: kind === 'message' ? outputText('') : { type: 'reasoning_text', text: '' },
    });
    return this.open;
  }

  private closeText(): void {
    if (this.open === null) return;
    const { kind, index, id, text } = this.open;
    const at = { item_id: id, output_index: index, content_index: 0 };
    if (kind === 'message') {
      this.emit('response.output_text.done', { ...at, text, logprobs: [] });
      this.emit('response.content_part.done', { ...at, part: outputText(text) });
      this.output[index] = messageItem(id, text, this.status());
    } else {
      this.emit('response.reasoning_text.done', { ...at, text });
      this.emit('response.content_part.done', { ...at, part: { type: 'reasoning_text', text } });
      this.output[index] = reasoningItem(id, text);
    }
    this.emit('response.output_item.done', { output_index: index, item: this.output[index] });
    this.open = null;
  }

  private callDelta(delta: Record<string, unknown>): void {
    const n = typeof delta.index === 'number' ? delta.index : 0;
    const fn = isObject(delta.function) ? delta.function : {};
    const call = this.calls.get(n) ?? this.openCall(n, delta, fn);
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      call.arguments += fn.arguments;
      this.emit('response.function_call_arguments.delta', {
        item_id: call.id,
        output_index: call.index,
        delta: fn.arguments,
      });
    }
  }

  private openCall(n: number, delta: Record<string, unknown>, fn: Record<string, unknown>): CallItem {
    this.closeText();
    const call: CallItem = {
      index: this.output.length,
      id: newItemId('fc'),
      callId: typeof delta.id === 'string' ? delta.id : '',
      name: typeof fn.name === 'string' ? fn.name : '',
      arguments: '',
      done: false,
    };
    this.calls.set(n, call);
    this.output.push(functionCallItem(call.id, call, 'in_progress'));
    this.emit('response.output_item.added', { output_index: call.index, item: this.output[call.index] });
    return call;
  }

  private closeCall(call: CallItem): void {
    if (call.done) return;
    call.done = true;
    const at = { item_id: call.id, output_index: call.index };
    this.emit('response.function_call_arguments.done', { ...at, name: call.name, arguments: call.arguments });
    this.output[call.index] = functionCallItem(call.id, call, this.status());
    this.emit('response.output_item.done', { output_index: call.index, item: this.output[call.index] });
  }
}

/** An engine's mid-stream error event as the failure `response.failed` carries. */
function failureOf(e: Record<string, unknown>): Failure {
  return {
    code: typeof e.code === 'string' ? e.code : 'upstream_error',
    message: typeof e.message === 'string' ? e.message : 'the engine failed mid-stream',
  };
}
