import { SseDecoder } from '../text/index.js';
import type { StreamSource } from './answer.js';
import { isObject } from './call-request.js';
import { stopReasonOf, usageOf } from './messages-answer.js';
import { toolUseId } from './messages-request.js';

/*
 * A streamed chat answer as the Messages API streams: message_start (and a ping), then per content
 * block content_block_start, its deltas (text_delta, input_json_delta) and content_block_stop, then
 * message_delta (stop reason, usage) and message_stop, each with its `event:` line, as the Anthropic
 * SDKs read them. The chat path holds its finishing chunk and [DONE] until the step is committed, and
 * message_delta is made from them: the agent learns the call ended only after its step is stored.
 */

const utf8 = new TextEncoder();

/** Error types the Anthropic SDKs know; an OpenAI-only one (conflict_error) reads as api_error. */
const ANTHROPIC_ERROR_TYPES = new Set([
  'invalid_request_error',
  'authentication_error',
  'permission_error',
  'not_found_error',
  'rate_limit_error',
  'timeout_error',
  'api_error',
  'overloaded_error',
]);

const event = (type: string, data: Record<string, unknown> = {}): string =>
  `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`;

type OpenBlock = { kind: 'text' } | { kind: 'tool'; call: number };

/** One stream's translation: chat chunks in, Messages API events out. */
class MessageEvents {
  private started = false;
  private ended = false;
  /** Content blocks started so far (the next one's index). */
  private blocks = 0;
  private open: OpenBlock | null = null;
  private finish: unknown = null;
  private matched: unknown = null;
  private usedTools = false;
  private usage: unknown = null;

  constructor(
    private readonly id: string,
    private readonly model: unknown,
  ) {}

  /** The events one chat event makes (`data` is its payload). */
  next(data: string): string {
    if (this.ended) return '';
    if (data === '[DONE]') return this.end();
    let chunk: unknown;
    try {
      chunk = JSON.parse(data);
    } catch {
      // The chat path records the call as failed and closes the stream with an error event.
      return '';
    }
    if (!isObject(chunk)) return '';
    if (isObject(chunk.error)) {
      this.ended = true;
      const { type, message } = chunk.error;
      const known = typeof type === 'string' && ANTHROPIC_ERROR_TYPES.has(type) ? type : 'api_error';
      return event('error', { error: { type: known, message: String(message) }, request_id: null });
    }
    let out = this.start(chunk);
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) ? chunk.choices[0] : undefined;
    if (!isObject(choice)) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (typeof delta.content === 'string' && delta.content !== '') {
      if (this.open?.kind !== 'text') out += this.openBlock({ kind: 'text' }, { type: 'text', text: '' });
      out += this.delta({ type: 'text_delta', text: delta.content });
    }
    for (const call of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isObject) : []) {
      const fn = isObject(call.function) ? call.function : {};
      const index = typeof call.index === 'number' ? call.index : 0;
      if (this.open?.kind !== 'tool' || this.open.call !== index) {
        this.usedTools = true;
        out += this.openBlock(
          { kind: 'tool', call: index },
          { type: 'tool_use', id: toolUseId(String(call.id ?? '')), name: String(fn.name ?? ''), input: {} },
        );
      }
      if (typeof fn.arguments === 'string' && fn.arguments !== '')
        out += this.delta({ type: 'input_json_delta', partial_json: fn.arguments });
    }
    if (choice.finish_reason !== null && choice.finish_reason !== undefined) {
      this.finish = choice.finish_reason;
      this.matched = choice.stop_reason;
    }
    return out;
  }

  /** message_start and a ping, before the first event. */
  private start(chunk: Record<string, unknown>): string {
    if (this.started) return '';
    this.started = true;
    const prompt = chunk.prompt_token_ids;
    const message = {
      id: this.id,
      type: 'message',
      role: 'assistant',
      model: chunk.model ?? this.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: Array.isArray(prompt) ? prompt.length : 0, output_tokens: 0 },
    };
    return event('message_start', { message }) + event('ping');
  }

  private openBlock(block: OpenBlock, content: Record<string, unknown>): string {
    const out = this.closeBlock();
    this.open = block;
    return `${out}${event('content_block_start', { index: this.blocks++, content_block: content })}`;
  }

  private delta(delta: Record<string, unknown>): string {
    return event('content_block_delta', { index: this.blocks - 1, delta });
  }

  private closeBlock(): string {
    if (this.open === null) return '';
    this.open = null;
    return event('content_block_stop', { index: this.blocks - 1 });
  }

  /** The chat stream's [DONE]: the last block closed, the stop reason and usage, message_stop. */
  private end(): string {
    this.ended = true;
    const out = this.start({}) + this.closeBlock();
    const { input_tokens, output_tokens } = usageOf(this.usage);
    // Without a usage chunk, message_start's prompt count stands (the SDKs keep it when none comes).
    const usage = this.usage === null ? { output_tokens } : { output_tokens, input_tokens };
    return (
      out +
      event('message_delta', { delta: stopReasonOf(this.finish, this.matched, this.usedTools), usage }) +
      event('message_stop')
    );
  }
}

/** The chat path's streamed answer, pulled as it comes, as Messages API events. */
export function messageEvents(source: StreamSource, id: string, model: unknown): StreamSource {
  const decoder = new SseDecoder();
  const events = new MessageEvents(id, model);
  const translate = (list: { data: string }[]) => list.map((e) => events.next(e.data)).join('');
  return {
    pull: (sink) =>
      source.pull({
        enqueue: (text) => {
          const out = translate(decoder.push(utf8.encode(text)));
          if (out !== '') sink.enqueue(out);
        },
        close: () => {
          const out = translate(decoder.end());
          if (out !== '') sink.enqueue(out);
          sink.close();
        },
        error: (error) => sink.error(error),
      }),
    cancel: () => source.cancel(),
  };
}
