import { ValidationError } from '../../domain/errors.js';

/*
 * JSON text re-written as Python's `json.dumps(json.loads(text), ensure_ascii=False)` writes it, from
 * the text itself: keys stay in source order (a JavaScript object puts integer-like keys first) and
 * integers keep every digit (a JavaScript number loses those above 2^53). The paper renders its hint
 * from parsed action data this way; an action log's raw text gives the same bytes here.
 */

type Node =
  | { kind: 'object'; entries: [string, Node][]; start: number; end: number }
  | { kind: 'array'; items: Node[]; start: number; end: number }
  | { kind: 'scalar'; raw: string; start: number; end: number };

const WS = new Set([' ', '\t', '\n', '\r']);

/** Parses JSON text into nodes that keep source order and literal text; throws on bad JSON. */
export function parseJsonNodes(text: string): Node {
  let i = 0;
  const fail = (what: string): never => {
    throw new ValidationError(`not JSON: ${what} at offset ${i}`, 'json');
  };
  const skip = () => {
    while (i < text.length && WS.has(text[i]!)) i++;
  };
  const scalar = (pattern: RegExp): Node => {
    pattern.lastIndex = i;
    const m = pattern.exec(text);
    if (!m || m.index !== i) return fail('a value expected');
    const start = i;
    i += m[0].length;
    return { kind: 'scalar', raw: m[0], start, end: i };
  };
  // biome-ignore lint/suspicious/noControlCharactersInRegex: JSON strings may not hold raw control characters.
  const STRING = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
  const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?/y;
  const LITERAL = /true|false|null/y;
  const value = (): Node => {
    skip();
    const start = i;
    const c = text[i];
    if (c === '{') {
      i++;
      const entries: [string, Node][] = [];
      skip();
      if (text[i] === '}') i++;
      else
        for (;;) {
          skip();
          const key = JSON.parse((scalar(STRING) as { raw: string }).raw) as string;
          skip();
          if (text[i++] !== ':') fail('":" expected');
          const v = value();
          // json.loads keeps a repeated key at its first place with its last value.
          const at = entries.findIndex(([k]) => k === key);
          if (at >= 0) entries[at]![1] = v;
          else entries.push([key, v]);
          skip();
          if (text[i] === ',') i++;
          else if (text[i++] === '}') break;
          else fail('"," or "}" expected');
        }
      return { kind: 'object', entries, start, end: i };
    }
    if (c === '[') {
      i++;
      const items: Node[] = [];
      skip();
      if (text[i] === ']') i++;
      else
        for (;;) {
          items.push(value());
          skip();
          if (text[i] === ',') i++;
          else if (text[i++] === ']') break;
          else fail('"," or "]" expected');
        }
      return { kind: 'array', items, start, end: i };
    }
    if (c === '"') return scalar(STRING);
    if (c === '-' || (c !== undefined && c >= '0' && c <= '9')) return scalar(NUMBER);
    return scalar(LITERAL);
  };
  const root = value();
  skip();
  if (i !== text.length) fail('end of text expected');
  return root;
}

/** A float as Python's `repr` writes it: shortest round-trip digits, `.0` on whole numbers, `e-07`. */
export function pythonFloat(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa, exp] = x.toExponential().split('e') as [string, string];
  const e = Number(exp);
  const sign = mantissa.startsWith('-') ? '-' : '';
  const digits = mantissa.replace('-', '').replace('.', '');
  if (e < -4 || e >= 16) {
    const m = digits.length > 1 ? `${digits[0]}.${digits.slice(1)}` : digits;
    return `${sign}${m}e${e < 0 ? '-' : '+'}${String(Math.abs(e)).padStart(2, '0')}`;
  }
  if (e < 0) return `${sign}0.${'0'.repeat(-e - 1)}${digits}`;
  const whole = digits.slice(0, e + 1).padEnd(e + 1, '0');
  const frac = digits.slice(e + 1);
  return `${sign}${whole}.${frac === '' ? '0' : frac}`;
}

function render(node: Node): string {
  if (node.kind === 'object')
    return `{${node.entries.map(([k, v]) => `${JSON.stringify(k)}: ${render(v)}`).join(', ')}}`;
  if (node.kind === 'array') return `[${node.items.map(render).join(', ')}]`;
  const raw = node.raw;
  if (raw.startsWith('"')) return JSON.stringify(JSON.parse(raw));
  if (raw === 'true' || raw === 'false' || raw === 'null') return raw;
  // Python reads a number without "." or an exponent as an int, of any size.
  if (/^-?\d+$/.test(raw)) return BigInt(raw).toString();
  return pythonFloat(Number(raw));
}

/** `json.dumps(json.loads(text), ensure_ascii=False)`, from the text. */
export function pythonJsonOfText(text: string): string {
  return render(parseJsonNodes(text));
}

/** The source text of the value under `path` (keys and indices), or undefined when there is none. */
export function jsonTextAt(text: string, path: readonly (string | number)[]): string | undefined {
  let node: Node | undefined = parseJsonNodes(text);
  for (const step of path) {
    if (node?.kind === 'object') node = node.entries.find(([k]) => k === step)?.[1];
    else if (node?.kind === 'array' && typeof step === 'number') node = node.items[step];
    else return undefined;
  }
  return node ? text.slice(node.start, node.end) : undefined;
}
