import { describe, expect, it } from 'vitest';
import {
  callSimilarity,
  initialSaarState,
  onRegenerated,
  onToolResults,
  retryNote,
  SaarSession,
  type SaarToolCall,
  type SaarTurn,
  toolCallText,
} from '../packages/core/src/curation/cleaner/saar.js';
import { sequenceRatio } from '../packages/core/src/curation/cleaner/sequence-matcher.js';
import { ValidationError } from '../packages/core/src/domain/errors.js';
import { renderToolCalls } from '../packages/core/src/text/tool-calls.js';
import { seededRandom } from '../packages/core/src/util/random.js';

/* SAAR's rules one by one, on the pure state machine (no model, no tools). */

const call = (name: string, args: Record<string, unknown>): SaarToolCall => ({
  name,
  arguments: JSON.stringify(args),
});
const turn = (reasoning: string | null, ...calls: SaarToolCall[]): SaarTurn => ({ reasoning, calls });
const FAIL = [{ ok: false, errorType: 'not_found' }];
const OK = [{ ok: true }];
const always = () => 0;

const readWrong = turn('I will read the input.', call('read', { path: 'input/numbers.txt_wrong' }));
const readRight = turn('Retrying with the right path.', call('read', { path: 'input/numbers.txt' }));
const somethingElse = turn(
  'Another way: list the directory first.',
  call('exec', {
    command:
      'python3 - <<EOF\nimport csv, statistics\nrows = list(csv.DictReader(open("data/sales.csv")))\nprint(statistics.mean(float(r["amount"]) for r in rows))\nEOF',
  }),
);

describe('the similarity SAAR compares', () => {
  it('is difflib ratio over the calls as a Qwen3 model writes them, blind to the JSON serializer', () => {
    expect(toolCallText([call('read', { path: 'a', n: [1, 2] })])).toBe(
      '<tool_call>\n{"name": "read", "arguments": {"path": "a", "n": [1, 2]}}\n</tool_call>',
    );
    // The same text the chat template renders for the turn.
    const calls = [call('ls', {}), call('write', { path: 'b', content: 'é\n"x"' })];
    expect(toolCallText(calls)).toBe(
      renderToolCalls(calls.map((c) => ({ function: { name: c.name, arguments: c.arguments } }))),
    );
    expect(toolCallText([{ name: 'read', arguments: '{ "path" :  "a" }' }])).toBe(
      toolCallText([call('read', { path: 'a' })]),
    );
    // Arguments that are not a JSON object are compared as written.
    expect(toolCallText([{ name: 'exec', arguments: '{"command": "ls' }])).toBe(
      '<tool_call>\n{"name": "exec", "arguments": {"command": "ls}\n</tool_call>',
    );
    // The authors compare `decode(response_ids[boundary:])`: the segment ends with the EOS id.
    expect(callSimilarity(readWrong, readRight)).toBe(
      sequenceRatio(
        '<tool_call>\n{"name": "read", "arguments": {"path": "input/numbers.txt_wrong"}}\n</tool_call><|im_end|>',
        '<tool_call>\n{"name": "read", "arguments": {"path": "input/numbers.txt"}}\n</tool_call><|im_end|>',
      ),
    );
    // A decoded segment given with the turn is compared as it is.
    expect(callSimilarity({ ...readWrong, callText: 'abcd' }, { ...readRight, callText: 'abce' })).toBe(0.75);
  });
});

describe('SAAR', () => {
  it('a failed call rolls back; a close regeneration is a shallow repair: P + K′', () => {
    const saar = new SaarSession({}, always);
    expect(saar.toolResults(FAIL)).toEqual({ kind: 'rollback', retry: 1, errorTypes: ['not_found'] });
    const sim = callSimilarity(readWrong, readRight);
    expect(sim).toBeGreaterThanOrEqual(0.5);
    expect(saar.regenerated(readWrong, readRight)).toEqual({
      kind: 'replace',
      mode: 'shallow',
      similarity: sim,
      turn: { reasoning: readWrong.reasoning, calls: readRight.calls },
      removedErrorTypes: ['not_found'],
    });
    expect(saar.toolResults(OK)).toEqual({ kind: 'keep', recovered: true });
    expect(saar.finish()).toMatchObject({
      rollbacksTriggered: 1,
      recovered: 1,
      failed: 0,
      shallow: 1,
      deep: 0,
      removedErrorTypes: { not_found: 1 },
      attempts: 2,
      enabled: true,
    });
  });

  it('a distant regeneration is a deep repair: P′ + K′', () => {
    const saar = new SaarSession({}, always);
    saar.toolResults(FAIL);
    const sim = callSimilarity(readWrong, somethingElse);
    expect(sim).toBeLessThan(0.5);
    const decision = saar.regenerated(readWrong, somethingElse);
    expect(decision).toMatchObject({ kind: 'replace', mode: 'deep', similarity: sim, turn: somethingElse });
    expect(saar.finish()).toMatchObject({ shallow: 0, deep: 1 });
  });

  it('the threshold is inclusive: sim == threshold is shallow, just above it is deep', () => {
    const sim = callSimilarity(readWrong, readRight);
    for (const [threshold, mode] of [
      [sim, 'shallow'],
      [Math.min(1, sim + 1e-9), 'deep'],
    ] as const) {
      const saar = new SaarSession({ threshold }, always);
      saar.toolResults(FAIL);
      expect(saar.regenerated(readWrong, readRight)).toMatchObject({ mode });
    }
  });

  it('a regeneration without a tool call keeps the error and turns rollback off for the trajectory', () => {
    const saar = new SaarSession({}, always);
    saar.toolResults(FAIL);
    expect(saar.regenerated(readWrong, turn('I give up.'))).toEqual({ kind: 'keep_error' });
    // A later failure is kept as it is: no rollback any more.
    expect(saar.toolResults(OK)).toEqual({ kind: 'keep', recovered: false });
    expect(saar.toolResults(FAIL)).toEqual({ kind: 'keep', recovered: false });
    expect(saar.finish()).toMatchObject({
      rollbacksTriggered: 1,
      recovered: 0,
      failed: 1,
      enabled: false,
      disabledBy: 'no_tool_call',
    });
  });

  it('three rollbacks per turn, then the error stays with the note naming N; rollback is off after', () => {
    const saar = new SaarSession({}, always);
    let current = readWrong;
    for (let retry = 1; retry <= 3; retry++) {
      expect(saar.toolResults(FAIL)).toEqual({ kind: 'rollback', retry, errorTypes: ['not_found'] });
      const next = turn(`try ${retry}`, call('read', { path: `input/numbers.txt_${retry}` }));
      const d = saar.regenerated(current, next);
      if (d.kind !== 'replace') throw new Error('expected a repair');
      current = d.turn;
    }
    expect(saar.toolResults(FAIL)).toEqual({ kind: 'give_up', retries: 3, note: retryNote(3) });
    expect(retryNote(3)).toBe(
      'Note: This approach has been attempted 3 times with the same type of error. Consider trying a different algorithm, method, or approach to solve this problem.',
    );
    // The next turn's failure is not rolled back (the authors' loop turns rollback off here).
    expect(saar.toolResults(FAIL)).toEqual({ kind: 'keep', recovered: false });
    expect(saar.finish()).toMatchObject({
      rollbacksTriggered: 1,
      recovered: 0,
      failed: 1,
      shallow: 3,
      removedErrorTypes: { not_found: 3 },
      attempts: 5,
      disabledBy: 'max_retries',
    });
  });

  it('the note comes only from N >= 2', () => {
    for (const [maxRetries, note] of [
      [1, null],
      [2, retryNote(2)],
    ] as const) {
      const saar = new SaarSession({ maxRetries }, always);
      for (let retry = 1; retry <= maxRetries; retry++) {
        saar.toolResults(FAIL);
        saar.regenerated(readWrong, readRight);
      }
      expect(saar.toolResults(FAIL)).toEqual({ kind: 'give_up', retries: maxRetries, note });
    }
  });

  it('each turn has its own retry count', () => {
    const saar = new SaarSession({}, always);
    for (let t = 0; t < 5; t++) {
      expect(saar.toolResults(FAIL)).toMatchObject({ kind: 'rollback', retry: 1 });
      saar.regenerated(readWrong, readRight);
      expect(saar.toolResults(OK)).toEqual({ kind: 'keep', recovered: true });
    }
    expect(saar.finish()).toMatchObject({ rollbacksTriggered: 5, recovered: 5, failed: 0 });
  });

  it('after 30 tool attempts nothing rolls back; the 30th still does', () => {
    const at30 = new SaarSession({}, always);
    for (let i = 0; i < 29; i++) at30.toolResults(OK);
    expect(at30.toolResults(FAIL)).toMatchObject({ kind: 'rollback' });

    const at31 = new SaarSession({}, always);
    for (let i = 0; i < 30; i++) at31.toolResults(OK);
    expect(at31.toolResults(FAIL)).toEqual({ kind: 'keep', recovered: false });
    expect(at31.finish()).toMatchObject({ attempts: 31, rollbacksTriggered: 0, disabledBy: 'max_attempts' });

    // A repaired turn whose retry lands past the cap: its error stays and the rollback counts as failed.
    const mid = new SaarSession({ maxAttempts: 1 }, always);
    mid.toolResults(FAIL);
    mid.regenerated(readWrong, readRight);
    expect(mid.toolResults(FAIL)).toEqual({ kind: 'give_up', retries: 1, note: null });
    expect(mid.finish()).toMatchObject({ rollbacksTriggered: 1, failed: 1, disabledBy: 'max_attempts' });
    // The cap reached mid-chain after two rollbacks: the authors' loop still appends the note (N = 2).
    const deep = new SaarSession({ maxAttempts: 2 }, always);
    deep.toolResults(FAIL);
    deep.regenerated(readWrong, readRight);
    deep.toolResults(FAIL);
    deep.regenerated(readWrong, readRight);
    expect(deep.toolResults(FAIL)).toEqual({ kind: 'give_up', retries: 2, note: retryNote(2) });
    expect(deep.finish()).toMatchObject({ rollbacksTriggered: 1, failed: 1, disabledBy: 'max_attempts' });
  });

  it('p = 0 never rolls back, whatever the draw', () => {
    const saar = new SaarSession({ p: 0 }, always);
    expect(saar.toolResults(FAIL)).toEqual({ kind: 'keep', recovered: false });
    expect(saar.finish()).toMatchObject({ rollbacksTriggered: 0, enabled: false, disabledBy: 'p' });
    // And p = 1 always does, even at the top of the draw's range.
    expect(new SaarSession({ p: 1 }, () => 0.999999).toolResults(FAIL)).toMatchObject({ kind: 'rollback' });
  });

  it('p is drawn once per trajectory from the seeded random source', () => {
    const on = (seed: number) => initialSaarState({ p: 0.3 }, seededRandom('cleaner', seed)).enabled;
    const draws = Array.from({ length: 2000 }, (_, seed) => on(seed));
    // The same seed gives the same decision; the share of trajectories with rollback is about p.
    expect(Array.from({ length: 2000 }, (_, seed) => on(seed))).toEqual(draws);
    const share = draws.filter(Boolean).length / draws.length;
    expect(share).toBeGreaterThan(0.26);
    expect(share).toBeLessThan(0.34);
    // Exactly one draw, compared with p: the decision is the first number's.
    for (let seed = 0; seed < 50; seed++) expect(on(seed)).toBe(seededRandom('cleaner', seed)() < 0.3);
  });

  it('the pure functions do not mutate the state they are given', () => {
    const s0 = initialSaarState({}, always);
    const copy = structuredClone(s0);
    const { state: s1 } = onToolResults(s0, FAIL);
    onRegenerated(s1, readWrong, readRight);
    expect(s0).toEqual(copy);
  });

  it('refuses a regeneration nobody asked for, and options out of range', () => {
    expect(() => onRegenerated(initialSaarState({}, always), readWrong, readRight)).toThrow(/no rollback/);
    expect(() => new SaarSession({ p: 1.5 }, always)).toThrow(ValidationError);
    expect(() => new SaarSession({ p: 1.5 }, always)).toThrow(/cleaner\.p/);
    expect(() => new SaarSession({ maxRetries: 1.5 }, always)).toThrow(/maxRetries/);
  });
});
