import { resourceFromAttributes } from '@opentelemetry/resources';
import { describe, expect, it } from 'vitest';
import { newStep, type PoolEvent } from '../domain/index.js';
import type { StoredCall } from '../gateway/call-trace.js';
import { logEnd, tracesUrl } from './otel.js';
import { parseTraceparent, stepSpan } from './otel-spans.js';

describe('parseTraceparent (W3C Trace Context)', () => {
  it('reads the trace id, parent id and flags of a version-00 header', () => {
    expect(parseTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      flags: 1,
    });
  });

  it('reads a later version, fields after the flags ignored', () => {
    expect(
      parseTraceparent('cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-what-comes-next'),
    ).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      spanId: '00f067aa0ba902b7',
      flags: 0,
    });
  });

  it.each([
    ['no header', null],
    ['version ff', 'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'],
    ['an all-zero trace id', '00-00000000000000000000000000000000-00f067aa0ba902b7-01'],
    ['an all-zero parent id', '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01'],
    ['upper-case hex', '00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01'],
    ['a short trace id', '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01'],
    ['version 00 with more fields', '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x'],
  ])('refuses %s', (_, header) => {
    expect(parseTraceparent(header)).toBeNull();
  });
});

describe('tracesUrl', () => {
  it('appends /v1/traces to a collector base URL, keeps a full traces URL', () => {
    expect(tracesUrl('http://collector:4318')).toBe('http://collector:4318/v1/traces');
    expect(tracesUrl('http://collector:4318/otlp/')).toBe('http://collector:4318/otlp/v1/traces');
    expect(tracesUrl('https://collector/v1/traces')).toBe('https://collector/v1/traces');
  });
});

describe('logEnd', () => {
  /** An event log holding seqs 1..last, read as the store reads it (after a cursor, up to a limit). */
  const log = (last: number) => ({
    events: async ({ after, limit }: { after: number; limit: number }): Promise<PoolEvent[]> => {
      const out: PoolEvent[] = [];
      for (let seq = after + 1; seq <= last && out.length < limit; seq++)
        out.push({ seq, ts: 0, type: 'trajectory_created', channel: null, data: {} });
      return out;
    },
  });

  it.each([0, 1, 2, 1023, 1024, 1025, 4096, 123_457])(
    'finds the last seq of a log of %i events',
    async (last) => {
      expect(await logEnd(log(last))).toBe(last);
    },
  );
});

describe('stepSpan content (opt-in)', () => {
  const source = { resource: resourceFromAttributes({}), scope: { name: 'stepwise' }, content: true };
  const call = (messages: { role: string; content: string }[]): StoredCall => ({
    step: {
      ...newStep({ trajectoryId: 't', groupId: 'g', index: 0, promptIds: [1, 2], responseIds: [3] }),
      responseText: 'ok',
      finishReason: 'stop',
    },
    channel: 'train',
    kind: 'chat',
    request: { model: 'm', messages },
    origin: { receivedAt: 1000, traceparent: null },
    storedAt: 1010,
    engineKind: 'sim',
    responseId: null,
  });

  it('keeps the latest messages of a long conversation, as valid JSON of bounded size', () => {
    const long = Array.from({ length: 200 }, (_, i) => ({
      role: 'user',
      content: `${i}:${'x'.repeat(5000)}`,
    }));
    const span = stepSpan(source, call(long));
    const text = span.attributes['gen_ai.input.messages'] as string;
    expect(text.length).toBeLessThanOrEqual(32 * 1024);
    const kept = JSON.parse(text) as { parts: { content: string }[] }[];
    expect(kept.length).toBeGreaterThan(0);
    expect(kept.length).toBeLessThan(200);
    expect(kept.at(-1)!.parts[0]!.content.startsWith('199:')).toBe(true);
    // Each text is cut, marked with an ellipsis.
    expect(kept.at(-1)!.parts[0]!.content.length).toBeLessThan(5000);
    expect(kept.at(-1)!.parts[0]!.content.endsWith('…')).toBe(true);
  });

  it('sends no content unless asked', () => {
    const span = stepSpan({ ...source, content: false }, call([{ role: 'user', content: 'secret' }]));
    expect(JSON.stringify(span.attributes)).not.toContain('secret');
  });
});
