import { spawnSync } from 'node:child_process';
import fc from 'fast-check';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  findLongestMatch,
  type MatchingBlock,
  matchingBlocks,
  sequenceRatio,
} from '../packages/core/src/curation/cleaner/sequence-matcher.js';

/*
 * The port against the real thing: thousands of generated pairs (short ones, long ones that trigger
 * autojunk, small alphabets so that matches happen, non-BMP characters, near-copies, tool calls) are
 * sent to ONE python3 process, which answers difflib's ratio, matching blocks and longest match for
 * each; the floats must be equal, not close.
 */

const PYTHON = process.env.PYTHON ?? 'python3';
const hasPython = spawnSync(PYTHON, ['-c', 'import difflib'], { stdio: 'ignore' }).status === 0;

const PY = `
import difflib, json, sys
pairs = json.load(sys.stdin)
out = []
for a, b in pairs:
    m = difflib.SequenceMatcher(None, a, b)
    plain = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    out.append([m.ratio(), [list(x) for x in m.get_matching_blocks()], list(m.find_longest_match(0, len(a), 0, len(b))), plain])
json.dump(out, sys.stdout)
`;

/** ratio, matching blocks, longest match, and the ratio with autojunk off. */
type PyAnswer = [number, [number, number, number][], [number, number, number], number];

function difflib(pairs: readonly (readonly [string, string])[]): PyAnswer[] {
  const run = spawnSync(PYTHON, ['-c', PY], {
    input: JSON.stringify(pairs),
    maxBuffer: 256 * 1024 * 1024,
    encoding: 'utf8',
  });
  if (run.status !== 0) throw new Error(`python3 failed: ${run.stderr}`);
  return JSON.parse(run.stdout) as PyAnswer[];
}

const triple = (m: MatchingBlock) => [m.i, m.j, m.size];

const small = fc.constantFrom('a', 'b', 'c', ' ', '"', '{', '}');
const mixed = fc.constantFrom('a', 'b', 'é', '😀', '𝒳', '\u0000', '\n', 'ab', '"x"');
const json = fc.constantFrom(
  '{"',
  '": ',
  '"',
  ',',
  'python3',
  ' -c ',
  'print(',
  ')',
  'exec',
  'path',
  '/',
  '.txt',
);

/** A copy of `s` with a few characters changed, dropped or inserted: pairs that are mostly equal. */
const nearCopy = (s: fc.Arbitrary<string>, unit: fc.Arbitrary<string>) =>
  fc
    .tuple(s, fc.array(fc.tuple(fc.nat(), fc.nat(2), unit), { maxLength: 8 }))
    .map(([a, edits]): [string, string] => {
      const b = Array.from(a);
      for (const [pos, op, ch] of edits) {
        const at = b.length === 0 ? 0 : pos % b.length;
        if (op === 0) b.splice(at, 1, ch);
        else if (op === 1) b.splice(at, 1);
        else b.splice(at, 0, ch);
      }
      return [a, b.join('')];
    });

const pair = (unit: fc.Arbitrary<string>, minLength: number, maxLength: number) =>
  fc.tuple(fc.string({ unit, minLength, maxLength }), fc.string({ unit, minLength, maxLength }));

const toolCall = fc
  .tuple(
    fc.constantFrom('exec', 'exec_v2', 'read', 'write'),
    fc.string({ unit: fc.constantFrom('a', 'b', '1', ' ', "'", '\\', '"', '\n', '('), maxLength: 260 }),
  )
  .map(([name, command]) => JSON.stringify({ name, arguments: { command: `python3 -c ${command}` } }));

const cases: [string, string][] = [
  ...fc.sample(pair(small, 0, 12), { numRuns: 1500, seed: 1 }),
  ...fc.sample(pair(small, 200, 500), { numRuns: 400, seed: 2 }),
  ...fc.sample(pair(mixed, 0, 40), { numRuns: 800, seed: 3 }),
  ...fc.sample(pair(mixed, 190, 320), { numRuns: 300, seed: 4 }),
  ...fc.sample(nearCopy(fc.string({ unit: small, minLength: 150, maxLength: 400 }), small), {
    numRuns: 400,
    seed: 5,
  }),
  ...fc.sample(nearCopy(fc.string({ unit: json, maxLength: 120 }), json), { numRuns: 400, seed: 6 }),
  ...fc.sample(fc.tuple(toolCall, toolCall), { numRuns: 400, seed: 7 }),
  // Identical strings, also where autojunk makes every character popular.
  ...fc
    .sample(fc.string({ unit: small, maxLength: 400 }), { numRuns: 200, seed: 8 })
    .map((s): [string, string] => [s, s]),
  ['', ''],
  ['', 'abc'],
  ['abc', ''],
  ['a'.repeat(300), 'a'.repeat(300)],
  ['a'.repeat(300), 'a'.repeat(299)],
  [`x${'a'.repeat(250)}y`, `y${'a'.repeat(250)}x`],
  ['\ud800a', 'a\ud800'],
];

// Real tool calls from a Claw-style episode: a wrong call and its correction.
const realCalls: [string, string][] = [
  [
    '{"name": "exec", "arguments": {"command": "python3 -c \\"print(sum(int(l) for l in open(\'input/numbers.txt\')))\\" > output/sum.txt"}}',
    '{"name": "exec", "arguments": {"command": "mkdir -p output && python3 -c \\"print(sum(int(l) for l in open(\'input/numbers.txt\')))\\" > output/sum.txt"}}',
  ],
  [
    '{"name": "read", "arguments": {"path": "input/numbers.txt_wrong"}}',
    '{"name": "read", "arguments": {"path": "input/numbers.txt"}}',
  ],
  [
    '{"name": "exec_v2", "arguments": {"command": "ls -la"}}',
    '{"name": "write", "arguments": {"path": "output/info.json", "content": "{\\"name\\": \\"stepwise\\", \\"version\\": 1}\\n"}}',
  ],
  [
    '{"name": "exec", "arguments": {"command": "python3 -c \\"import pandas as pd; df = pd.read_csv(\'data.csv\'); print(df.describe())\\""}}',
    '{"name": "exec", "arguments": {"command": "python3 -c \\"import csv; rows = list(csv.DictReader(open(\'data.csv\'))); print(len(rows))\\""}}',
  ],
];

describe.skipIf(!hasPython)('sequenceRatio is difflib.SequenceMatcher(None, a, b)', () => {
  const all = [...cases, ...realCalls];
  let expected: PyAnswer[];
  beforeAll(() => {
    expected = difflib(all);
  });

  it(`agrees with CPython on ${cases.length + realCalls.length} pairs: ratio, matching blocks, longest match`, () => {
    const mismatches: { a: string; b: string; ours: unknown; python: unknown }[] = [];
    all.forEach(([a, b], k) => {
      const [ratio, blocks, longest] = expected[k]!;
      const ours = {
        ratio: sequenceRatio(a, b),
        blocks: matchingBlocks(a, b).map(triple),
        longest: triple(findLongestMatch(a, b)),
      };
      if (ours.ratio !== ratio || JSON.stringify(ours.blocks) !== JSON.stringify(blocks))
        mismatches.push({ a, b, ours, python: { ratio, blocks, longest } });
      else if (JSON.stringify(ours.longest) !== JSON.stringify(longest))
        mismatches.push({ a, b, ours: ours.longest, python: longest });
    });
    // The shortest failing pair first: the one to debug.
    mismatches.sort((x, y) => x.a.length + x.b.length - (y.a.length + y.b.length));
    expect(mismatches.slice(0, 3)).toEqual([]);
  });

  it('the generated pairs exercise autojunk: difflib without it answers differently for many', () => {
    const changed = all.filter((_, k) => expected[k]![0] !== expected[k]![3]);
    expect(changed.length).toBeGreaterThan(100);
    for (const [, b] of changed) expect(b.length).toBeGreaterThanOrEqual(200);
  });

  it('counts non-BMP characters as one element, as Python does', () => {
    expect(sequenceRatio('😀', '😀x')).toBe((2 * 1) / 3);
    expect(difflib([['😀', '😀x']])[0]![0]).toBe((2 * 1) / 3);
  });
});
