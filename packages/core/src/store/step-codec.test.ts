import { describe, expect, it } from 'vitest';
import { makeStep } from '../../../../test/support/steps.js';
import type { NewStep } from '../domain/index.js';
import { decodeSteps, encodeStep, type StepRow, type StepTail, TailCache } from './step-codec.js';

function step(
  index: number,
  promptIds: number[],
  responseIds: number[],
  extra: Partial<NewStep> = {},
): NewStep {
  return makeStep('t1', 'g1', index, promptIds, responseIds, { policyVersion: 0, ...extra });
}

function encodeAll(steps: NewStep[]): { rows: StepRow[]; breaks: number; docs: Map<string, string> } {
  let tail: StepTail | null = null;
  const rows: StepRow[] = [];
  const docs = new Map<string, string>();
  let breaks = 0;
  for (const s of steps) {
    const encoded = encodeStep(s, s.index, 'train', 0, tail, 1000);
    rows.push(encoded.row);
    if (encoded.toolsDoc) docs.set(encoded.toolsDoc.hash, encoded.toolsDoc.body);
    if (encoded.prefixBreak) breaks++;
    tail = encoded.tail;
  }
  return { rows, breaks, docs };
}

describe('step codec', () => {
  it('stores only the suffix of a prompt that extends the previous sequence, and reads full arrays back', () => {
    const steps = [
      step(0, [1, 2, 3], [4, 5]),
      step(1, [1, 2, 3, 4, 5, 6, 7], [8]),
      step(2, [1, 2, 3, 4, 5, 6, 7, 8, 9], [10]),
    ];
    const { rows, breaks } = encodeAll(steps);
    expect(rows.map((r) => r.prefix_len)).toEqual([0, 5, 8]);
    expect(rows.map((r) => r.prompt_suffix.length / 4)).toEqual([3, 2, 1]);
    expect(breaks).toBe(0);
    const decoded = decodeSteps(rows, () => null).steps;
    expect(decoded.map((s) => s.promptIds)).toEqual(steps.map((s) => s.promptIds));
    expect(decoded.map((s) => s.responseIds)).toEqual(steps.map((s) => s.responseIds));
  });

  it('counts a prefix break when a prompt does not extend the previous full sequence', () => {
    // Step 1 drops the previous response (a template stripped it) and adds fresh context.
    const steps = [step(0, [1, 2, 3], [4, 5]), step(1, [1, 2, 3, 9, 9], [6])];
    const { rows, breaks } = encodeAll(steps);
    expect(breaks).toBe(1);
    expect(rows[1]!.prefix_len).toBe(3);
    expect(decodeSteps(rows, () => null).steps[1]!.promptIds).toEqual([1, 2, 3, 9, 9]);
  });

  it('stores a prompt whole when nothing is shared', () => {
    const { rows } = encodeAll([step(0, [1, 2], [3]), step(1, [7, 7, 7], [8])]);
    expect(rows[0]!.base_idx).toBeNull();
    // The base is still recorded (shared messages refer to it), but no token comes from it.
    expect(rows[1]!.base_idx).toBe(0);
    expect(rows[1]!.prefix_len).toBe(0);
    expect(rows[1]!.prompt_suffix.length).toBe(3 * 4);
    expect(decodeSteps(rows, () => null).steps[1]!.promptIds).toEqual([7, 7, 7]);
  });

  it('keeps messages shared with the base once, and tools by content hash', () => {
    const tools = [{ type: 'function', function: { name: 'read' } }];
    const m0 = [
      { role: 'system', content: 'S' },
      { role: 'user', content: 'U' },
    ];
    const m1 = [...m0, { role: 'assistant', content: 'A' }, { role: 'tool', content: 'T' }];
    const { rows, docs } = encodeAll([
      step(0, [1], [2], { messages: m0, tools }),
      step(1, [1, 2, 3], [4], {
        messages: m1,
        tools,
        toolResults: [{ content: 'T', error: true, error_type: 'exit' }],
      }),
    ]);
    expect(JSON.parse(rows[1]!.view!).m).toHaveLength(2);
    expect(docs.size).toBe(1);
    const decoded = decodeSteps(rows, (h) => JSON.parse(docs.get(h)!)).steps;
    expect(decoded[1]!.messages).toEqual(m1);
    expect(decoded[1]!.tools).toEqual(tools);
    expect(decoded[1]!.toolResults).toEqual([{ content: 'T', error: true, error_type: 'exit' }]);
  });

  it('refuses rows whose base step is missing', () => {
    const { rows } = encodeAll([step(0, [1, 2], [3]), step(1, [1, 2, 3, 4], [5])]);
    expect(() => decodeSteps([rows[1]!], () => null)).toThrow(/missing base step/);
  });
});

describe('tail cache', () => {
  it('evicts least recently used tails beyond its token budget and never goes back to an older tail', () => {
    const cache = new TailCache(10);
    const tail = (index: number, n: number): StepTail => ({
      index,
      full: new Uint32Array(n),
      messages: null,
    });
    cache.set('a', tail(0, 4));
    cache.set('b', tail(0, 4));
    cache.get('a');
    cache.set('c', tail(0, 4));
    expect(cache.get('b')).toBeUndefined();
    expect(cache.get('a')?.index).toBe(0);
    cache.set('a', tail(3, 2));
    cache.set('a', tail(1, 2));
    expect(cache.get('a')?.index).toBe(3);
  });
});
