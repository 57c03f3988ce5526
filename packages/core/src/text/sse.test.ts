import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import {
  encodeSseComment,
  encodeSseDone,
  encodeSseEvent,
  isSseDone,
  SSE_DONE,
  SseDecoder,
  type SseEvent,
  sseDecoderStream,
} from './sse.js';

const bytes = (s: string) => new TextEncoder().encode(s);
const text = (b: Uint8Array) => new TextDecoder().decode(b);

/** Feeds `wire` in pieces cut at the given byte offsets and collects every event. */
function decodeSplit(wire: Uint8Array, cuts: number[] = [], decoder = new SseDecoder()): SseEvent[] {
  const offsets = [...new Set(cuts.map((c) => c % (wire.length + 1)))].sort((a, b) => a - b);
  const events: SseEvent[] = [];
  let from = 0;
  for (const at of [...offsets, wire.length]) {
    events.push(...decoder.push(wire.subarray(from, at)));
    from = at;
  }
  events.push(...decoder.end());
  return events;
}
const decodeText = (wire: string) => decodeSplit(bytes(wire));

describe('encodeSseEvent', () => {
  it('writes data lines and a blank line', () => {
    expect(text(encodeSseEvent({ data: '{"a":1}' }))).toBe('data: {"a":1}\n\n');
    expect(text(encodeSseEvent({ data: 'one\ntwo\r\nthree' }))).toBe('data: one\ndata: two\ndata: three\n\n');
    expect(text(encodeSseEvent({ data: '' }))).toBe('data: \n\n');
  });

  it('writes event type, id and retry before the data', () => {
    expect(text(encodeSseEvent({ data: 'x', event: 'delta', id: '7', retry: 1000 }))).toBe(
      'event: delta\nid: 7\nretry: 1000\ndata: x\n\n',
    );
  });

  it('rejects fields that would break the framing', () => {
    expect(() => encodeSseEvent({ data: 'x', event: 'a\nb' })).toThrow(ValidationError);
    expect(() => encodeSseEvent({ data: 'x', id: 'a\rb' })).toThrow(/id must not contain a line break/);
    expect(() => encodeSseEvent({ data: 'x', id: 'a\0b' })).toThrow(/NUL/);
    expect(() => encodeSseEvent({ data: 'x', retry: -1 })).toThrow(/retry/);
  });

  it('writes the OpenAI terminator and comments', () => {
    expect(text(encodeSseDone())).toBe('data: [DONE]\n\n');
    expect(isSseDone({ data: '[DONE]' })).toBe(true);
    expect(isSseDone({ data: '{"done":true}' })).toBe(false);
    expect(text(encodeSseComment('keep-alive'))).toBe(': keep-alive\n\n');
  });
});

describe('SseDecoder', () => {
  it('joins multi-line data with newlines', () => {
    expect(decodeText('data: first\ndata: second\n\n')).toEqual([{ data: 'first\nsecond' }]);
  });

  it('strips exactly one space after the colon', () => {
    expect(decodeText('data:x\n\ndata:  two spaces\n\n')).toEqual([{ data: 'x' }, { data: ' two spaces' }]);
  });

  it('reads event types and ids per event', () => {
    expect(decodeText('event: delta\nid: 1\ndata: a\n\ndata: b\n\n')).toEqual([
      { data: 'a', event: 'delta', id: '1' },
      { data: 'b' },
    ]);
  });

  it('skips comments and reports them to a listener', () => {
    const comments: string[] = [];
    const events = decodeSplit(
      bytes(': ping\ndata: a\n:raw\n\n'),
      [],
      new SseDecoder({ onComment: (c) => comments.push(c) }),
    );
    expect(events).toEqual([{ data: 'a' }]);
    expect(comments).toEqual(['ping', 'raw']);
  });

  it('treats a field without a colon as an empty value and ignores unknown fields', () => {
    expect(decodeText('data\n\nfoo: bar\ndata: x\n\n')).toEqual([{ data: '' }, { data: 'x' }]);
  });

  it('dispatches nothing for a block without data', () => {
    expect(decodeText('event: ping\nid: 3\n\ndata: after\n\n')).toEqual([{ data: 'after' }]);
  });

  it('accepts CRLF and lone CR line endings', () => {
    expect(decodeText('data: a\r\ndata: b\r\n\r\ndata: c\rdata: d\r\r')).toEqual([
      { data: 'a\nb' },
      { data: 'c\nd' },
    ]);
  });

  it('keeps a CRLF split across chunks as one line break', () => {
    // Were "\r" | "\n" read as two breaks, the "\n" would end the event after "a".
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('data: a\r'))).toEqual([]);
    expect(decoder.push(bytes('\ndata: b\r'))).toEqual([]);
    expect(decoder.push(bytes('\n\r'))).toEqual([{ data: 'a\nb' }]);
    expect(decoder.push(bytes('\n'))).toEqual([]);
    expect(decoder.end()).toEqual([]);
  });

  it('reassembles multi-byte characters split across chunks', () => {
    const wire = bytes('data: €𝄞中\n\n');
    const decoder = new SseDecoder();
    const events: SseEvent[] = [];
    for (const b of wire) events.push(...decoder.push(Uint8Array.of(b)));
    expect(events).toEqual([{ data: '€𝄞中' }]);
  });

  it('strips a leading byte order mark, even split, and only the first', () => {
    const wire = bytes('\uFEFFdata: a\n\n\uFEFFdata: b\n\n');
    expect(decodeSplit(wire, [1, 2])).toEqual([{ data: 'a' }]);
  });

  it('drops an event the stream ended inside, and says so', () => {
    const decoder = new SseDecoder();
    expect(decoder.push(bytes('data: whole\n\ndata: cut'))).toEqual([{ data: 'whole' }]);
    expect(decoder.end()).toEqual([]);
    expect(decoder.truncated).toBe(true);

    const clean = new SseDecoder();
    clean.push(bytes('data: whole\n\n: trailing comment\n'));
    clean.end();
    expect(clean.truncated).toBe(false);
  });

  it('turns invalid UTF-8 into replacement characters instead of failing', () => {
    expect(decodeSplit(Uint8Array.of(...bytes('data: '), 0xff, 0x41, 10, 10))).toEqual([{ data: '\uFFFDA' }]);
  });

  it('decodes a web stream of chunks', async () => {
    const chunks = [bytes('data: {"a"'), bytes(':1}\n\nda'), bytes('ta: [DONE]\n\n')];
    const events: SseEvent[] = [];
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const c of chunks) controller.enqueue(c);
        controller.close();
      },
    }).pipeThrough(sseDecoderStream());
    for await (const event of stream) events.push(event);
    expect(events).toEqual([{ data: '{"a":1}' }, { data: '[DONE]' }]);
  });
});

// Any Unicode text (no lone surrogates: UTF-8 cannot carry them); type and id without line breaks.
const singleLine = fc.string({ unit: 'binary', maxLength: 12 }).filter((s) => !/[\r\n\0]/.test(s));
const sseEvent: fc.Arbitrary<SseEvent> = fc.record(
  {
    data: fc.string({ unit: 'binary', maxLength: 40 }),
    event: singleLine.filter((s) => s !== ''),
    id: singleLine,
  },
  { requiredKeys: ['data'] },
);
const cuts = fc.array(fc.nat(), { maxLength: 12 });

describe('round trip through arbitrary byte splits', () => {
  it('decodes encoded events to the same events', () => {
    fc.assert(
      fc.property(fc.array(sseEvent, { maxLength: 6 }), cuts, (events, cutAt) => {
        const parts = events.map(encodeSseEvent);
        const wire = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
        let at = 0;
        for (const p of parts) {
          wire.set(p, at);
          at += p.length;
        }
        // SSE carries line breaks in data as "\n" only.
        const expected = events.map((e) => ({ ...e, data: e.data.replace(/\r\n|\r/g, '\n') }));
        expect(decodeSplit(wire, cutAt)).toEqual(expected);
      }),
      { numRuns: 500 },
    );
  });

  it('decodes hand-written wire text with mixed line endings, comments and a BOM', () => {
    // The wire is built here, not by the encoder, so decoder and encoder cannot share a mistake.
    const lineEnd = fc.constantFrom('\n', '\r', '\r\n');
    const block = fc.record({
      lines: fc.array(
        fc.string({ unit: 'binary', maxLength: 10 }).filter((s) => !/[\r\n]/.test(s)),
        {
          minLength: 1,
          maxLength: 3,
        },
      ),
      event: fc.option(
        singleLine.filter((s) => s !== '' && !s.startsWith(' ')),
        { nil: undefined },
      ),
      comment: fc.option(singleLine, { nil: undefined }),
      ends: fc.array(lineEnd, { minLength: 6, maxLength: 6 }),
    });
    fc.assert(
      fc.property(fc.boolean(), fc.array(block, { maxLength: 5 }), cuts, (bom, blocks, cutAt) => {
        let wire = bom ? '\uFEFF' : '';
        for (const b of blocks) {
          const e = b.ends;
          if (b.comment !== undefined) wire += `:${b.comment}${e[0]}`;
          if (b.event !== undefined) wire += `event:${b.event}${e[1]}`;
          b.lines.forEach((l, i) => {
            wire += `data:${l}${e[2 + i]}`;
          });
          // "\r" then "\n" would fuse into one break and swallow the blank line, so use "\r\n" there.
          const last = e[1 + b.lines.length];
          wire += last === '\r' && e[5] === '\n' ? '\r\n' : e[5];
        }
        const expected = blocks.map((b) => ({
          data: b.lines.map((l) => (l.startsWith(' ') ? l.slice(1) : l)).join('\n'),
          ...(b.event !== undefined ? { event: b.event } : {}),
        }));
        expect(decodeSplit(bytes(wire), cutAt)).toEqual(expected);
      }),
      { numRuns: 500 },
    );
  });
});

// ---- properties over realistic streams: unicode data, comments, mixed line endings, [DONE] ----------

/** Pieces that stress the decoder: multi-byte UTF-8 (2, 3 and 4 bytes, ZWJ sequences), line breaks, colons. */
const trickyPiece = fc.constantFrom(
  'é',
  '€',
  '中文',
  '日本語',
  '한국어',
  '😀',
  '👩‍👩‍👧',
  '🇫🇷',
  '𝄞',
  '\u0301',
  '\n',
  '\r\n',
  '\r',
  '\r\r\n',
  ':',
  ' ',
  'data: ',
  '[DONE]',
  '{"a":1}',
);
const sseData = fc
  .array(
    fc.oneof(
      trickyPiece,
      fc.string({ unit: 'grapheme', maxLength: 4 }),
      fc.string({ unit: 'binary', maxLength: 4 }),
    ),
    { maxLength: 8 },
  )
  .map((pieces) => pieces.join(''));
const lineEnding = fc.constantFrom('\n', '\r\n', '\r');
const fieldValue = fc
  .array(fc.oneof(trickyPiece, fc.string({ unit: 'grapheme', maxLength: 3 })), { maxLength: 3 })
  .map((pieces) => pieces.join('').replace(/[\r\n\0]/g, ''));

interface WireEvent {
  data: string;
  event?: string;
  id?: string;
  comment?: string;
  /** event/id lines after the data lines instead of before them */
  fieldsLast: boolean;
  /** `data:value` instead of `data: value` where the value does not start with a space */
  tight: boolean;
  /** Endings for the comment, event, id and data lines, then the blank line (cycled when more are needed). */
  ends: string[];
  /** extra blank lines after the event, which dispatch nothing */
  extraBlankLines: number;
}

const wireEvent: fc.Arbitrary<WireEvent> = fc.record(
  {
    data: sseData,
    event: fieldValue,
    id: fieldValue,
    comment: fieldValue,
    fieldsLast: fc.boolean(),
    tight: fc.boolean(),
    ends: fc.array(lineEnding, { minLength: 1, maxLength: 8 }),
    extraBlankLines: fc.nat({ max: 2 }),
  },
  { requiredKeys: ['data', 'fieldsLast', 'tight', 'ends', 'extraBlankLines'] },
);

const streamArb = fc.record({ events: fc.array(wireEvent, { maxLength: 6 }), done: fc.boolean() });

/**
 * Writes the wire by hand (not with the encoder), choosing each line ending. A blank line must not
 * be "\n" right after a line ending in "\r": the two would read as one "\r\n" break.
 */
function writeWire(events: readonly WireEvent[], done: boolean): string {
  let out = '';
  let lastEnd = '';
  const line = (text: string, end: string) => {
    const safeEnd = text === '' && lastEnd === '\r' && end === '\n' ? '\r' : end;
    out += text + safeEnd;
    lastEnd = safeEnd;
  };
  for (const e of events) {
    let n = 0;
    const nextEnd = () => e.ends[n++ % e.ends.length] ?? '\n';
    if (e.comment !== undefined) line(`: ${e.comment}`, nextEnd());
    const fields: string[] = [];
    if (e.event !== undefined) fields.push(`event: ${e.event}`);
    if (e.id !== undefined) fields.push(`id: ${e.id}`);
    const dataLines = e.data
      .split(/\r\n|\r|\n/)
      .map((l) => (e.tight && !l.startsWith(' ') ? `data:${l}` : `data: ${l}`));
    for (const l of e.fieldsLast ? [...dataLines, ...fields] : [...fields, ...dataLines]) line(l, nextEnd());
    line('', nextEnd());
    for (let i = 0; i < e.extraBlankLines; i++) line('', nextEnd());
  }
  if (done) {
    line(`data: ${SSE_DONE}`, '\n');
    line('', '\n');
  }
  return out;
}

/** What the decoder must return for these events: line breaks in data as "\n", an empty type as none. */
function expectedEvents(events: readonly WireEvent[], done: boolean): SseEvent[] {
  const out: SseEvent[] = events.map((e) => ({
    data: e.data.replace(/\r\n|\r/g, '\n'),
    ...(e.event !== undefined && e.event !== '' ? { event: e.event } : {}),
    ...(e.id !== undefined ? { id: e.id } : {}),
  }));
  if (done) out.push({ data: SSE_DONE });
  return out;
}

/**
 * Byte offsets worth cutting at: inside a multi-byte character (before a continuation byte) and
 * between the "\r" and "\n" of a CRLF.
 */
function trickyOffsets(wire: Uint8Array): number[] {
  const offsets: number[] = [];
  for (let i = 1; i < wire.length; i++) {
    const b = wire[i] ?? 0;
    if ((b & 0xc0) === 0x80 || (wire[i - 1] === 13 && b === 10)) offsets.push(i);
  }
  return offsets;
}

/** Cut points: arbitrary ones plus some picked among the tricky offsets. */
const cutPlan = fc.record({
  anywhere: fc.array(fc.nat(), { maxLength: 8 }),
  tricky: fc.array(fc.nat(), { maxLength: 8 }),
});
function cutsFor(wire: Uint8Array, plan: { anywhere: number[]; tricky: number[] }): number[] {
  const tricky = trickyOffsets(wire);
  return [
    ...plan.anywhere,
    ...(tricky.length > 0 ? plan.tricky.map((i) => tricky[i % tricky.length] ?? 0) : []),
  ];
}

/** The wire cut into chunks at the given offsets (empty chunks included: a reader may deliver them). */
function chunksAt(wire: Uint8Array, cuts: number[]): Uint8Array[] {
  const offsets = [...new Set(cuts.map((c) => c % (wire.length + 1)))].sort((a, b) => a - b);
  const chunks: Uint8Array[] = [];
  let from = 0;
  for (const at of [...offsets, wire.length]) {
    chunks.push(wire.slice(from, at));
    from = at;
  }
  return chunks;
}

interface Decoded {
  events: SseEvent[];
  comments: string[];
  truncated: boolean;
}
function decodeChunks(chunks: readonly Uint8Array[]): Decoded {
  const comments: string[] = [];
  const decoder = new SseDecoder({ onComment: (c) => comments.push(c) });
  const events: SseEvent[] = [];
  for (const chunk of chunks) events.push(...decoder.push(chunk));
  events.push(...decoder.end());
  return { events, comments, truncated: decoder.truncated };
}

async function decodeAsStream(chunks: readonly Uint8Array[]): Promise<SseEvent[]> {
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      for (const c of chunks) controller.enqueue(c);
      controller.close();
    },
  }).pipeThrough(sseDecoderStream());
  const events: SseEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

describe('SseDecoder properties', () => {
  it('decodes hand-written streams cut anywhere, including inside characters and CRLFs', () => {
    fc.assert(
      fc.property(streamArb, cutPlan, ({ events, done }, plan) => {
        const wire = bytes(writeWire(events, done));
        const decoded = decodeChunks(chunksAt(wire, cutsFor(wire, plan)));
        expect(decoded.events).toEqual(expectedEvents(events, done));
        expect(decoded.comments).toEqual(events.flatMap((e) => (e.comment === undefined ? [] : [e.comment])));
        expect(decoded.truncated).toBe(false);
        if (done) expect(isSseDone(decoded.events.at(-1) ?? { data: '' })).toBe(true);
      }),
      { numRuns: 300 },
    );
  });

  it('decodes the same through sseDecoderStream over a ReadableStream', async () => {
    await fc.assert(
      fc.asyncProperty(streamArb, cutPlan, async ({ events, done }, plan) => {
        const wire = bytes(writeWire(events, done));
        expect(await decodeAsStream(chunksAt(wire, cutsFor(wire, plan)))).toEqual(
          expectedEvents(events, done),
        );
      }),
      { numRuns: 200 },
    );
  });

  it('round-trips events written by the encoder, with comments and [DONE], through any split', () => {
    const item = fc.oneof(
      fc.record({ kind: fc.constant('event' as const), event: wireEvent }),
      fc.record({ kind: fc.constant('comment' as const), text: sseData }),
    );
    fc.assert(
      fc.property(fc.array(item, { maxLength: 8 }), fc.boolean(), cutPlan, (items, done, plan) => {
        const parts: Uint8Array[] = [];
        const expected: SseEvent[] = [];
        const comments: string[] = [];
        for (const it of items) {
          if (it.kind === 'comment') {
            parts.push(encodeSseComment(it.text));
            comments.push(...it.text.split(/\r\n|\r|\n/));
            continue;
          }
          const { data, event, id } = it.event;
          const sent: SseEvent = {
            data,
            ...(event !== undefined ? { event } : {}),
            ...(id !== undefined ? { id } : {}),
          };
          parts.push(encodeSseEvent(sent));
          expected.push(...expectedEvents([it.event], false));
        }
        if (done) {
          parts.push(encodeSseDone());
          expected.push({ data: SSE_DONE });
        }
        const wire = bytes(parts.map(text).join(''));
        const decoded = decodeChunks(chunksAt(wire, cutsFor(wire, plan)));
        expect(decoded.events).toEqual(expected);
        expect(decoded.comments).toEqual(comments);
        expect(decoded.truncated).toBe(false);
      }),
      { numRuns: 300 },
    );
  });

  it('gives the same result however the stream is split, even for arbitrary bytes', () => {
    // Bytes biased towards what matters to the parser: field names, colons, CR/LF, UTF-8 lead and
    // continuation bytes, and bytes that are never valid UTF-8.
    const interesting = fc.constantFrom(
      ...bytes('data: '),
      ...bytes('event:id:retry:'),
      58,
      32,
      13,
      10,
      0xef,
      0xbb,
      0xbf,
      0xe4,
      0xb8,
      0xad,
      0xf0,
      0x9f,
      0x98,
      0x80,
      0xc3,
      0xa9,
      0xff,
      0xc0,
      0x80,
    );
    const anyWire = fc.oneof(
      streamArb.map(({ events, done }) => bytes(writeWire(events, done))),
      fc
        .array(fc.oneof(interesting, fc.integer({ min: 0, max: 255 })), { maxLength: 120 })
        .map((b) => Uint8Array.from(b)),
    );
    fc.assert(
      fc.property(anyWire, cutPlan, cutPlan, (wire, planA, planB) => {
        const whole = decodeChunks([wire]);
        const a = decodeChunks(chunksAt(wire, cutsFor(wire, planA)));
        const b = decodeChunks(chunksAt(wire, cutsFor(wire, planB)));
        expect(a).toEqual(b);
        expect(a).toEqual(whole);
      }),
      { numRuns: 400 },
    );
  });

  it('decodes a stream delivered one byte at a time', () => {
    fc.assert(
      fc.property(streamArb, ({ events, done }) => {
        const wire = bytes(writeWire(events, done));
        const oneByOne = Array.from(wire, (b) => Uint8Array.of(b));
        expect(decodeChunks(oneByOne).events).toEqual(expectedEvents(events, done));
      }),
      { numRuns: 200 },
    );
  });
});
