import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ValidationError } from '../domain/errors.js';
import {
  encodeSseComment,
  encodeSseDone,
  encodeSseEvent,
  isSseDone,
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
