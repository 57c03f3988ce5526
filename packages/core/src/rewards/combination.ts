import {
  AGENT_WORD_SOURCES,
  type Signal,
  SignalSource,
  StepwiseError,
  ValidationError,
} from '../domain/index.js';

// The combination language (grammar, precedence, missing inputs): docs/rewards.md#combinations.
// The text is tokenized and parsed here; nothing is ever evaluated as JavaScript.

export const MAX_EXPRESSION_CHARS = 2_000;
const MAX_DEPTH = 64;

export interface SignalRef {
  name: string;
  source: SignalSource | null;
}

export type CombinationNode =
  | { kind: 'number'; value: number }
  | { kind: 'signal'; ref: SignalRef }
  | { kind: 'negate'; operand: CombinationNode }
  | { kind: 'binary'; op: '+' | '-' | '*' | '/'; left: CombinationNode; right: CombinationNode }
  | { kind: 'coalesce'; left: CombinationNode; right: CombinationNode }
  | { kind: 'extreme'; fn: 'min' | 'max'; args: CombinationNode[] }
  | { kind: 'aggregate'; fn: 'mean' | 'sum' | 'count'; ref: SignalRef };

export interface Combination {
  text: string;
  root: CombinationNode;
  /** Every signal name the expression reads. */
  names: string[];
}

/** A syntax error: names the expression's field and the 1-based character where it went wrong. */
export class CombinationSyntaxError extends ValidationError {
  constructor(
    message: string,
    readonly position: number,
    field = 'combination',
  ) {
    super(`${field}: ${message} at character ${position}`, field);
  }
}

/** The expression cannot be computed from these inputs (division by zero, non-finite). */
export class CombinationEvalError extends StepwiseError {
  override readonly name = 'CombinationEvalError';
  constructor(message: string) {
    super(message, 422, 'combination_failed');
  }
}

type Token =
  | { type: 'number'; value: number; at: number }
  | { type: 'name'; name: string; source: SignalSource | null; quoted: boolean; at: number }
  | { type: 'op'; op: '+' | '-' | '*' | '/' | '(' | ')' | ',' | '??'; at: number }
  | { type: 'end'; at: number };

const NUMBER = /^(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?/;
const NAME = /^[A-Za-z_][A-Za-z0-9_.]*/;
const EXTREMES = new Set(['min', 'max']);
const AGGREGATES = new Set(['mean', 'sum', 'count']);

function tokenize(text: string, field: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  const fail = (why: string, at = i): never => {
    throw new CombinationSyntaxError(why, at + 1, field);
  };
  const quoted = (): string => {
    const end = text.indexOf('"', i + 1);
    if (end < 0) fail('unterminated quoted name');
    const name = text.slice(i + 1, end);
    if (name === '' || name.length > 128) fail('a quoted name must have 1 to 128 characters');
    i = end + 1;
    return name;
  };
  while (i < text.length) {
    const c = text[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const at = i;
    const rest = text.slice(i);
    const number = NUMBER.exec(rest);
    if (number) {
      const value = Number(number[0]);
      if (!Number.isFinite(value)) fail(`number ${number[0]} is out of range`);
      tokens.push({ type: 'number', value, at });
      i += number[0].length;
      if (NAME.test(text.slice(i))) fail('a number must be followed by an operator');
      continue;
    }
    if (c === '"') {
      tokens.push({ type: 'name', name: quoted(), source: null, quoted: true, at });
      continue;
    }
    const name = NAME.exec(rest);
    if (name) {
      i += name[0].length;
      const source = SignalSource.safeParse(name[0]);
      if (text[i] === ':' && source.success) {
        i++;
        if (text[i] === '"') {
          tokens.push({ type: 'name', name: quoted(), source: source.data, quoted: true, at });
          continue;
        }
        const qualified = NAME.exec(text.slice(i));
        if (!qualified) fail(`expected a signal name after "${name[0]}:"`);
        i += qualified![0].length;
        tokens.push({ type: 'name', name: qualified![0], source: source.data, quoted: false, at });
        continue;
      }
      if (text[i] === ':') fail(`"${name[0]}" is not a signal source (${SignalSource.options.join(', ')})`);
      tokens.push({ type: 'name', name: name[0], source: null, quoted: false, at });
      continue;
    }
    if (rest.startsWith('??')) {
      tokens.push({ type: 'op', op: '??', at });
      i += 2;
      continue;
    }
    if ('+-*/(),'.includes(c)) {
      tokens.push({ type: 'op', op: c as '+', at });
      i++;
      continue;
    }
    fail(`unexpected character ${JSON.stringify(c)}`);
  }
  tokens.push({ type: 'end', at: text.length });
  return tokens;
}

function describe(token: Token): string {
  if (token.type === 'end') return 'the end of the expression';
  if (token.type === 'number') return `number ${token.value}`;
  if (token.type === 'name') return `name ${JSON.stringify(token.name)}`;
  return `"${token.op}"`;
}

/** Parses a combination; a CombinationSyntaxError names `field` and the character at fault. */
export function parseCombination(text: string, field = 'combination'): Combination {
  if (text.length > MAX_EXPRESSION_CHARS) {
    throw new ValidationError(`${field}: must be at most ${MAX_EXPRESSION_CHARS} characters`, field);
  }
  const parser = new Parser(tokenize(text, field), field);
  const root = parser.expr();
  if (parser.peek().type !== 'end') parser.fail(`unexpected ${describe(parser.peek())}`);
  return { text, root, names: [...parser.names] };
}

/** Recursive descent over the tokens: `??` binds loosest, then `+ -`, then `* /`, then unary `-`. */
class Parser {
  private pos = 0;
  private depth = 0;
  readonly names = new Set<string>();

  constructor(
    private readonly tokens: Token[],
    private readonly field: string,
  ) {}

  peek(): Token {
    return this.tokens[this.pos]!;
  }

  fail(why: string, token = this.peek()): never {
    throw new CombinationSyntaxError(why, token.at + 1, this.field);
  }

  private isOp(op: string): boolean {
    const t = this.peek();
    return t.type === 'op' && t.op === op;
  }

  private expect(op: string): void {
    if (!this.isOp(op)) this.fail(`expected "${op}" but found ${describe(this.peek())}`);
    this.pos++;
  }

  private nested<T>(fn: () => T): T {
    if (++this.depth > MAX_DEPTH) this.fail(`nested deeper than ${MAX_DEPTH} levels`);
    try {
      return fn();
    } finally {
      this.depth--;
    }
  }

  expr(): CombinationNode {
    return this.nested(() => {
      let left = this.additive();
      while (this.isOp('??')) {
        this.pos++;
        left = { kind: 'coalesce', left, right: this.additive() };
      }
      return left;
    });
  }

  private additive(): CombinationNode {
    let left = this.product();
    for (;;) {
      const t = this.peek();
      if (t.type !== 'op' || (t.op !== '+' && t.op !== '-')) return left;
      this.pos++;
      left = { kind: 'binary', op: t.op, left, right: this.product() };
    }
  }

  private product(): CombinationNode {
    let left = this.unary();
    for (;;) {
      const t = this.peek();
      if (t.type !== 'op' || (t.op !== '*' && t.op !== '/')) return left;
      this.pos++;
      left = { kind: 'binary', op: t.op, left, right: this.unary() };
    }
  }

  private unary(): CombinationNode {
    return this.nested(() => {
      if (this.isOp('-')) {
        this.pos++;
        return { kind: 'negate', operand: this.unary() };
      }
      return this.primary();
    });
  }

  private signalRef(t: Extract<Token, { type: 'name' }>): SignalRef {
    this.names.add(t.name);
    return { name: t.name, source: t.source };
  }

  private primary(): CombinationNode {
    const t = this.peek();
    if (t.type === 'number') {
      this.pos++;
      return { kind: 'number', value: t.value };
    }
    if (t.type === 'op' && t.op === '(') {
      this.pos++;
      const inner = this.expr();
      this.expect(')');
      return inner;
    }
    if (t.type === 'name') {
      this.pos++;
      const next = this.peek();
      if (t.quoted || t.source !== null || next.type !== 'op' || next.op !== '(') {
        return { kind: 'signal', ref: this.signalRef(t) };
      }
      this.pos++;
      return this.call(t);
    }
    return this.fail(`expected a number, a signal name or "(" but found ${describe(t)}`);
  }

  /** A function call, its "(" read. */
  private call(t: Extract<Token, { type: 'name' }>): CombinationNode {
    if (EXTREMES.has(t.name)) {
      const args = [this.expr()];
      while (this.isOp(',')) {
        this.pos++;
        args.push(this.expr());
      }
      this.expect(')');
      return { kind: 'extreme', fn: t.name as 'min' | 'max', args };
    }
    if (AGGREGATES.has(t.name)) {
      const arg = this.peek();
      if (arg.type !== 'name') this.fail(`${t.name}() takes one signal name, found ${describe(arg)}`);
      this.pos++;
      this.expect(')');
      return {
        kind: 'aggregate',
        fn: t.name as 'mean',
        ref: this.signalRef(arg as Extract<Token, { type: 'name' }>),
      };
    }
    return this.fail(`unknown function "${t.name}" (functions: min, max, mean, sum, count)`, t);
  }
}

function refLabel(ref: SignalRef): string {
  return ref.source ? `${ref.source}:${ref.name}` : ref.name;
}

/** Signal names the expression cannot do without (outside the left of `??`, `sum` and `count`). */
export function requiredSignalNames(combination: Combination): string[] {
  const required = new Set<string>();
  const walk = (node: CombinationNode): void => {
    switch (node.kind) {
      case 'signal':
        required.add(refLabel(node.ref));
        return;
      case 'aggregate':
        if (node.fn === 'mean') required.add(refLabel(node.ref));
        return;
      case 'negate':
        walk(node.operand);
        return;
      case 'binary':
        walk(node.left);
        walk(node.right);
        return;
      case 'extreme':
        node.args.forEach(walk);
        return;
      case 'coalesce':
        // Both sides may be missing only if the right one is: what the right needs is required.
        walk(node.right);
        return;
      case 'number':
        return;
    }
  };
  walk(combination.root);
  return [...required];
}

export type Evaluation =
  | { ok: true; value: number; inputs: Record<string, number> }
  | { ok: false; missing: string[] };

/** Computes the combination from a trajectory's current signals. */
export function evaluateCombination(combination: Combination, signals: readonly Signal[]): Evaluation {
  const byName = new Map<string, Signal[]>();
  for (const s of signals) {
    const list = byName.get(s.name);
    if (list) list.push(s);
    else byName.set(s.name, [s]);
  }
  const matching = (ref: SignalRef) =>
    (byName.get(ref.name) ?? []).filter((s) =>
      ref.source === null ? !AGENT_WORD_SOURCES.includes(s.source) : s.source === ref.source,
    );
  const inputs: Record<string, number> = {};

  // null: some input is missing (named in `missing`).
  const evaluate = (node: CombinationNode, missing: Set<string>): number | null => {
    switch (node.kind) {
      case 'number':
        return node.value;
      case 'signal': {
        const label = refLabel(node.ref);
        const found = matching(node.ref).filter((s) => s.stepIndex === null);
        if (found.length === 0) {
          missing.add(label);
          return null;
        }
        // Latest by time; the history is oldest-first, so the last of equal times wins.
        const latest = found.reduce((a, b) => (b.createdAt >= a.createdAt ? b : a));
        inputs[label] = latest.value;
        return latest.value;
      }
      case 'aggregate': {
        const label = `${node.fn}(${refLabel(node.ref)})`;
        const values = matching(node.ref).map((s) => s.value);
        let value: number;
        if (node.fn === 'count') value = values.length;
        else if (node.fn === 'sum') value = values.reduce((a, b) => a + b, 0);
        else {
          if (values.length === 0) {
            missing.add(refLabel(node.ref));
            return null;
          }
          value = values.reduce((a, b) => a + b, 0) / values.length;
        }
        inputs[label] = value;
        return value;
      }
      case 'negate': {
        const v = evaluate(node.operand, missing);
        return v === null ? null : -v;
      }
      case 'binary': {
        const l = evaluate(node.left, missing);
        const r = evaluate(node.right, missing);
        if (l === null || r === null) return null;
        if (node.op === '+') return l + r;
        if (node.op === '-') return l - r;
        if (node.op === '*') return l * r;
        if (r === 0)
          throw new CombinationEvalError(`division by zero in ${JSON.stringify(combination.text)}`);
        return l / r;
      }
      case 'extreme': {
        const values = node.args.map((a) => evaluate(a, missing));
        if (values.some((v) => v === null)) return null;
        return node.fn === 'min' ? Math.min(...(values as number[])) : Math.max(...(values as number[]));
      }
      case 'coalesce': {
        const left = evaluate(node.left, new Set());
        return left !== null ? left : evaluate(node.right, missing);
      }
    }
  };

  const missing = new Set<string>();
  const value = evaluate(combination.root, missing);
  if (value === null) return { ok: false, missing: [...missing] };
  if (!Number.isFinite(value)) {
    throw new CombinationEvalError(`${JSON.stringify(combination.text)} is not a finite number (${value})`);
  }
  return { ok: true, value, inputs };
}
