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
  const output: OutputItem[] = [];
  let sequence = 0;
  let started = false;
  let ended = false;
  let sawDone = false;
  let failure: { code: string; message: string } | null = null;
  let finishReason: unknown = null;
  let usage: Record<string, unknown> | null = null;
  let open: TextItem | null = null;
  const calls = new Map<number, CallItem>();
  let out = '';

  const emit = (type: string, fields: Record<string, unknown>) => {
    const event = { type, sequence_number: sequence++, ...fields };
    out += `event: ${type}\ndata: ${JSON.stringify(event)}\n\n`;
  };
  const status = () => finishedStatus(finishReason);

  const closeText = () => {
    if (open === null) return;
    const { kind, index, id, text } = open;
    const at = { item_id: id, output_index: index, content_index: 0 };
    if (kind === 'message') {
      emit('response.output_text.done', { ...at, text, logprobs: [] });
      emit('response.content_part.done', { ...at, part: outputText(text) });
      output[index] = messageItem(id, text, status());
    } else {
      emit('response.reasoning_text.done', { ...at, text });
      emit('response.content_part.done', { ...at, part: { type: 'reasoning_text', text } });
      output[index] = reasoningItem(id, text);
    }
    emit('response.output_item.done', { output_index: index, item: output[index] });
    open = null;
  };
  const closeCall = (call: CallItem) => {
    if (call.done) return;
    call.done = true;
    const at = { item_id: call.id, output_index: call.index };
    emit('response.function_call_arguments.done', { ...at, name: call.name, arguments: call.arguments });
    output[call.index] = functionCallItem(call.id, call, status());
    emit('response.output_item.done', { output_index: call.index, item: output[call.index] });
  };
  /** Appends text to the open message or reasoning item, opening one (and closing the other) first. */
  const textDelta = (kind: TextItem['kind'], delta: string) => {
    if (open?.kind !== kind) {
      closeText();
      const id = newItemId(kind === 'message' ? 'msg' : 'rs');
      const index = output.length;
      output.push(kind === 'message' ? messageItem(id, '', 'in_progress') : reasoningItem(id, null));
      open = { kind, index, id, text: '' };
      emit('response.output_item.added', { output_index: index, item: output[index] });
      emit('response.content_part.added', {
        item_id: id,
        output_index: index,
        content_index: 0,
        part: kind === 'message' ? outputText('') : { type: 'reasoning_text', text: '' },
      });
    }
    if (delta === '') return;
    open!.text += delta;
    const at = { item_id: open!.id, output_index: open!.index, content_index: 0 };
    if (kind === 'message') emit('response.output_text.delta', { ...at, delta, logprobs: [] });
    else emit('response.reasoning_text.delta', { ...at, delta });
  };
  const callDelta = (delta: Record<string, unknown>) => {
    const n = typeof delta.index === 'number' ? delta.index : 0;
    const fn = isObject(delta.function) ? delta.function : {};
    let call = calls.get(n);
    if (call === undefined) {
      closeText();
      call = {
        index: output.length,
        id: newItemId('fc'),
        callId: typeof delta.id === 'string' ? delta.id : '',
        name: typeof fn.name === 'string' ? fn.name : '',
        arguments: '',
        done: false,
      };
      calls.set(n, call);
      output.push(functionCallItem(call.id, call, 'in_progress'));
      emit('response.output_item.added', { output_index: call.index, item: output[call.index] });
    }
    if (typeof fn.arguments === 'string' && fn.arguments !== '') {
      call.arguments += fn.arguments;
      emit('response.function_call_arguments.delta', {
        item_id: call.id,
        output_index: call.index,
        delta: fn.arguments,
      });
    }
  };
  const read = (data: string) => {
    if (data === SSE_DONE) {
      sawDone = true;
      return;
    }
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      failure ??= { code: 'upstream_error', message: 'the engine streamed an event that is not JSON' };
      return;
    }
    if (!isObject(chunk)) return;
    if (isObject(chunk.error)) {
      const e = chunk.error;
      failure ??= {
        code: typeof e.code === 'string' ? e.code : 'upstream_error',
        message: typeof e.message === 'string' ? e.message : 'the engine failed mid-stream',
      };
      return;
    }
    if (chunk.usage != null) usage = usageOf(chunk.usage);
    const choice = Array.isArray(chunk.choices)
      ? chunk.choices.find((c) => isObject(c) && (c.index ?? 0) === 0)
      : null;
    if (!isObject(choice)) return;
    const delta = isObject(choice.delta) ? choice.delta : {};
    const reasoning = delta.reasoning_content ?? delta.reasoning;
    if (typeof reasoning === 'string' && reasoning !== '') textDelta('reasoning', reasoning);
    if (typeof delta.content === 'string' && delta.content !== '') textDelta('message', delta.content);
    if (Array.isArray(delta.tool_calls)) for (const c of delta.tool_calls) if (isObject(c)) callDelta(c);
    if (choice.finish_reason != null) finishReason = choice.finish_reason;
  };
  const finish = () => {
    if (failure === null && !sawDone)
      failure = { code: 'upstream_error', message: 'the answer ended before it was complete' };
    if (failure !== null) {
      emit('response.failed', { response: responseObject(frame, 'failed', output, usage, failure) });
      return;
    }
    if (output.length === 0) textDelta('message', '');
    closeText();
    for (const call of calls.values()) closeCall(call);
    completed(output);
    const final = status();
    emit(final === 'completed' ? 'response.completed' : 'response.incomplete', {
      response: responseObject(frame, final, output, usage),
    });
  };

  const flush = (sink: StreamSink) => {
    if (out !== '') sink.enqueue(out);
    out = '';
  };
  return {
    pull: async (sink) => {
      if (!started) {
        started = true;
        const response = responseObject(frame, 'in_progress', [], null);
        emit('response.created', { response });
        emit('response.in_progress', { response });
        // The agent sees the response begin before the engine's first token.
        flush(sink);
      }
      await chat.pull({
        enqueue: (text) => {
          if (ended) return;
          for (const event of decoder.push(utf8.encode(text))) read(event.data);
          flush(sink);
        },
        close: () => {
          if (ended) return;
          ended = true;
          for (const event of decoder.end()) read(event.data);
          finish();
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
