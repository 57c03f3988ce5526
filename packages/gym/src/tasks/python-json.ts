/*
 * JSON text as Python's `json.dumps` writes it: ClawGym's `data_entry.json` files come from Python
 * (`indent=2, ensure_ascii=False` plus a newline), and writing one back byte for byte needs the same
 * layout. Numbers are written as JavaScript writes them; where that differs from the original (`1.0`),
 * the caller keeps the original text instead.
 */

export interface PythonJsonFormat {
  /** Spaces per level; null: Python's one-line default with `", "` and `": "` separators. */
  indent: number | null;
  /** Escape everything outside printable ASCII as `\uXXXX` (Python's default). */
  ensureAscii: boolean;
  trailingNewline: boolean;
}

export const CLAWGYM_ENTRY_FORMAT: PythonJsonFormat = {
  indent: 2,
  ensureAscii: false,
  trailingNewline: true,
};

function escapeNonAscii(json: string): string {
  // JSON.stringify already escaped control characters; what is left outside space..tilde is non-ASCII
  // (and DEL), which Python escapes per UTF-16 code unit in lowercase hex.
  return json.replace(/[^\x20-\x7e]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

function stringLiteral(s: string, ensureAscii: boolean): string {
  const json = JSON.stringify(s);
  return ensureAscii ? escapeNonAscii(json) : json;
}

function dump(value: unknown, format: PythonJsonFormat, depth: number): string {
  if (value === null || typeof value === 'boolean') return String(value);
  if (typeof value === 'number') return JSON.stringify(value);
  if (typeof value === 'string') return stringLiteral(value, format.ensureAscii);
  const items: string[] = Array.isArray(value)
    ? value.map((v) => dump(v, format, depth + 1))
    : Object.entries(value as Record<string, unknown>)
        .filter(([, v]) => v !== undefined)
        .map(([k, v]) => `${stringLiteral(k, format.ensureAscii)}: ${dump(v, format, depth + 1)}`);
  const [open, close] = Array.isArray(value) ? ['[', ']'] : ['{', '}'];
  if (items.length === 0) return `${open}${close}`;
  if (format.indent === null) return `${open}${items.join(', ')}${close}`;
  const inner = ' '.repeat(format.indent * (depth + 1));
  const outer = ' '.repeat(format.indent * depth);
  return `${open}\n${inner}${items.join(`,\n${inner}`)}\n${outer}${close}`;
}

export function pythonJsonDumps(value: unknown, format: PythonJsonFormat): string {
  return dump(value, format, 0) + (format.trailingNewline ? '\n' : '');
}

const CANDIDATES: PythonJsonFormat[] = [2, 4, null, 1, 3].flatMap((indent) =>
  [false, true].flatMap((ensureAscii) =>
    [true, false].map((trailingNewline) => ({ indent, ensureAscii, trailingNewline })),
  ),
);

/** The Python layout that reproduces `text` exactly from `value`, or null when none does. */
export function detectPythonJsonFormat(text: string, value: unknown): PythonJsonFormat | null {
  return CANDIDATES.find((f) => pythonJsonDumps(value, f) === text) ?? null;
}
