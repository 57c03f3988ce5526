// Prefix-tree packing (Claw-R1's prefix-tree merge): a batch's steps share long prefixes, so they are merged
// into one trie sent once, with a tree attention mask (`parents`) and per-path position ids.
// The merge rule, node order and `shareResponses`: docs/serving.md#packing

export interface PackInput {
  /** prompt + response token ids of one step (a "sequence") */
  tokens: ArrayLike<number>;
  /** how many leading tokens are prompt (the rest is response, trained on). Default: tokens.length (all prompt). */
  promptLength?: number;
}

export interface Packing {
  /** the packed token array: every distinct trie position once, each node's tokens contiguous, nodes in depth-first pre-order */
  tokens: Int32Array;
  /** node i covers tokens[nodeStart[i] .. nodeStart[i]+nodeLength[i]) */
  nodeStart: Int32Array;
  nodeLength: Int32Array;
  /** parent node of node i (-1 for a root) */
  nodeParent: Int32Array;
  /** per packed token: index of the previous token on its path (-1 for the first token of a root); token j attends to i iff i is j or an ancestor via parents */
  parents: Int32Array;
  /** per packed token: its position id = depth along its path (0-based), i.e. its index in every sequence that contains it */
  positionIds: Int32Array;
  /** per packed token: the sequence whose response token it is, or -1 for a prompt-only token (with
   * `shareResponses`, the first of its owners) */
  owner: Int32Array;
  /** with `shareResponses` only: the sequences whose response token packed token j is are
   * ownerIds[ownerOffsets[j] .. ownerOffsets[j+1]) (in sequence order) */
  owners?: { offsets: Int32Array; ids: Int32Array };
  /** per input sequence: the node ids on its path, root first; the sequence is exactly the concatenation of their tokens */
  sequences: Int32Array[];
  /** packed tokens / sum of input lengths (1 for an empty batch) */
  ratio: number;
  originalTokens: number;
}

/** A Packing as it travels inside JSON batches: plain number arrays, nodes as `[start, length, parent]`. */
import type { PackingWire } from '../domain/wire-batch.js';

export type { PackingWire };

export interface PackOptions {
  /** merge identical response prefixes across sequences (a token may belong to several); default false */
  shareResponses?: boolean;
}

const NONE = -1;
const ROOT = 0;
/** Children of a node are scanned as a list up to this many, then looked up through a Map. */
const INDEXED_FANOUT = 16;

/**
 * The trie under construction. Positions live in an arena sized to the input (packing never grows
 * it); a node is a contiguous arena range, and a split only cuts a range in two, so positions never
 * move. Node 0 is a virtual root of length 0 whose children are the real roots.
 */
class PrefixTrie {
  readonly tok: Int32Array;
  readonly own: Int32Array;
  used = 0;

  readonly start: Int32Array;
  readonly len: Int32Array;
  readonly firstChild: Int32Array;
  readonly lastChild: Int32Array;
  readonly nextSibling: Int32Array;
  /** next sibling with the same first token, in creation order (duplicates come from owned responses) */
  readonly nextSame: Int32Array;
  readonly childCount: Int32Array;
  /** first token → first child with it, only for nodes with many children */
  readonly childIndex: (Map<number, number> | undefined)[] = [];
  nodes = 1;

  constructor(
    maxTokens: number,
    maxNodes: number,
    readonly shareResponses = false,
  ) {
    this.tok = new Int32Array(maxTokens);
    this.own = new Int32Array(maxTokens);
    this.start = new Int32Array(maxNodes);
    this.len = new Int32Array(maxNodes);
    this.firstChild = new Int32Array(maxNodes).fill(NONE);
    this.lastChild = new Int32Array(maxNodes).fill(NONE);
    this.nextSibling = new Int32Array(maxNodes).fill(NONE);
    this.nextSame = new Int32Array(maxNodes).fill(NONE);
    this.childCount = new Int32Array(maxNodes);
  }

  /** Inserts sequence `id`; returns the arena position of its last token (-1 when it is empty). */
  insert(t: ArrayLike<number>, promptLength: number, id: number): number {
    const n = t.length;
    if (n === 0) return NONE;
    let node = ROOT;
    let off = 0;
    let k = 0;
    // Invariant at the top: `node` is matched to its end and t[k] is still to place.
    for (;;) {
      const next = this.chooseChild(node, t, k, n, promptLength);
      if (next === NONE) break;
      const m = this.matchSpan(next, 0, t, k, n, promptLength);
      const s = this.start[next]!;
      for (let pos = s + Math.max(0, promptLength - k); pos < s + m; pos++)
        if (this.own[pos] === NONE) this.own[pos] = id;
      node = next;
      off = m;
      k += m;
      if (m < this.len[node]! || k === n) break;
    }
    if (off < this.len[node]!) this.split(node, off);
    if (k === n) return this.start[node]! + off - 1;
    return this.addLeaf(node, t, k, promptLength, id);
  }

  /** How many tokens of t[k..n) match node c from offset `from` on, under the ownership rule. */
  private matchSpan(c: number, from: number, t: ArrayLike<number>, k: number, n: number, p: number): number {
    const tok = this.tok;
    const own = this.own;
    let pos = this.start[c]! + from;
    const end = Math.min(this.start[c]! + this.len[c]!, pos + (n - k));
    const promptEnd = Math.min(end, pos + Math.max(0, p - k));
    let i = k;
    while (pos < promptEnd && tok[pos] === (t[i]! | 0)) {
      pos++;
      i++;
    }
    if (pos === promptEnd) {
      while (pos < end && tok[pos] === (t[i]! | 0) && (this.shareResponses || own[pos] === NONE)) {
        pos++;
        i++;
      }
    }
    return i - k;
  }

  /** The child of `node` that t[k] may follow (the longest-matching one when several may), or -1. */
  private chooseChild(node: number, t: ArrayLike<number>, k: number, n: number, p: number): number {
    let only = NONE;
    const head = this.firstWithToken(node, t[k]! | 0);
    for (let c = head; c !== NONE; c = this.nextSame[c]!) {
      if (!this.mayFollow(c, k, p)) continue;
      if (only !== NONE) return this.longestOf(head, t, k, n, p);
      only = c;
    }
    return only;
  }

  private mayFollow(c: number, k: number, p: number): boolean {
    return k < p || this.shareResponses || this.own[this.start[c]!] === NONE;
  }

  private longestOf(head: number, t: ArrayLike<number>, k: number, n: number, p: number): number {
    let best = NONE;
    let bestReach = -1;
    for (let c = head; c !== NONE; c = this.nextSame[c]!) {
      if (!this.mayFollow(c, k, p)) continue;
      const r = this.reach(c, t, k, n, p);
      if (r > bestReach) {
        best = c;
        bestReach = r;
      }
    }
    return best;
  }

  /** How far into t the sequence gets when it enters child c at t[k]; recurses only where paths fork. */
  private reach(c: number, t: ArrayLike<number>, k: number, n: number, p: number): number {
    for (;;) {
      const m = this.matchSpan(c, 0, t, k, n, p);
      k += m;
      if (m < this.len[c]! || k === n) return k;
      let next = NONE;
      const head = this.firstWithToken(c, t[k]! | 0);
      for (let d = head; d !== NONE; d = this.nextSame[d]!) {
        if (!this.mayFollow(d, k, p)) continue;
        if (next !== NONE) {
          let best = k;
          for (let e = head; e !== NONE; e = this.nextSame[e]!) {
            if (this.mayFollow(e, k, p)) best = Math.max(best, this.reach(e, t, k, n, p));
          }
          return best;
        }
        next = d;
      }
      if (next === NONE) return k;
      c = next;
    }
  }

  private firstWithToken(node: number, token: number): number {
    const index = this.childIndex[node];
    if (index !== undefined) return index.get(token) ?? NONE;
    for (let c = this.firstChild[node]!; c !== NONE; c = this.nextSibling[c]!) {
      if (this.tok[this.start[c]!] === token) return c;
    }
    return NONE;
  }

  /** Cuts `node` after `at` tokens; the tail becomes its only child and takes over its children. */
  private split(node: number, at: number): void {
    const tail = this.nodes++;
    this.start[tail] = this.start[node]! + at;
    this.len[tail] = this.len[node]! - at;
    this.len[node] = at;
    this.firstChild[tail] = this.firstChild[node]!;
    this.lastChild[tail] = this.lastChild[node]!;
    this.childCount[tail] = this.childCount[node]!;
    this.childIndex[tail] = this.childIndex[node];
    this.firstChild[node] = tail;
    this.lastChild[node] = tail;
    this.childCount[node] = 1;
    this.childIndex[node] = undefined;
  }

  /** Adds t[k..n) as a new child of `parent`; returns the arena position of its last token. */
  private addLeaf(parent: number, t: ArrayLike<number>, k: number, p: number, id: number): number {
    const n = t.length;
    const s = this.used;
    for (let i = k; i < n; i++) {
      this.tok[s + i - k] = t[i]!;
      this.own[s + i - k] = i < p ? NONE : id;
    }
    this.used += n - k;
    const leaf = this.nodes++;
    this.start[leaf] = s;
    this.len[leaf] = n - k;

    const token = this.tok[s]!;
    const head = this.firstWithToken(parent, token);
    if (head === NONE) {
      this.childIndex[parent]?.set(token, leaf);
    } else {
      let tail = head;
      while (this.nextSame[tail] !== NONE) tail = this.nextSame[tail]!;
      this.nextSame[tail] = leaf;
    }
    if (this.lastChild[parent] === NONE) this.firstChild[parent] = leaf;
    else this.nextSibling[this.lastChild[parent]!] = leaf;
    this.lastChild[parent] = leaf;
    if (++this.childCount[parent]! === INDEXED_FANOUT) this.indexChildren(parent);
    return s + n - k - 1;
  }

  private indexChildren(node: number): void {
    const index = new Map<number, number>();
    for (let c = this.firstChild[node]!; c !== NONE; c = this.nextSibling[c]!) {
      const token = this.tok[this.start[c]!]!;
      if (!index.has(token)) index.set(token, c);
    }
    this.childIndex[node] = index;
  }
}

function promptLengthOf(input: PackInput, i: number): number {
  const n = input.tokens.length;
  const p = input.promptLength ?? n;
  if (!Number.isInteger(p) || p < 0 || p > n) {
    throw new RangeError(`inputs[${i}].promptLength must be an integer in [0, ${n}], got ${p}`);
  }
  return p;
}

/** Merges the sequences into one prefix tree (see the module comment for the rule). */
export function packPrefixTree(inputs: readonly PackInput[], options: PackOptions = {}): Packing {
  let originalTokens = 0;
  for (const input of inputs) originalTokens += input.tokens.length;
  // Each insert adds at most one leaf and one split.
  const trie = new PrefixTrie(originalTokens, 2 * inputs.length + 1, options.shareResponses);
  const lastPos = new Int32Array(inputs.length);
  const promptLengths = new Int32Array(inputs.length);
  for (let i = 0; i < inputs.length; i++) {
    const input = inputs[i]!;
    promptLengths[i] = promptLengthOf(input, i);
    lastPos[i] = trie.insert(input.tokens, promptLengths[i]!, i);
  }

  const size = trie.used;
  const nodeCount = trie.nodes - 1;
  const tokens = new Int32Array(size);
  const owner = new Int32Array(size);
  const parents = new Int32Array(size);
  const positionIds = new Int32Array(size);
  const nodeStart = new Int32Array(nodeCount);
  const nodeLength = new Int32Array(nodeCount);
  const nodeParent = new Int32Array(nodeCount);
  const nodeAtLastPos = new Int32Array(size);

  // Pre-order walk with an explicit stack; outParent[b] is the output id of trie node b's parent.
  const stack = new Int32Array(trie.nodes);
  const outParent = new Int32Array(trie.nodes);
  let top = 0;
  const pushChildren = (b: number, out: number) => {
    const from = top;
    for (let c = trie.firstChild[b]!; c !== NONE; c = trie.nextSibling[c]!) {
      outParent[c] = out;
      stack[top++] = c;
    }
    stack.subarray(from, top).reverse();
  };
  pushChildren(ROOT, NONE);
  let cursor = 0;
  let id = 0;
  while (top > 0) {
    const b = stack[--top]!;
    const q = outParent[b]!;
    const s = trie.start[b]!;
    const len = trie.len[b]!;
    nodeStart[id] = cursor;
    nodeLength[id] = len;
    nodeParent[id] = q;
    tokens.set(trie.tok.subarray(s, s + len), cursor);
    owner.set(trie.own.subarray(s, s + len), cursor);
    const before = q === NONE ? NONE : nodeStart[q]! + nodeLength[q]! - 1;
    let depth = before === NONE ? 0 : positionIds[before]! + 1;
    parents[cursor] = before;
    positionIds[cursor] = depth;
    for (let j = cursor + 1; j < cursor + len; j++) {
      parents[j] = j - 1;
      positionIds[j] = ++depth;
    }
    nodeAtLastPos[s + len - 1] = id;
    cursor += len;
    pushChildren(b, id);
    id++;
  }

  const sequences = nodePaths(lastPos, nodeAtLastPos, nodeParent);

  return {
    tokens,
    nodeStart,
    nodeLength,
    nodeParent,
    parents,
    positionIds,
    owner,
    ...(options.shareResponses
      ? { owners: ownersOf(sequences, promptLengths, nodeStart, nodeLength, size) }
      : {}),
    sequences,
    ratio: originalTokens === 0 ? 1 : size / originalTokens,
    originalTokens,
  };
}

/** Each sequence's path of nodes from the root: walked up from its last node; one buffer for all. */
function nodePaths(lastPos: Int32Array, nodeAtLastPos: Int32Array, nodeParent: Int32Array): Int32Array[] {
  const n = lastPos.length;
  const ends = new Int32Array(n);
  const pathLengths = new Int32Array(n);
  let pathTotal = 0;
  for (let i = 0; i < n; i++) {
    ends[i] = lastPos[i] === NONE ? NONE : nodeAtLastPos[lastPos[i]!]!;
    let d = 0;
    for (let v = ends[i]!; v !== NONE; v = nodeParent[v]!) d++;
    pathLengths[i] = d;
    pathTotal += d;
  }
  const pathBuffer = new Int32Array(pathTotal);
  const sequences: Int32Array[] = new Array(n);
  let offset = 0;
  for (let i = 0; i < n; i++) {
    const path = pathBuffer.subarray(offset, offset + pathLengths[i]!);
    let j = path.length;
    for (let v = ends[i]!; v !== NONE; v = nodeParent[v]!) path[--j] = v;
    sequences[i] = path;
    offset += path.length;
  }
  return sequences;
}

/** Calls `each(pos, k)` for sequence i's response token k at packed position pos, in order. */
function eachResponsePosition(
  path: Int32Array,
  promptLength: number,
  nodeStart: Int32Array,
  nodeLength: Int32Array,
  each: (pos: number, k: number) => void,
): void {
  let k = 0;
  for (const node of path) {
    const s = nodeStart[node]!;
    for (let pos = s; pos < s + nodeLength[node]!; pos++, k++)
      if (k >= promptLength) each(pos, k - promptLength);
  }
}

/** Every sequence's response positions, inverted: per packed token, the sequences that train on it. */
function ownersOf(
  sequences: readonly Int32Array[],
  promptLengths: Int32Array,
  nodeStart: Int32Array,
  nodeLength: Int32Array,
  size: number,
): { offsets: Int32Array; ids: Int32Array } {
  const visit = (i: number, each: (pos: number) => void) =>
    eachResponsePosition(sequences[i]!, promptLengths[i]!, nodeStart, nodeLength, each);
  const offsets = new Int32Array(size + 1);
  for (let i = 0; i < sequences.length; i++) visit(i, (pos) => offsets[pos + 1]!++);
  for (let j = 0; j < size; j++) offsets[j + 1]! += offsets[j]!;
  const ids = new Int32Array(offsets[size]!);
  const fill = offsets.slice(0, size);
  for (let i = 0; i < sequences.length; i++) visit(i, (pos) => (ids[fill[pos]!++] = i));
  return { offsets, ids };
}

/**
 * Per-response-token values of the sequences (`values[i][k]`: sequence i's response token k, such as
 * its policy version) in packed order: one per packed token (`none` where no sequence owns it), or,
 * with `shareResponses`, one per entry of `owners.ids` (a shared position has one per owner).
 */
export function packedResponseValues(
  p: Packing,
  promptLengths: ArrayLike<number>,
  values: readonly ArrayLike<number>[],
  none: number,
): Int32Array {
  const size = p.tokens.length;
  if (p.owners) {
    const out = new Int32Array(p.owners.ids.length);
    // Owners were listed in sequence order (ownersOf): walking the sequences in order refills them.
    const next = p.owners.offsets.slice(0, size);
    p.sequences.forEach((path, i) => {
      eachResponsePosition(path, promptLengths[i]!, p.nodeStart, p.nodeLength, (pos, k) => {
        out[next[pos]!++] = values[i]![k]!;
      });
    });
    return out;
  }
  const out = new Int32Array(size).fill(none);
  p.sequences.forEach((path, i) => {
    eachResponsePosition(path, promptLengths[i]!, p.nodeStart, p.nodeLength, (pos, k) => {
      out[pos] = values[i]![k]!;
    });
  });
  return out;
}

/** Recovers sequence i's tokens from a Packing (for tests and trainers). */
export function unpackSequence(p: Packing, i: number): Int32Array {
  const path = p.sequences[i];
  if (path === undefined) throw new RangeError(`no sequence ${i} in a packing of ${p.sequences.length}`);
  let n = 0;
  for (const node of path) n += p.nodeLength[node]!;
  const out = new Int32Array(n);
  let at = 0;
  for (const node of path) {
    const s = p.nodeStart[node]!;
    const len = p.nodeLength[node]!;
    out.set(p.tokens.subarray(s, s + len), at);
    at += len;
  }
  return out;
}

/** The wire form used inside JSON batches. */
export function packingToWire(p: Packing): PackingWire {
  const nodes: PackingWire['nodes'] = new Array(p.nodeStart.length);
  for (let i = 0; i < nodes.length; i++) nodes[i] = [p.nodeStart[i]!, p.nodeLength[i]!, p.nodeParent[i]!];
  return {
    tokens: Array.from(p.tokens),
    nodes,
    parents: Array.from(p.parents),
    sequences: p.sequences.map((s) => Array.from(s)),
    position_ids: Array.from(p.positionIds),
    ...(p.owners
      ? {
          owner_offsets: Array.from(p.owners.offsets),
          owner_ids: Array.from(p.owners.ids),
          loss_weight: Array.from(p.owners.offsets.subarray(1), (end, j) => end - p.owners!.offsets[j]!),
        }
      : { owner: Array.from(p.owner) }),
    ratio: p.ratio,
    original_tokens: p.originalTokens,
  };
}
