import { raw } from 'hono/html';
import { type Child, Fragment } from 'hono/jsx';
import { jsx } from 'hono/jsx/jsx-runtime';
import { fmt } from './layout.js';

/*
 * Bounded rendering of what agents and producers write (metadata, messages, tool traffic, signal
 * details, token ids): each block shows at most a fixed amount, says what it left out
 * ("truncated — N more …") with a link to the full raw JSON, and draws on its page's byte budget.
 * Nothing here recurses into a value or stringifies it whole, so work and output follow what is
 * shown, never what is stored.
 */

/** No dashboard page is sent larger than this; `html()` answers a short page instead. */
export const PAGE_CAP_BYTES = 2 * 1024 * 1024;

export const LIMITS = {
  /** Characters of one text block: a message, a tool result, a decoded response. */
  textChars: 16_000,
  /** Characters of one JSON block's text, before escaping. */
  jsonChars: 16_000,
  /** Levels of a JSON value drawn; deeper containers are folded into a count. */
  jsonDepth: 10,
  /** Entries drawn of one array or object. */
  jsonEntries: 100,
  /** Characters drawn of one string inside a JSON value. */
  jsonString: 2_000,
  /** Tokens decoded for one text view (the tokenizer takes about 3 µs a token). */
  decodeTokens: 4_096,
  /** Tokens drawn in one heat strip. */
  stripTokens: 1_500,
  /** Tool-call arguments longer than this are shown as text, not parsed and redrawn. */
  parseChars: 256_000,
} as const;

/** What a block's frame and its marker take beyond its text (tags, classes, the raw link). */
const BLOCK_BYTES = 320;

/**
 * The bytes a page section may still produce. Sections are parts of the page's budget; a block
 * charges what it draws, a bounded list what its items add around their blocks. `raw` is where the
 * whole value can be read as application/json; every truncation marker links to it.
 */
export class Budget {
  private used = 0;

  constructor(
    private readonly limit: number,
    readonly raw: string | null = null,
    private readonly parent: Budget | null = null,
  ) {}

  get left(): number {
    const own = this.limit - this.used;
    return Math.max(0, this.parent ? Math.min(own, this.parent.left) : own);
  }

  get spent(): number {
    return this.used;
  }

  charge(bytes: number): void {
    this.used += bytes;
    this.parent?.charge(bytes);
  }

  part(limit: number, rawHref: string | null = this.raw): Budget {
    return new Budget(limit, rawHref, this);
  }
}

/** Bytes one UTF-16 unit takes once hono has escaped it (& < > " ') and it is UTF-8 encoded. */
function unitBytes(code: number): number {
  if (code >= 0x80) return code < 0x800 ? 2 : 3;
  switch (code) {
    case 34: // "
      return 6;
    case 38: // &
    case 39: // '
      return 5;
    case 60: // <
    case 62: // >
      return 4;
    default:
      return 1;
  }
}

export interface Clipped {
  shown: string;
  /** What `shown` takes in the page. */
  bytes: number;
  /** Characters (UTF-16 units) left out. */
  more: number;
  /** Cut by the byte budget rather than the character cap. */
  byBudget: boolean;
}

/** The head of `text` that fits both caps; reads only the characters it keeps. */
export function clipText(text: string, maxChars: number, maxBytes: number): Clipped {
  const end = Math.min(text.length, maxChars);
  let bytes = 0;
  let i = 0;
  let byBudget = false;
  for (; i < end; i++) {
    const b = unitBytes(text.charCodeAt(i));
    if (bytes + b > maxBytes) {
      byBudget = true;
      break;
    }
    bytes += b;
  }
  // Never split a surrogate pair.
  if (i > 0 && i < text.length) {
    const last = text.charCodeAt(i - 1);
    if (last >= 0xd800 && last <= 0xdbff) {
      i--;
      bytes -= 3;
    }
  }
  return { shown: i === text.length ? text : text.slice(0, i), bytes, more: text.length - i, byBudget };
}

/** The bytes `text` takes in the page once escaped and UTF-8 encoded. */
export const htmlBytes = (text: string) => clipText(text, text.length, Number.POSITIVE_INFINITY).bytes;

const plural = (n: number, one: string, many = `${one}s`) => `${fmt(n)} more ${n === 1 ? one : many}`;

/** The marker after a cut block: what was left out, and where the whole value is. */
export function Truncated({ more, budget, byBudget }: { more: string; budget: Budget; byBudget?: boolean }) {
  return (
    <p class="truncated">
      truncated — {more}
      {byBudget ? ' (page size limit)' : ''}
      {budget.raw ? (
        <>
          {' · '}
          <a class="raw-link" href={budget.raw}>
            full raw JSON
          </a>
        </>
      ) : null}
    </p>
  );
}

/** A long text in a <pre>, cut to `max` characters and to what the budget has left. */
export function TextBlock({
  text,
  budget,
  cls = 'content',
  max = LIMITS.textChars,
  extra,
  mark = false,
}: {
  text: string;
  budget: Budget;
  cls?: string;
  max?: number;
  /** Said after the characters left out (e.g. the tokens a decoded view did not decode). */
  extra?: string;
  /** Highlight the text (<mark> inside the <pre>). */
  mark?: boolean;
}) {
  const c = clipText(text, max, Math.max(0, budget.left - BLOCK_BYTES));
  budget.charge(c.bytes + BLOCK_BYTES);
  const more = [c.more > 0 ? plural(c.more, 'character') : '', extra ?? ''].filter((s) => s !== '');
  return (
    <>
      {c.shown !== '' || c.more === 0 ? (
        <pre class={cls}>{mark ? <mark>{c.shown}</mark> : c.shown}</pre>
      ) : null}
      {more.length > 0 ? <Truncated more={more.join(', ')} budget={budget} byBudget={c.byBudget} /> : null}
    </>
  );
}

/** A short text inline (a name, an id, an error type): at most `max` characters, then "…". */
export function short(text: string, max = 120): string {
  if (text.length <= max) return text;
  const c = clipText(text, max, Number.POSITIVE_INFINITY);
  return `${c.shown}… (${plural(c.more, 'character')})`;
}

export interface JsonPreview {
  text: string;
  /** Array items and object keys left out (past the entry cap, folded by depth, or after the cut). */
  entries: number;
  /** Characters left out of long strings. */
  chars: number;
}

interface Frame {
  items: ArrayLike<unknown> | null;
  object: Record<string, unknown> | null;
  keys: string[] | null;
  total: number;
  next: number;
  depth: number;
  close: string;
}

/**
 * Any value as indented JSON text, drawn iteratively within the caps: at most `maxDepth` levels,
 * `maxEntries` per container, `maxString` characters a string, and about `maxChars` in all; each cut
 * is marked where it happens ("… truncated — N more items"). `compact` draws one line.
 */
export function jsonPreview(
  value: unknown,
  {
    maxChars = LIMITS.jsonChars,
    maxDepth = LIMITS.jsonDepth,
    maxEntries = LIMITS.jsonEntries,
    maxString = LIMITS.jsonString,
    compact = false,
  }: {
    maxChars?: number;
    maxDepth?: number;
    maxEntries?: number;
    maxString?: number;
    compact?: boolean;
  } = {},
): JsonPreview {
  let text = '';
  let entries = 0;
  let chars = 0;
  const stack: Frame[] = [];
  const indent = (depth: number) => (compact ? '' : `\n${'  '.repeat(depth)}`);
  const str = (s: string) => {
    if (s.length <= maxString) return JSON.stringify(s);
    const c = clipText(s, maxString, Number.POSITIVE_INFINITY);
    chars += c.more;
    return `${JSON.stringify(c.shown)}… (truncated — ${plural(c.more, 'character')})`;
  };
  const write = (v: unknown, depth: number) => {
    if (typeof v === 'string') text += str(v);
    else if (typeof v === 'number') text += Number.isFinite(v) ? String(v) : 'null';
    else if (typeof v === 'boolean' || typeof v === 'bigint') text += String(v);
    else if (typeof v !== 'object' || v === null) text += 'null';
    else {
      const list = Array.isArray(v) || (ArrayBuffer.isView(v) && !(v instanceof DataView));
      const keys = list ? null : Object.keys(v);
      const total = list ? (v as ArrayLike<unknown>).length : keys!.length;
      const [open, close] = list ? ['[', ']'] : ['{', '}'];
      if (total === 0) text += open + close;
      else if (depth >= maxDepth) {
        entries += total;
        text += `${open}… truncated — ${list ? plural(total, 'item') : plural(total, 'key')}, deeper than ${maxDepth} levels${close}`;
      } else {
        text += open;
        stack.push({
          items: list ? (v as ArrayLike<unknown>) : null,
          object: list ? null : (v as Record<string, unknown>),
          keys,
          total,
          next: 0,
          depth: depth + 1,
          close,
        });
      }
    }
  };
  write(value, 0);
  while (stack.length > 0) {
    const f = stack[stack.length - 1]!;
    if (text.length >= maxChars) {
      const left = stack.reduce((n, s) => n + s.total - s.next, 0);
      entries += left;
      text += `${indent(f.depth)}… truncated — ${plural(left, 'entry', 'entries')} after ${fmt(maxChars)} characters`;
      break;
    }
    const sep = f.next === 0 ? '' : compact ? ', ' : ',';
    if (f.next >= f.total || f.next >= maxEntries) {
      if (f.next < f.total) {
        entries += f.total - f.next;
        text += `${sep}${indent(f.depth)}… truncated — ${plural(f.total - f.next, f.keys ? 'key' : 'item')}`;
      }
      text += indent(f.depth - 1) + f.close;
      stack.pop();
      continue;
    }
    text += sep + indent(f.depth);
    if (f.keys) {
      const key = f.keys[f.next]!;
      text += `${str(key)}: `;
      write(f.object![key], f.depth);
    } else write(f.items![f.next], f.depth);
    f.next++;
  }
  return { text, entries, chars };
}

/** A JSON value drawn with jsonPreview in a <pre> (behind a summary when given one), within the budget. */
export function JsonBlock({
  value,
  budget,
  summary,
  open,
}: {
  value: unknown;
  budget: Budget;
  summary?: string;
  open?: boolean;
}) {
  const p = jsonPreview(value, { maxChars: Math.min(LIMITS.jsonChars, budget.left) });
  const parts = [p.entries > 0 ? plural(p.entries, 'entry', 'entries') : ''];
  if (p.chars > 0) parts.push(`${plural(p.chars, 'character')} of long strings`);
  const block = (
    <TextBlock
      text={p.text}
      budget={budget}
      cls="json"
      max={Number.POSITIVE_INFINITY}
      extra={parts.filter((s) => s !== '').join(', ') || undefined}
    />
  );
  if (summary === undefined) return block;
  return (
    <details open={open ?? false}>
      <summary>{summary}</summary>
      {block}
    </details>
  );
}

/** A value in one short line: a number as people read it, anything else as compact JSON. */
export function inlineValue(value: unknown, max = 120): string {
  if (typeof value === 'number') return fmt(value);
  if (typeof value === 'string') return short(value, max);
  return jsonPreview(value, { compact: true, maxChars: max, maxDepth: 3, maxEntries: 10, maxString: 40 })
    .text;
}

/** The least a shared item is given, so a long list shows its first items usefully, then counts the rest. */
const MIN_SHARE = 2048;

export interface ListOptions {
  /** Items drawn at most. */
  max?: number;
  /**
   * Share the budget: each item gets an even part of what is left (less `reserve` bytes kept for
   * its frame), and what one does not use goes to those after it. Without it, items take in order.
   */
  reserve?: number;
}

/**
 * Items rendered one by one while the budget lasts, each charged what it adds around the blocks it
 * holds; `more` counts those left out. Returns the items' HTML as one escaped string.
 */
export function boundedItems<T>(
  items: readonly T[],
  budget: Budget,
  render: (item: T, index: number, own: Budget) => Child,
  { max = Number.POSITIVE_INFINITY, reserve }: ListOptions = {},
): { html: Child; shown: number; more: number } {
  let out = '';
  let i = 0;
  const end = Math.min(items.length, max);
  for (; i < end && budget.left > BLOCK_BYTES; i++) {
    const own =
      reserve === undefined
        ? budget
        : budget.part(Math.max(MIN_SHARE, Math.floor(budget.left / (end - i)) - reserve));
    const before = budget.spent;
    // Rendered through a fragment, so a plain string an item returns is escaped like any child.
    const piece = String(jsx(Fragment, { children: render(items[i]!, i, own) }));
    budget.charge(Math.max(0, Buffer.byteLength(piece) - (budget.spent - before)));
    out += piece;
  }
  return { html: raw(out), shown: i, more: items.length - i };
}

/** `boundedItems` with its marker after the list: "truncated — N more messages". */
export function BoundedList<T>({
  items,
  budget,
  render,
  noun,
  wrap,
  max,
  reserve,
}: {
  items: readonly T[];
  budget: Budget;
  render: (item: T, index: number, own: Budget) => Child;
  noun: [one: string, many: string];
  /** The element holding the items (a list, a table body); the marker follows it. */
  wrap: (children: Child) => Child;
} & ListOptions) {
  const { html, shown, more } = boundedItems(items, budget, render, { max, reserve });
  return (
    <>
      {wrap(html)}
      {more > 0 ? (
        <Truncated
          more={plural(more, noun[0], noun[1])}
          budget={budget}
          byBudget={shown < Math.min(items.length, max ?? Number.POSITIVE_INFINITY)}
        />
      ) : null}
    </>
  );
}

/** What a page too large to send is answered with. */
export function tooLargeMessage(bytes: number): string {
  return `This page would be ${fmt(Math.ceil(bytes / 1024))} KB, over the dashboard's ${PAGE_CAP_BYTES / 1024 / 1024} MB limit.`;
}
