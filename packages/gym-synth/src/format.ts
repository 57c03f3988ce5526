/*
 * Text formats shared by the templates. Expected values are computed here in TypeScript while the
 * reference solutions compute theirs in Python; where the two languages format differently
 * (rounding a float to n decimals), these helpers follow Python so that both sides agree to the byte.
 */

/** A CSV cell, quoted only when it has to be (as Python's csv module writes it). */
export function csvCell(value: string | number): string {
  const s = String(value);
  return /[",\n\r]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

/** A CSV document with a header row, `\n` line endings and a final newline. */
export function toCsv(header: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  return [header, ...rows]
    .map((row) => row.map(csvCell).join(','))
    .join('\n')
    .concat('\n');
}

/**
 * `x` with `digits` decimals exactly as Python's `f"{x:.{digits}f}"`: the exact binary value rounded
 * half to even. (`Number.prototype.toFixed` rounds exact ties away from zero: 0.125 → "0.13", Python
 * says "0.12".)
 */
export function pyFixed(x: number, digits: number): string {
  if (!Number.isFinite(x)) throw new Error(`pyFixed of ${x}`);
  if (Math.abs(x) >= 1e21) throw new Error(`pyFixed of ${x}: too large`);
  // toFixed(100) is the exact decimal expansion of the double (it has at most ~60 fractional digits here).
  const exact = Math.abs(x).toFixed(100);
  const [intPart, frac = ''] = exact.split('.');
  const kept = frac.slice(0, digits);
  const rest = frac.slice(digits);
  const digitsStr = `${intPart}${kept}`;
  let roundUp = false;
  if (rest[0] !== undefined) {
    if (rest[0] > '5') roundUp = true;
    else if (rest[0] === '5') {
      const beyond = /[1-9]/.test(rest.slice(1));
      const last = Number(digitsStr[digitsStr.length - 1] ?? '0');
      roundUp = beyond || last % 2 === 1;
    }
  }
  let n = BigInt(digitsStr);
  if (roundUp) n += 1n;
  let s = n.toString().padStart(digits + 1, '0');
  if (digits > 0) s = `${s.slice(0, s.length - digits)}.${s.slice(s.length - digits)}`;
  // Python keeps the sign of a negative number that rounds to zero ("-0.00").
  return x < 0 || Object.is(x, -0) ? `-${s}` : s;
}

/** Python's `round(x, digits)` as a number. */
export function pyRound(x: number, digits: number): number {
  return Number(pyFixed(x, digits));
}

/** Integer cents as a decimal string with two places ("1234" → "12.34", "-5" → "-0.05"). */
export function cents(c: number): string {
  if (!Number.isInteger(c)) throw new Error(`cents of ${c}`);
  const sign = c < 0 ? '-' : '';
  const a = Math.abs(c);
  return `${sign}${Math.floor(a / 100)}.${String(a % 100).padStart(2, '0')}`;
}

/** Integer cents as a JSON number (12.34); exact enough for a tolerance of 1e-6. */
export function centsValue(c: number): number {
  return Number(cents(c));
}

const DAY_MS = 86_400_000;
export const WEEKDAYS = [
  'Monday',
  'Tuesday',
  'Wednesday',
  'Thursday',
  'Friday',
  'Saturday',
  'Sunday',
] as const;

/** An ISO date (YYYY-MM-DD) `n` days after `iso`. */
export function addDays(iso: string, n: number): string {
  return new Date(Date.parse(`${iso}T00:00:00Z`) + n * DAY_MS).toISOString().slice(0, 10);
}

/** Days from `a` to `b` (ISO dates). */
export function daysBetween(a: string, b: string): number {
  return Math.round((Date.parse(`${b}T00:00:00Z`) - Date.parse(`${a}T00:00:00Z`)) / DAY_MS);
}

/** 0 = Monday ... 6 = Sunday (Python's `date.weekday()`). */
export function weekday(iso: string): number {
  return (new Date(`${iso}T00:00:00Z`).getUTCDay() + 6) % 7;
}

export function weekdayName(iso: string): string {
  return WEEKDAYS[weekday(iso)]!;
}

/** Minutes since midnight of "HH:MM". */
export function minutesOf(hhmm: string): number {
  const [h, m] = hhmm.split(':').map(Number);
  return h! * 60 + m!;
}

export function hhmm(minutes: number): string {
  return `${String(Math.floor(minutes / 60)).padStart(2, '0')}:${String(minutes % 60).padStart(2, '0')}`;
}

/** Lower-case words joined by hyphens ("Cold Brew & Co." → "cold-brew-co"). */
export function slugify(s: string): string {
  return s
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '');
}

/** A literal string as a JavaScript regex source. */
export function escapeRegex(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
}

/** A regex source matching `s` as a whole line. */
export function lineRegex(s: string): string {
  return `(^|\\n)${escapeRegex(s)}[ \\t]*(\\r?\\n|$)`;
}

/** A regex source matching the literals in this order (anything between them). */
export function inOrderRegex(parts: readonly string[]): string {
  return parts.map(escapeRegex).join('[\\s\\S]*');
}

/** Code-unit order, as Python's `sorted` on strings. */
export function byString(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** A JSON Pointer (RFC 6901) from keys. */
export function pointer(...keys: readonly (string | number)[]): string {
  return keys.map((k) => `/${String(k).replace(/~/g, '~0').replace(/\//g, '~1')}`).join('');
}

/** Python source for a literal (strings, numbers, booleans, None, lists, dicts). */
export function py(value: unknown): string {
  if (value === null || value === undefined) return 'None';
  if (typeof value === 'boolean') return value ? 'True' : 'False';
  if (typeof value === 'number') return String(value);
  if (typeof value === 'string') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(py).join(', ')}]`;
  return `{${Object.entries(value as Record<string, unknown>)
    .map(([k, v]) => `${JSON.stringify(k)}: ${py(v)}`)
    .join(', ')}}`;
}

/** Single-quotes a string for POSIX shells. */
export function shellQuote(s: string): string {
  return `'${s.replaceAll("'", `'\\''`)}'`;
}
