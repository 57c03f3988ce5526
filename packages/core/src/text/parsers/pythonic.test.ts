import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { sequentialToolCallIds } from '../tool-calls.js';
import { parsePythonicToolCalls, pythonFloatRepr } from './pythonic.js';

/*
 * The corners of Python's literal syntax and of vLLM's shape check, each with what vLLM's steps give
 * when Python runs them (test/support/pythonic_reference.py wrote the expected values).
 */

interface EdgeCase {
  text: string;
  expected: { content: string | null; tool_calls: { name: string; arguments: string }[] };
}

const EDGE_CASES = (
  JSON.parse(
    readFileSync(
      new URL('../../../../../test/fixtures/models/pythonic-edge-cases.json', import.meta.url),
      'utf8',
    ),
  ) as { cases: EdgeCase[] }
).cases;

describe('pythonic tool calls, as vLLM reads them with Python', () => {
  it.each(EDGE_CASES.map((c) => [JSON.stringify(c.text), c] as const))('%s', (_, c) => {
    const parsed = parsePythonicToolCalls(c.text, { newToolCallId: sequentialToolCallIds() });
    expect(parsed.toolCalls.map((t) => t.function)).toEqual(c.expected.tool_calls);
    expect(parsed.content).toBe(c.expected.content);
  });

  it('writes floats as Python repr does', () => {
    // Python: repr(1e16), repr(1e15), repr(0.0001), repr(0.00001), repr(1.5), repr(123456789.125)
    expect([1e16, 1e15, 0.0001, 0.00001, 1.5, 123456789.125].map(pythonFloatRepr)).toEqual([
      '1e+16',
      '1000000000000000.0',
      '0.0001',
      '1e-05',
      '1.5',
      '123456789.125',
    ]);
  });
});
