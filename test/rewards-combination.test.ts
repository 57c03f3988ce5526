import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Signal, ValidationError } from '../packages/core/src/domain/index.js';
import {
  CombinationEvalError,
  CombinationSyntaxError,
  evaluateCombination,
  parseCombination,
  requiredSignalNames,
  resolveRewardsConfig,
} from '../packages/core/src/rewards/index.js';

let clock = 0;
function sig(name: string, value: number, extra: Partial<Signal> = {}): Signal {
  return {
    trajectoryId: 't',
    stepIndex: null,
    name,
    value,
    source: 'rule',
    version: '1',
    details: {},
    createdAt: ++clock,
    ...extra,
  };
}

const value = (text: string, signals: Signal[] = []) => {
  const r = evaluateCombination(parseCombination(text), signals);
  if (!r.ok) throw new Error(`missing ${r.missing.join(', ')}`);
  return r.value;
};

describe('combination: grammar and precedence', () => {
  it('follows arithmetic precedence, left to right, with ?? loosest', () => {
    expect(value('1 + 2 * 3')).toBe(7);
    expect(value('(1 + 2) * 3')).toBe(9);
    expect(value('10 - 4 - 3')).toBe(3);
    expect(value('8 / 4 / 2')).toBe(1);
    expect(value('-2 * 3')).toBe(-6);
    expect(value('- -2')).toBe(2);
    expect(value('2 * -3 + 1')).toBe(-5);
    expect(value('1e1 + .5')).toBe(10.5);
    expect(value('missing ?? 1 + 2')).toBe(3); // (missing) ?? (1 + 2)
    expect(value('1 + missing ?? 5')).toBe(5); // (1 + missing) ?? 5
    expect(value('max(1, 2 * 3, 4) - min(3)')).toBe(3);
  });

  it('reads weighted sums of signals, sources, quoted names and step-level aggregates', () => {
    const signals = [
      sig('verifier', 1, { source: 'verifier' }),
      sig('judge', 0.5, { source: 'judge' }),
      sig('odd name-1', 0.25),
      sig('user_feedback', 1, { stepIndex: 0, source: 'human' }),
      sig('user_feedback', -1, { stepIndex: 2, source: 'human' }),
      sig('user_feedback', 1, { stepIndex: 3, source: 'human' }),
    ];
    expect(value('0.7*verifier + 0.3*judge', signals)).toBeCloseTo(0.85);
    expect(value('judge:judge + verifier:verifier', signals)).toBe(1.5);
    expect(value('"odd name-1" * 4', signals)).toBe(1);
    expect(value('mean(user_feedback)', signals)).toBeCloseTo(1 / 3);
    expect(value('sum(human:user_feedback) + count(user_feedback)', signals)).toBe(4);
    expect(value('sum(nothing) + count(nothing)', signals)).toBe(0);
    const r = evaluateCombination(parseCombination('0.8*judge + 0.2*mean(user_feedback)'), signals);
    expect(r).toMatchObject({ ok: true, inputs: { judge: 0.5, 'mean(user_feedback)': 1 / 3 } });
  });

  it('uses the latest trajectory-level signal of a name; step-level ones only through aggregates', () => {
    const signals = [
      sig('judge', 0.25, { source: 'judge' }),
      sig('judge', 0.75, { source: 'rm' }),
      sig('score', 1, { stepIndex: 0 }),
    ];
    expect(value('judge', signals)).toBe(0.75);
    expect(value('judge:judge', signals)).toBe(0.25);
    expect(evaluateCombination(parseCombination('score'), signals)).toEqual({
      ok: false,
      missing: ['score'],
    });
    expect(value('mean(score)', signals)).toBe(1);
  });

  it("leaves the agent's own signals out of bare names and aggregates; `agent:` names them", () => {
    const signals = [
      sig('score', 0, { source: 'verifier' }),
      sig('score', 1, { source: 'agent' }),
      sig('done', 1, { source: 'agent' }),
      sig('ok', 1, { stepIndex: 0, source: 'agent' }),
    ];
    expect(value('score', signals)).toBe(0);
    expect(value('agent:score', signals)).toBe(1);
    expect(value('count(ok)', signals)).toBe(0);
    expect(evaluateCombination(parseCombination('done'), signals)).toEqual({ ok: false, missing: ['done'] });
    expect(value('agent:done', signals)).toBe(1);
  });

  it("counts online sessions' implicit feedback (source `user`) only where a channel's combination names `user:`", () => {
    const signals = [
      sig('user_feedback', 1, { stepIndex: 0, source: 'user' }),
      sig('user_feedback', 1, { stepIndex: 1, source: 'user' }),
      sig('user_feedback', -1, { stepIndex: 1, source: 'human' }),
    ];
    // docs/rewards.md's suggested expression reads people's verdicts, not what the agent's harness sent.
    expect(value('(mean(user_feedback) + 1) / 2 ?? 0.5', signals)).toBe(0);
    expect(value('(mean(user:user_feedback) + 1) / 2 ?? 0.5', signals)).toBe(1);
    expect(value('(mean(user_feedback) + 1) / 2 ?? 0.5', signals.slice(0, 2))).toBe(0.5);
  });

  it('never turns a missing input into 0: the result waits, unless ?? says what to use', () => {
    const signals = [sig('verifier', 1)];
    expect(evaluateCombination(parseCombination('0.7*verifier + 0.3*judge'), signals)).toEqual({
      ok: false,
      missing: ['judge'],
    });
    expect(evaluateCombination(parseCombination('min(a, b) + mean(c)'), [])).toEqual({
      ok: false,
      missing: ['a', 'b', 'c'],
    });
    expect(value('0.7*verifier + 0.3*(judge ?? 0)', signals)).toBeCloseTo(0.7);
    expect(value('judge ?? rm ?? verifier', signals)).toBe(1);
    expect(
      requiredSignalNames(parseCombination('0.7*verifier + 0.3*(judge ?? rm) + sum(fb) + mean(x)')),
    ).toEqual(['verifier', 'rm', 'x']);
  });

  it('refuses division by zero and non-finite results', () => {
    expect(() => value('1 / (a - a)', [sig('a', 2)])).toThrow(CombinationEvalError);
    expect(() => value('1e308 * 10')).toThrow(CombinationEvalError);
  });
});

describe('combination: bad input', () => {
  const syntax = (text: string) => {
    try {
      parseCombination(text, 'channels.train.combination');
    } catch (error) {
      expect(error).toBeInstanceOf(ValidationError);
      expect((error as ValidationError).field).toBe('channels.train.combination');
      return (error as ValidationError).message;
    }
    throw new Error(`accepted ${text}`);
  };

  it('names the field, the problem and the character', () => {
    expect(syntax('0.7*')).toBe(
      'channels.train.combination: expected a number, a signal name or "(" but found the end of the expression at character 5',
    );
    expect(syntax('0.7 verifier')).toMatch(/unexpected name "verifier" at character 5/);
    expect(syntax('0.7verifier')).toMatch(/a number must be followed by an operator/);
    expect(syntax('a +* b')).toMatch(/found "\*" at character 4/);
    expect(syntax('(a + b')).toMatch(/expected "\)"/);
    expect(syntax('a + b)')).toMatch(/unexpected "\)" at character 6/);
    expect(syntax('')).toMatch(/found the end/);
    expect(syntax('a ? b')).toMatch(/unexpected character "\?"/);
    expect(syntax('a; b')).toMatch(/unexpected character ";"/);
    expect(syntax('"unterminated')).toMatch(/unterminated quoted name/);
    expect(syntax('team:judge')).toMatch(/"team" is not a signal source/);
    expect(syntax('judge:')).toMatch(/expected a signal name after "judge:"/);
    expect(syntax('mean(1)')).toMatch(/mean\(\) takes one signal name/);
    expect(syntax('mean(a, b)')).toMatch(/expected "\)"/);
    expect(syntax('min()')).toMatch(/expected a number/);
    expect(syntax(`${'('.repeat(100)}1${')'.repeat(100)}`)).toMatch(/nested deeper than 64 levels/);
    expect(syntax(`${'a + '.repeat(600)}a`)).toMatch(/at most 2000 characters/);
    expect(syntax(`1${'0'.repeat(400)}`)).toMatch(/out of range/);
  });

  it('is never evaluated as JavaScript', () => {
    // Calls of anything but the five functions are refused; names are only looked up among signals.
    expect(syntax('process.exit(1)')).toMatch(/unknown function "process.exit"/);
    expect(syntax('require("fs")')).toMatch(/unknown function "require"/);
    expect(syntax('constructor.constructor("return 1")()')).toMatch(
      /unknown function "constructor.constructor"/,
    );
    expect(syntax('this["x"]')).toMatch(/unexpected character "\["/);
    expect(syntax('`1`')).toMatch(/unexpected character "`"/);
    expect(syntax('a => a')).toMatch(/unexpected character "="/);
    for (const name of ['constructor', '__proto__', 'toString', 'globalThis', 'process']) {
      expect(evaluateCombination(parseCombination(name), [])).toEqual({ ok: false, missing: [name] });
    }
    expect(value('__proto__ + constructor', [sig('__proto__', 1), sig('constructor', 2)])).toBe(3);
  });

  it('any text either parses or fails with a ValidationError; parsed ones evaluate or wait', () => {
    const alphabet = fc.constantFrom(...'ab1.2+-*/()?, "e:judge min max mean'.split(''));
    fc.assert(
      fc.property(
        fc.array(alphabet, { maxLength: 40 }).map((cs) => cs.join('')),
        (text) => {
          let parsed: ReturnType<typeof parseCombination>;
          try {
            parsed = parseCombination(text);
          } catch (error) {
            expect(error).toBeInstanceOf(ValidationError);
            return;
          }
          try {
            const r = evaluateCombination(parsed, [sig('a', 1), sig('b', 2)]);
            if (r.ok) expect(Number.isFinite(r.value)).toBe(true);
          } catch (error) {
            expect(error).toBeInstanceOf(CombinationEvalError);
          }
        },
      ),
      { numRuns: 2_000 },
    );
  });

  it('config: a combination must parse, name configured functions only in scorings, and not read its own output', () => {
    const fns = { exact: { plugin: 'rule', params: { kind: 'exact', expected: '1' } } };
    expect(() =>
      resolveRewardsConfig({
        functions: fns,
        channels: { train: { functions: ['exact'], combination: '0.5*exact +' } },
      }),
    ).toThrow(CombinationSyntaxError);
    expect(() =>
      resolveRewardsConfig({
        functions: fns,
        channels: { train: { functions: ['exact'], combination: 'reward + exact' } },
      }),
    ).toThrow(/reads "reward", the signal it writes/);
    expect(() =>
      resolveRewardsConfig({
        functions: fns,
        channels: { train: { combination: { expression: 'exact', signal: 'exact' } } },
      }),
    ).toThrow(/reads "exact", the signal it writes/);
    expect(() =>
      resolveRewardsConfig({ functions: fns, channels: { train: { functions: ['judge'] } } }),
    ).toThrow(/channels\.train\.functions\.0: no function "judge"/);
    const ok = resolveRewardsConfig({
      functions: fns,
      channels: {
        train: {
          functions: ['exact'],
          combination: { expression: '0.5 * exact + 0.5', signal: 'final', write_reward: false },
        },
      },
    });
    const rule = ok.channels.get('train')!.combination!;
    expect(rule).toMatchObject({ signal: 'final', source: 'rule', writeReward: false });
    expect(rule.version).toMatch(/^c-[0-9a-f]{10}$/);
  });
});
