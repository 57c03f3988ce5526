import { StepwiseError } from '../../domain/errors.js';
import type { ParsedCompletion, ParseToolCallsOptions, ToolCall } from '../tool-calls.js';

/*
 * vLLM's `pythonic` tool parser reads a completion that is a Python list of calls,
 * `[get_weather(city="Paris", days=3), ...]`: a regular expression first checks the shape, then
 * Python's own `ast` reads it, and only literal keyword values are accepted. Stepwise has no Python
 * parser, so this module reads the subset of Python such a list can be: string, number, True/False/None
 * literals, lists and dicts of them. Anything else makes the whole completion content, as in vLLM.
 */

/** A Python literal as `ast` reads it; `opaque` is a constant json.dumps cannot write (bytes, complex, ...). */
type PyValue =
  | { t: 'str'; v: string }
  | { t: 'int'; v: string }
  | { t: 'float'; v: number }
  | { t: 'bool'; v: boolean }
  | { t: 'none' }
  | { t: 'opaque' }
  | { t: 'list'; v: PyValue[] }
  | { t: 'dict'; v: [PyValue, PyValue][] };

/** Raised inside the reader when the text is not a list of calls vLLM would accept; never escapes. */
class NotCalls extends StepwiseError {
  override readonly name = 'NotCalls';
  constructor() {
    super('not a list of calls', 400, 'not_calls');
  }
}

interface PyCall {
  name: string;
  nameStart: number;
  open: number;
  close: number;
  /** The first argument when it is `name=value`: its name's start and where its `=` is. */
  firstKeyword?: { start: number; name: string; equals: number };
  keywords: [string, PyValue][];
}

const ESCAPES: Readonly<Record<string, string>> = {
  '\\': '\\',
  "'": "'",
  '"': '"',
  a: '\x07',
  b: '\b',
  f: '\f',
  n: '\n',
  r: '\r',
  t: '\t',
  v: '\v',
};

class PythonReader {
  at = 0;
  // Sticky patterns hold their position (lastIndex), so each reader has its own.
  readonly identifierPattern = /[\p{L}_][\p{L}\p{M}\p{N}_]*/uy;
  // Python's integer (decimal, hex, octal, binary) and float literals, underscores allowed; `j`: complex.
  readonly numberPattern =
    /(?:0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|(?:[0-9](?:_?[0-9])*)?(?:\.(?:[0-9](?:_?[0-9])*)?)?(?:[eE][+-]?[0-9](?:_?[0-9])*)?)([jJ])?/y;
  readonly octalRestPattern = /[0-7]{1,2}/y;
  constructor(readonly text: string) {}

  fail(): never {
    throw new NotCalls();
  }

  /** Whitespace inside brackets (newlines included: Python joins bracketed lines). Comments are not read. */
  skip(): void {
    while (this.at < this.text.length && ' \t\n\r\f'.includes(this.text[this.at]!)) this.at++;
  }

  eat(c: string): boolean {
    if (this.text.startsWith(c, this.at)) {
      this.at += c.length;
      return true;
    }
    return false;
  }

  expect(c: string): void {
    if (!this.eat(c)) this.fail();
  }

  /** The match of a sticky pattern at the reading position, consumed; undefined when none. */
  read(pattern: RegExp): RegExpExecArray | undefined {
    pattern.lastIndex = this.at;
    const m = pattern.exec(this.text);
    if (!m) return undefined;
    this.at += m[0].length;
    return m;
  }

  identifier(): string | undefined {
    return this.read(this.identifierPattern)?.[0];
  }

  /** `[call, call, ...]` and nothing after it but whitespace. */
  callList(): PyCall[] {
    this.expect('[');
    const calls: PyCall[] = [];
    this.skip();
    while (!this.eat(']')) {
      calls.push(this.call());
      this.skip();
      if (this.eat(',')) this.skip();
      else if (!this.text.startsWith(']', this.at)) this.fail();
    }
    this.skip();
    if (this.at !== this.text.length) this.fail();
    return calls;
  }

  call(): PyCall {
    const nameStart = this.at;
    const name = this.identifier();
    if (name === undefined || name === 'True' || name === 'False' || name === 'None') this.fail();
    this.skip();
    const open = this.at;
    this.expect('(');
    const call: PyCall = { name, nameStart, open, close: -1, keywords: [] };
    this.skip();
    while (!this.text.startsWith(')', this.at)) {
      const start = this.at;
      const key = this.identifier();
      this.skip();
      if (key !== undefined && this.text[this.at] === '=' && this.text[this.at + 1] !== '=') {
        if (call.keywords.length === 0 && start === open + 1)
          call.firstKeyword = { start, name: key, equals: this.at };
        this.at++;
        this.skip();
        call.keywords.push([key, this.value()]);
      } else {
        // A positional value: vLLM ignores it, but Python refuses one after a keyword.
        this.at = start;
        if (call.keywords.length > 0) this.fail();
        this.value();
      }
      this.skip();
      if (this.eat(',')) this.skip();
      else if (!this.text.startsWith(')', this.at)) this.fail();
    }
    call.close = this.at;
    this.at++;
    return call;
  }

  value(): PyValue {
    const c = this.text[this.at];
    if (c === '[') {
      this.at++;
      const items: PyValue[] = [];
      this.skip();
      while (!this.eat(']')) {
        items.push(this.value());
        this.skip();
        if (this.eat(',')) this.skip();
        else if (!this.text.startsWith(']', this.at)) this.fail();
      }
      return { t: 'list', v: items };
    }
    if (c === '{') {
      this.at++;
      const entries: [PyValue, PyValue][] = [];
      this.skip();
      while (!this.eat('}')) {
        const key = this.value();
        if (key.t === 'list' || key.t === 'dict') this.fail(); // only constants are accepted as keys
        this.skip();
        this.expect(':');
        this.skip();
        entries.push([key, this.value()]);
        this.skip();
        if (this.eat(',')) this.skip();
        else if (!this.text.startsWith('}', this.at)) this.fail();
      }
      return { t: 'dict', v: entries };
    }
    if (c !== undefined && /[0-9.]/.test(c)) return this.number();
    const start = this.at;
    const word = this.identifier();
    if (word === 'True' || word === 'False') return { t: 'bool', v: word === 'True' };
    if (word === 'None') return { t: 'none' };
    if (word !== undefined && /^[rRuUbBfF]{1,2}$/.test(word) && /['"]/.test(this.text[this.at] ?? '')) {
      this.at = start;
      return this.strings();
    }
    if (word === undefined && (c === '"' || c === "'")) return this.strings();
    if (this.eat('...')) return { t: 'opaque' };
    // A name, a call, an operator (`-1` is an operation in Python's ast): not a literal.
    return this.fail();
  }

  number(): PyValue {
    const m = this.read(this.numberPattern);
    const literal = m?.[0] ?? '';
    if (literal === '' || literal === '.' || /^\.[eE]/.test(literal)) this.fail();
    if (/^[\p{L}\p{N}_]/u.test(this.text[this.at] ?? '')) this.fail();
    if (m?.[1]) return { t: 'opaque' }; // complex
    const plain = literal.replaceAll('_', '');
    if (/^0[xXoObB]/.test(plain)) return { t: 'int', v: BigInt(plain).toString() };
    if (/[.eE]/.test(plain)) return { t: 'float', v: Number(plain) };
    // Python 3 refuses leading zeros on a non-zero decimal integer.
    if (/^0+[1-9]/.test(plain)) this.fail();
    return { t: 'int', v: BigInt(plain).toString() };
  }

  /** One string literal, or several side by side (Python joins them into one constant). */
  strings(): PyValue {
    let out = '';
    let kind: 'str' | 'bytes' | 'fstring' | undefined;
    for (;;) {
      const before = this.at;
      const prefix = /^[rRuUbBfF]{0,2}(?=['"])/.exec(this.text.slice(this.at, this.at + 3))?.[0];
      if (prefix === undefined) {
        this.at = before;
        break;
      }
      const p = prefix.toLowerCase();
      if (!['', 'r', 'u', 'b', 'f', 'rb', 'br', 'fr', 'rf'].includes(p)) this.fail();
      const partKind = p.includes('b') ? 'bytes' : p.includes('f') ? 'fstring' : 'str';
      // Bytes joined with text is a SyntaxError; an f-string makes the whole constant a JoinedStr.
      if (kind !== undefined && (kind === 'bytes') !== (partKind === 'bytes')) this.fail();
      kind = kind === 'fstring' || partKind === 'fstring' ? 'fstring' : partKind;
      this.at += prefix.length;
      out += this.stringBody(p.includes('r'));
      const after = this.at;
      this.skip();
      if (!/^[rRuUbBfF]{0,2}['"]/.test(this.text.slice(this.at, this.at + 3))) {
        this.at = after;
        break;
      }
    }
    return kind === 'str' ? { t: 'str', v: out } : kind === 'bytes' ? { t: 'opaque' } : this.fail();
  }

  stringBody(raw: boolean): string {
    const quote = this.text.startsWith(this.text[this.at]!.repeat(3), this.at)
      ? this.text[this.at]!.repeat(3)
      : this.text[this.at]!;
    this.at += quote.length;
    let out = '';
    for (;;) {
      if (this.at >= this.text.length) this.fail();
      if (this.text.startsWith(quote, this.at)) {
        this.at += quote.length;
        return out;
      }
      const c = this.text[this.at]!;
      if (c === '\n' && quote.length === 1) this.fail();
      if (c !== '\\') {
        out += c;
        this.at++;
        continue;
      }
      const next = this.text[this.at + 1];
      if (next === undefined) this.fail();
      if (raw) {
        // A raw string keeps the backslash; it only stops the next character from ending the string.
        out += c + next;
        this.at += 2;
        continue;
      }
      out += this.escape(next);
    }
  }

  escape(next: string): string {
    this.at += 2;
    if (next === '\n') return '';
    if (Object.hasOwn(ESCAPES, next)) return ESCAPES[next]!;
    if (/[0-7]/.test(next)) {
      const digits = this.read(this.octalRestPattern)?.[0] ?? '';
      return String.fromCodePoint(Number.parseInt(next + digits, 8));
    }
    const width = next === 'x' ? 2 : next === 'u' ? 4 : next === 'U' ? 8 : 0;
    if (width > 0) {
      const hex = this.text.slice(this.at, this.at + width);
      if (!new RegExp(`^[0-9a-fA-F]{${width}}$`).test(hex)) this.fail();
      const code = Number.parseInt(hex, 16);
      if (code > 0x10ffff) this.fail();
      this.at += width;
      return String.fromCodePoint(code);
    }
    // `\N{name}` needs Unicode's name table: not read here, so the completion stays content.
    if (next === 'N') this.fail();
    return `\\${next}`;
  }
}

/** Python's repr of a float (what json.dumps writes): shortest digits, exponent outside 1e-4..1e16. */
export function pythonFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  const sign = x < 0 || Object.is(x, -0) ? '-' : '';
  const [mantissa = '0', expText = '0'] = Math.abs(x).toExponential().split('e');
  const digits = mantissa.replace('.', '');
  const exp = Number(expText);
  if (exp >= -4 && exp < 16) {
    if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
    const whole = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
    const frac = digits.slice(exp + 1);
    return `${sign}${whole}.${frac === '' ? '0' : frac}`;
  }
  const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
  return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
}

/** json.dumps(value, ensure_ascii=False); throws NotCalls where Python's would raise TypeError. */
function dumps(value: PyValue): string {
  switch (value.t) {
    case 'str':
      return JSON.stringify(value.v);
    case 'int':
      return value.v;
    case 'float':
      return pythonFloatRepr(value.v);
    case 'bool':
      return value.v ? 'true' : 'false';
    case 'none':
      return 'null';
    case 'opaque':
      throw new NotCalls();
    case 'list':
      return `[${value.v.map(dumps).join(', ')}]`;
    case 'dict': {
      // Keys Python counts as equal (1, 1.0, True) are one entry: the first key, the last value.
      const entries = new Map<string, [string, string]>();
      for (const [k, v] of value.v) {
        const id = keyIdentity(k);
        entries.set(id, [entries.get(id)?.[0] ?? dictKey(k), dumps(v)]);
      }
      return `{${[...entries.values()].map(([k, v]) => `${JSON.stringify(k)}: ${v}`).join(', ')}}`;
    }
  }
}

/** Which dict keys Python treats as the same key: strings by text, numbers and booleans by value. */
function keyIdentity(key: PyValue): string {
  if (key.t === 'str') return `s:${key.v}`;
  if (key.t === 'bool') return `n:${key.v ? 1 : 0}`;
  if (key.t === 'int') return `n:${key.v}`;
  if (key.t === 'float')
    return Number.isInteger(key.v) ? `n:${BigInt(key.v)}` : `n:${pythonFloatRepr(key.v)}`;
  return key.t;
}

/** json.dumps turns str, int, float, bool and None keys into strings and refuses the rest. */
function dictKey(key: PyValue): string {
  switch (key.t) {
    case 'str':
    case 'int':
      return key.v;
    case 'float':
      return pythonFloatRepr(key.v);
    case 'bool':
      return key.v ? 'true' : 'false';
    case 'none':
      return 'null';
    default:
      throw new NotCalls();
  }
}

/** The keyword arguments as vLLM builds them: a dict, so a repeated name keeps its place and the last value. */
function keywordsJson(keywords: [string, PyValue][]): string {
  const args = new Map<string, string>();
  for (const [k, v] of keywords) args.set(k, dumps(v));
  return `{${[...args].map(([k, v]) => `${JSON.stringify(k)}: ${v}`).join(', ')}}`;
}

/**
 * vLLM's shape check (`TOOL_CALL_REGEX.match`) on a text that is already a list of calls: the first
 * call's name starts at `[`, and each call with no arguments is written `name()` followed by `,` or
 * by `]`; once a call opens with `name=`, the pattern's `.*` reaches any later `)` + spaces + `]`.
 */
function matchesVllmShape(text: string, calls: PyCall[]): boolean {
  let expected = 1;
  for (const call of calls) {
    if (call.nameStart !== expected || !/^[a-zA-Z][\p{L}\p{M}\p{N}_]*$/u.test(call.name)) return false;
    if (call.open !== call.nameStart + call.name.length) return false;
    const kw = call.firstKeyword;
    if (kw && kw.equals === kw.start + kw.name.length && /^[a-zA-Z]/.test(kw.name))
      return /\)\s*\]/.test(text.slice(kw.equals + 1));
    if (call.close !== call.open + 1) return false;
    if (text[call.close + 1] !== ',') return /^\)\s*\]/.test(text.slice(call.close));
    expected = call.close + 2 + (/^\s*/.exec(text.slice(call.close + 2))?.[0].length ?? 0);
  }
  return false;
}

/**
 * Pythonic tool calls (Gemma 3, Llama 3.2 and 4 with vLLM's pythonic templates), as vLLM's `pythonic`
 * parser reads a whole completion: the completion is a Python list of calls with literal keyword
 * arguments, or it is all content. Arguments are written as Python's json.dumps writes them. Never throws.
 */
export function parsePythonicToolCalls(text: string, options: ParseToolCallsOptions): ParsedCompletion {
  const asText: ParsedCompletion = { content: text === '' ? null : text, toolCalls: [] };
  if (!text.startsWith('[')) return asText;
  try {
    const reader = new PythonReader(text);
    const calls = reader.callList();
    if (!matchesVllmShape(text, calls)) return asText;
    const toolCalls: ToolCall[] = calls.map((call) => ({
      id: options.newToolCallId(),
      type: 'function',
      function: { name: call.name, arguments: keywordsJson(call.keywords) },
    }));
    return { content: null, toolCalls };
  } catch (err) {
    if (err instanceof NotCalls) return asText;
    throw err;
  }
}
