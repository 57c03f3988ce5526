import { ValidationError } from '../domain/errors.js';

/** One server-sent event. `id` and `event` belong to this event only (not carried over, as in eventsource-parser). */
export interface SseEvent {
  data: string;
  event?: string;
  id?: string;
  /** Reconnection time in ms the server asks for. */
  retry?: number;
}

/** OpenAI-compatible streams end with this data payload. */
export const SSE_DONE = '[DONE]';

const LINE_BREAK = /\r\n|\r|\n/;
const utf8 = new TextEncoder();

function checkSingleLine(value: string, field: string): void {
  if (/[\r\n]/.test(value)) throw new ValidationError(`${field} must not contain a line break`, field);
}

/**
 * The wire text of one event. Data lines are split on any line break, so "\r\n" and "\r" inside data
 * arrive as "\n" (SSE cannot carry them otherwise).
 */
export function formatSseEvent(event: SseEvent): string {
  let out = '';
  // An empty type means the default ("message"), so no line is needed for it.
  if (event.event !== undefined && event.event !== '') {
    checkSingleLine(event.event, 'event');
    out += `event: ${event.event}\n`;
  }
  if (event.id !== undefined) {
    checkSingleLine(event.id, 'id');
    if (event.id.includes('\0')) throw new ValidationError('id must not contain NUL', 'id');
    out += `id: ${event.id}\n`;
  }
  if (event.retry !== undefined) {
    if (!Number.isInteger(event.retry) || event.retry < 0) {
      throw new ValidationError('retry must be a non-negative integer', 'retry');
    }
    out += `retry: ${event.retry}\n`;
  }
  for (const line of event.data.split(LINE_BREAK)) out += `data: ${line}\n`;
  return `${out}\n`;
}

export function encodeSseEvent(event: SseEvent): Uint8Array {
  return utf8.encode(formatSseEvent(event));
}

/** The `data: [DONE]` event that ends an OpenAI-compatible stream. */
export function encodeSseDone(): Uint8Array {
  return encodeSseEvent({ data: SSE_DONE });
}

export function isSseDone(event: SseEvent): boolean {
  return event.data === SSE_DONE;
}

/** A comment (`: text`), e.g. a keep-alive that proxies forward and clients ignore. */
export function encodeSseComment(text: string): Uint8Array {
  const lines = text.split(LINE_BREAK).map((line) => `: ${line}\n`);
  return utf8.encode(`${lines.join('')}\n`);
}

export interface SseDecoderOptions {
  onComment?: (text: string) => void;
}

/**
 * Incremental SSE parser (WHATWG "event stream interpretation") over raw bytes: chunks may split a
 * UTF-8 character or a "\r\n" anywhere. Feed chunks with `push`, then call `end` once.
 */
export class SseDecoder {
  // `fatal: false` turns invalid bytes into U+FFFD as the spec asks; the default strips one leading BOM.
  private readonly text = new TextDecoder('utf-8');
  private readonly onComment: ((text: string) => void) | undefined;
  private partialLine = '';
  /** The last chunk ended in "\r": a "\n" opening the next one belongs to the same line break. */
  private skipLineFeed = false;
  private dataLines: string[] = [];
  private eventType = '';
  private eventId: string | undefined;
  private retry: number | undefined;
  private sawField = false;
  private ended = false;
  /** Set by `end` when the stream stopped inside an event, which is then dropped (as the spec says). */
  truncated = false;

  constructor(options: SseDecoderOptions = {}) {
    this.onComment = options.onComment;
  }

  /** Parses a chunk and returns the events it completed. */
  push(chunk: Uint8Array): SseEvent[] {
    if (this.ended) throw new Error('SseDecoder: push after end');
    const events: SseEvent[] = [];
    this.feed(this.text.decode(chunk, { stream: true }), events);
    return events;
  }

  /** Flushes the stream; an event without its closing blank line is discarded and `truncated` set. */
  end(): SseEvent[] {
    if (this.ended) return [];
    const events: SseEvent[] = [];
    this.feed(this.text.decode(), events);
    this.ended = true;
    this.truncated = this.partialLine !== '' || this.sawField;
    return events;
  }

  private feed(text: string, events: SseEvent[]): void {
    let start = 0;
    if (this.skipLineFeed && text.length > 0) {
      this.skipLineFeed = false;
      if (text.charCodeAt(0) === 10) start = 1;
    }
    // Jump from line break to line break (native searches: a chunk is mostly long data lines).
    let cr = text.indexOf('\r', start);
    let lf = text.indexOf('\n', start);
    while (cr !== -1 || lf !== -1) {
      let i = cr === -1 ? lf : lf === -1 ? cr : Math.min(cr, lf);
      const line = this.partialLine + text.slice(start, i);
      this.partialLine = '';
      if (i === cr) {
        if (i + 1 === text.length) this.skipLineFeed = true;
        else if (text.charCodeAt(i + 1) === 10) i++;
      }
      start = i + 1;
      this.processLine(line, events);
      if (cr !== -1 && cr < start) cr = text.indexOf('\r', start);
      if (lf !== -1 && lf < start) lf = text.indexOf('\n', start);
    }
    this.partialLine += text.slice(start);
  }

  private processLine(line: string, events: SseEvent[]): void {
    if (line === '') {
      this.dispatch(events);
      return;
    }
    if (line.charCodeAt(0) === 58 /* ':' */) {
      this.onComment?.(line.startsWith(': ') ? line.slice(2) : line.slice(1));
      return;
    }
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    this.sawField = true;
    switch (field) {
      case 'data':
        this.dataLines.push(value);
        break;
      case 'event':
        this.eventType = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.eventId = value;
        break;
      case 'retry':
        if (/^[0-9]+$/.test(value)) this.retry = Number(value);
        break;
      default:
        // Unknown fields are ignored, as the spec requires.
        break;
    }
  }

  private dispatch(events: SseEvent[]): void {
    // A block without data lines dispatches nothing, even if it set a type or id.
    if (this.dataLines.length > 0) {
      const event: SseEvent = { data: this.dataLines.join('\n') };
      if (this.eventType !== '') event.event = this.eventType;
      if (this.eventId !== undefined) event.id = this.eventId;
      if (this.retry !== undefined) event.retry = this.retry;
      events.push(event);
    }
    this.dataLines = [];
    this.eventType = '';
    this.eventId = undefined;
    this.retry = undefined;
    this.sawField = false;
  }
}

/** The decoder as a web TransformStream: bytes in (e.g. `response.body`), events out. */
export function sseDecoderStream(options: SseDecoderOptions = {}): TransformStream<Uint8Array, SseEvent> {
  const decoder = new SseDecoder(options);
  return new TransformStream({
    transform(chunk, controller) {
      for (const event of decoder.push(chunk)) controller.enqueue(event);
    },
    flush(controller) {
      for (const event of decoder.end()) controller.enqueue(event);
    },
  });
}
