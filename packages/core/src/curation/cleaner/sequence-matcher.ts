/*
 * Python's `difflib.SequenceMatcher(None, a, b)` over strings, to the bit: CLEANER's similarity is
 * `SequenceMatcher(None, old_call, new_call).ratio()`, and a threshold on a number must mean the same
 * number here as in the authors' Python. That includes the autojunk heuristic (with `len(b) >= 200`,
 * a character occurring more than `len(b) // 100 + 1` times in b is "popular": it never starts a
 * match, but matches may still grow over it) and Python's indexing by code point, not UTF-16 unit.
 */

/** A matching block: `a[i:i+size] == b[j:j+size]`. */
export interface MatchingBlock {
  i: number;
  j: number;
  size: number;
}

/** The code points of a string, as Python indexes it (a non-BMP character is one element). */
function codePoints(s: string): Int32Array {
  const out = new Int32Array(s.length);
  let n = 0;
  for (let k = 0; k < s.length; k++) {
    const c = s.charCodeAt(k);
    if (c >= 0xd800 && c <= 0xdbff && k + 1 < s.length) {
      const d = s.charCodeAt(k + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        out[n++] = ((c - 0xd800) << 10) + (d - 0xdc00) + 0x10000;
        k++;
        continue;
      }
    }
    // A lone surrogate stays one element, as it does in a Python str.
    out[n++] = c;
  }
  return n === s.length ? out : out.subarray(0, n);
}

/**
 * One comparison of `a` against `b` (b is indexed once; `isjunk` is always None). The scratch arrays
 * stand in for Python's per-row `j2len` dicts: `row[j + 1]` is the length of the match ending at
 * a[i], b[j]; only the entries a row touched are cleared afterwards, so a search costs what the
 * Python one does.
 */
class Matcher {
  private readonly b2j = new Map<number, number[]>();
  private readonly popular = new Set<number>();
  private prev: Int32Array;
  private next: Int32Array;
  private prevTouched: number[] = [];
  private nextTouched: number[] = [];

  constructor(
    private readonly a: Int32Array,
    private readonly b: Int32Array,
  ) {
    for (let j = 0; j < b.length; j++) {
      const list = this.b2j.get(b[j]!);
      if (list) list.push(j);
      else this.b2j.set(b[j]!, [j]);
    }
    if (b.length >= 200) {
      const ntest = Math.floor(b.length / 100) + 1;
      for (const [elt, idxs] of this.b2j) if (idxs.length > ntest) this.popular.add(elt);
      for (const elt of this.popular) this.b2j.delete(elt);
    }
    this.prev = new Int32Array(b.length + 1);
    this.next = new Int32Array(b.length + 1);
  }

  /** `find_longest_match(alo, ahi, blo, bhi)`: the longest, earliest in a, then earliest in b. */
  findLongestMatch(alo: number, ahi: number, blo: number, bhi: number): MatchingBlock {
    const { a, b, b2j } = this;
    let besti = alo;
    let bestj = blo;
    let bestsize = 0;
    for (let i = alo; i < ahi; i++) {
      const js = b2j.get(a[i]!);
      if (js !== undefined) {
        const prev = this.prev;
        const next = this.next;
        for (let t = 0; t < js.length; t++) {
          const j = js[t]!;
          if (j < blo) continue;
          if (j >= bhi) break;
          const k = prev[j]! + 1;
          next[j + 1] = k;
          this.nextTouched.push(j + 1);
          if (k > bestsize) {
            besti = i - k + 1;
            bestj = j - k + 1;
            bestsize = k;
          }
        }
      }
      this.advanceRow();
    }
    this.advanceRow();
    // No element is junk (isjunk is None; popular elements are not junk), so Python's extension over
    // non-junk elements takes every equal neighbour and its junk-extension loops never run.
    while (besti > alo && bestj > blo && a[besti - 1] === b[bestj - 1]) {
      besti--;
      bestj--;
      bestsize++;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] === b[bestj + bestsize])
      bestsize++;
    return { i: besti, j: bestj, size: bestsize };
  }

  /** The row just built becomes the previous one; the old previous row is cleared and reused. */
  private advanceRow(): void {
    const old = this.prev;
    for (const idx of this.prevTouched) old[idx] = 0;
    this.prevTouched.length = 0;
    this.prev = this.next;
    this.next = old;
    const touched = this.prevTouched;
    this.prevTouched = this.nextTouched;
    this.nextTouched = touched;
  }

  /** `get_matching_blocks()`: sorted, adjacent blocks merged, ending with the `(len(a), len(b), 0)` sentinel. */
  matchingBlocks(): MatchingBlock[] {
    const la = this.a.length;
    const lb = this.b.length;
    const queue: [number, number, number, number][] = [[0, la, 0, lb]];
    const blocks: MatchingBlock[] = [];
    while (queue.length > 0) {
      const [alo, ahi, blo, bhi] = queue.pop()!;
      const m = this.findLongestMatch(alo, ahi, blo, bhi);
      if (m.size === 0) continue;
      blocks.push(m);
      if (alo < m.i && blo < m.j) queue.push([alo, m.i, blo, m.j]);
      if (m.i + m.size < ahi && m.j + m.size < bhi) queue.push([m.i + m.size, ahi, m.j + m.size, bhi]);
    }
    // Blocks never overlap in a or b, so ordering by i is Python's tuple sort.
    blocks.sort((x, y) => x.i - y.i);
    const merged: MatchingBlock[] = [];
    let cur: MatchingBlock = { i: 0, j: 0, size: 0 };
    for (const blk of blocks) {
      if (cur.i + cur.size === blk.i && cur.j + cur.size === blk.j) {
        cur = { i: cur.i, j: cur.j, size: cur.size + blk.size };
      } else {
        if (cur.size > 0) merged.push(cur);
        cur = blk;
      }
    }
    if (cur.size > 0) merged.push(cur);
    merged.push({ i: la, j: lb, size: 0 });
    return merged;
  }
}

/** `SequenceMatcher(None, a, b).get_matching_blocks()` for strings. */
export function matchingBlocks(a: string, b: string): MatchingBlock[] {
  return new Matcher(codePoints(a), codePoints(b)).matchingBlocks();
}

/** `SequenceMatcher(None, a, b).find_longest_match(alo, ahi, blo, bhi)`, indices in code points. */
export function findLongestMatch(
  a: string,
  b: string,
  range?: { alo: number; ahi: number; blo: number; bhi: number },
): MatchingBlock {
  const ca = codePoints(a);
  const cb = codePoints(b);
  const r = range ?? { alo: 0, ahi: ca.length, blo: 0, bhi: cb.length };
  return new Matcher(ca, cb).findLongestMatch(r.alo, r.ahi, r.blo, r.bhi);
}

/**
 * `SequenceMatcher(None, a, b).ratio()`: 2·M / T, M the matched elements and T = len(a) + len(b)
 * (1.0 when both are empty), the same double Python computes.
 */
export function sequenceRatio(a: string, b: string): number {
  // Identical strings always match whole (the first longest match sits on the diagonal and extends
  // over popular elements to both ends), so the answer is 1.0 without the search.
  if (a === b) return 1;
  const ca = codePoints(a);
  const cb = codePoints(b);
  const total = ca.length + cb.length;
  if (total === 0) return 1;
  if (ca.length === 0 || cb.length === 0) return 0;
  let matches = 0;
  for (const blk of new Matcher(ca, cb).matchingBlocks()) matches += blk.size;
  return (2 * matches) / total;
}
