import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type PackInput, type Packing, packingToWire, packPrefixTree, unpackSequence } from './packing.js';

// ---- an independent model: an uncompressed trie, one object per position ----------------------------

interface ModelPosition {
  token: number;
  owner: number;
  children: Map<number, ModelPosition[]>;
}

/**
 * The merge rule written the slow, obvious way: prompt tokens follow any position with their id,
 * response tokens only an unowned one (and claim it); among several, the one along which the
 * sequence gets furthest, the earliest created on a tie. Returns each sequence's positions.
 */
function modelPack(inputs: readonly PackInput[]): { positions: number; paths: ModelPosition[][] } {
  const root: ModelPosition = { token: -1, owner: -1, children: new Map() };
  let positions = 0;
  const paths = inputs.map((input, id) => {
    const t = Array.from(input.tokens);
    const p = input.promptLength ?? t.length;
    const allowed = (c: ModelPosition, k: number) => k < p || c.owner === -1;
    const candidates = (at: ModelPosition, k: number) =>
      (at.children.get(t[k]!) ?? []).filter((c) => allowed(c, k));
    const reach = (at: ModelPosition, k: number): number =>
      k === t.length ? k : Math.max(k, ...candidates(at, k).map((c) => reach(c, k + 1)));
    const path: ModelPosition[] = [];
    let at = root;
    for (let k = 0; k < t.length; k++) {
      let next: ModelPosition | undefined;
      let best = -1;
      for (const c of candidates(at, k)) {
        const r = reach(c, k + 1);
        if (r > best) [next, best] = [c, r];
      }
      if (next === undefined) {
        next = { token: t[k]!, owner: -1, children: new Map() };
        at.children.set(t[k]!, [...(at.children.get(t[k]!) ?? []), next]);
        positions++;
      }
      if (k >= p) next.owner = id;
      path.push(next);
      at = next;
    }
    return path;
  });
  return { positions, paths };
}

/** The packed position of every token of sequence i, read through its node path. */
function packedPositions(p: Packing, i: number): number[] {
  const out: number[] = [];
  for (const node of p.sequences[i]!) {
    for (let j = 0; j < p.nodeLength[node]!; j++) out.push(p.nodeStart[node]! + j);
  }
  return out;
}

/** Checks every structural invariant of a packing against its inputs. */
function expectWellFormed(p: Packing, inputs: readonly PackInput[]): void {
  const n = p.tokens.length;
  expect(p.originalTokens).toBe(inputs.reduce((s, x) => s + x.tokens.length, 0));
  expect(p.parents.length).toBe(n);
  expect(p.positionIds.length).toBe(n);
  expect(p.owner.length).toBe(n);

  // Nodes tile the token array in pre-order: each starts where the previous ended, and a node's
  // parent comes before it and is still "open" (on the current root-to-node stack).
  let cursor = 0;
  const open: number[] = [];
  for (let i = 0; i < p.nodeStart.length; i++) {
    expect(p.nodeStart[i]).toBe(cursor);
    expect(p.nodeLength[i]).toBeGreaterThan(0);
    cursor += p.nodeLength[i]!;
    const parent = p.nodeParent[i]!;
    while (open.length > 0 && open[open.length - 1] !== parent) open.pop();
    if (parent === -1) expect(open).toEqual([]);
    else expect(open[open.length - 1]).toBe(parent);
    open.push(i);
    // Within a node tokens chain; the first token hangs off the parent's last token.
    const s = p.nodeStart[i]!;
    const before = parent === -1 ? -1 : p.nodeStart[parent]! + p.nodeLength[parent]! - 1;
    expect(p.parents[s]).toBe(before);
    for (let j = s + 1; j < s + p.nodeLength[i]!; j++) expect(p.parents[j]).toBe(j - 1);
  }
  expect(cursor).toBe(n);

  for (let j = 0; j < n; j++) {
    const parent = p.parents[j]!;
    expect(parent).toBeLessThan(j);
    expect(p.positionIds[j]).toBe(parent === -1 ? 0 : p.positionIds[parent]! + 1);
  }

  // Each sequence: exact tokens, a connected root-first path, position ids = indices, ownership.
  const responseOf = new Int32Array(n).fill(-1);
  inputs.forEach((input, i) => {
    expect(Array.from(unpackSequence(p, i))).toEqual(Array.from(input.tokens));
    const path = p.sequences[i]!;
    path.forEach((node, d) => {
      expect(p.nodeParent[node]).toBe(d === 0 ? -1 : path[d - 1]);
    });
    const promptLength = input.promptLength ?? input.tokens.length;
    packedPositions(p, i).forEach((pos, k) => {
      expect(p.positionIds[pos]).toBe(k);
      if (k >= promptLength) {
        expect(p.owner[pos]).toBe(i);
        expect(responseOf[pos]).toBe(-1);
        responseOf[pos] = i;
      }
    });
  });
  expect(Array.from(p.owner)).toEqual(Array.from(responseOf));
}

/** Checks the packing against the model: the same positions, shared by the same sequence tokens. */
function expectMatchesModel(p: Packing, inputs: readonly PackInput[]): void {
  expectWellFormed(p, inputs);
  const model = modelPack(inputs);
  expect(p.tokens.length).toBe(model.positions);
  expect(p.ratio).toBe(p.originalTokens === 0 ? 1 : p.tokens.length / p.originalTokens);
  // Two (sequence, index) pairs meet at one packed position iff the model puts them on one position.
  const modelIds = new Map<ModelPosition, number>();
  const packedOfModel = new Map<number, number>();
  inputs.forEach((_, i) => {
    const packed = packedPositions(p, i);
    model.paths[i]!.forEach((position, k) => {
      if (!modelIds.has(position)) modelIds.set(position, modelIds.size);
      const id = modelIds.get(position)!;
      if (!packedOfModel.has(id)) packedOfModel.set(id, packed[k]!);
      expect(packed[k]).toBe(packedOfModel.get(id));
    });
  });
  expect(new Set(packedOfModel.values()).size).toBe(packedOfModel.size);
}

const clawR1Example: PackInput[] = [
  { tokens: [1, 2, 3, 4, 5] },
  { tokens: [1, 2, 3, 6, 7] },
  { tokens: [1, 2, 3, 6, 7, 8, 9] },
];

describe('packPrefixTree', () => {
  it("reproduces Claw-R1's example: 17 tokens pack into 9", () => {
    const p = packPrefixTree(clawR1Example);
    expect(Array.from(p.tokens)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(packingToWire(p).nodes).toEqual([
      [0, 3, -1],
      [3, 2, 0],
      [5, 2, 0],
      [7, 2, 2],
    ]);
    expect(Array.from(p.parents)).toEqual([-1, 0, 1, 2, 3, 2, 5, 6, 7]);
    expect(Array.from(p.positionIds)).toEqual([0, 1, 2, 3, 4, 3, 4, 5, 6]);
    expect(Array.from(p.owner)).toEqual(new Array(9).fill(-1));
    expect(p.sequences.map((s) => Array.from(s))).toEqual([
      [0, 1],
      [0, 2],
      [0, 2, 3],
    ]);
    expect(p.originalTokens).toBe(17);
    expect(p.ratio).toBe(9 / 17);
    expectWellFormed(p, clawR1Example);
  });

  it('writes the wire form with plain arrays', () => {
    const wire = packingToWire(packPrefixTree(clawR1Example));
    expect(JSON.parse(JSON.stringify(wire))).toEqual({
      tokens: [1, 2, 3, 4, 5, 6, 7, 8, 9],
      nodes: [
        [0, 3, -1],
        [3, 2, 0],
        [5, 2, 0],
        [7, 2, 2],
      ],
      parents: [-1, 0, 1, 2, 3, 2, 5, 6, 7],
      sequences: [
        [0, 1],
        [0, 2],
        [0, 2, 3],
      ],
      position_ids: [0, 1, 2, 3, 4, 3, 4, 5, 6],
      owner: [-1, -1, -1, -1, -1, -1, -1, -1, -1],
      ratio: 9 / 17,
      original_tokens: 17,
    });
  });

  it('splits a node where a sequence ends inside it, and shares identical prompt-only sequences', () => {
    const inputs = [{ tokens: [1, 2, 3, 4] }, { tokens: [1, 2] }, { tokens: [1, 2] }];
    const p = packPrefixTree(inputs);
    expect(packingToWire(p).nodes).toEqual([
      [0, 2, -1],
      [2, 2, 0],
    ]);
    expect(p.sequences.map((s) => Array.from(s))).toEqual([[0, 1], [0], [0]]);
    expectWellFormed(p, inputs);
  });

  it('keeps separate response tokens for identical rollouts', () => {
    const rollout = { tokens: [7, 7, 7, 5, 6, 7], promptLength: 3 };
    const inputs = [rollout, rollout, rollout];
    const p = packPrefixTree(inputs);
    expect(p.tokens.length).toBe(3 + 3 * 3);
    expect(Array.from(p.owner)).toEqual([-1, -1, -1, 0, 0, 0, 1, 1, 1, 2, 2, 2]);
    expectWellFormed(p, inputs);
  });

  it('lets a response claim positions that an earlier sequence laid down as prompt', () => {
    const inputs = [
      { tokens: [1, 2, 3, 4, 5], promptLength: 5 },
      { tokens: [1, 2, 3, 4], promptLength: 2 },
      { tokens: [1, 2, 3, 9], promptLength: 2 },
    ];
    const p = packPrefixTree(inputs);
    // The first response claims 3, 4; the second may not follow the claimed 3 and branches.
    expect(Array.from(p.tokens)).toEqual([1, 2, 3, 4, 5, 3, 9]);
    expect(Array.from(p.owner)).toEqual([-1, -1, 1, 1, -1, 2, 2]);
    expectWellFormed(p, inputs);
  });

  it('packs a multi-step trajectory to the size of its last step, in any step order', () => {
    const steps = multiStepTrajectory([100, 101, 102], 4, 7);
    const last = steps[steps.length - 1]!;
    const p = packPrefixTree(steps);
    expect(p.tokens.length).toBe(last.tokens.length);
    expectWellFormed(p, steps);
    const reversed = [...steps].reverse();
    const r = packPrefixTree(reversed);
    expect(r.tokens.length).toBe(last.tokens.length);
    expectWellFormed(r, reversed);
  });

  it('finds each trajectory its own earlier response when sibling responses start alike', () => {
    // Every response starts with the same "<think>" token and every tool result with the same
    // token, so each step k+1 must pick its own trajectory's step-k branch among look-alikes.
    const system = [100, 101, 102, 103];
    const trajectories = [0, 1, 2, 3].map((seed) => multiStepTrajectory(system, 5, seed));
    const byStep = trajectories[0]!.flatMap((_, k) => trajectories.map((steps) => steps[k]!));
    const p = packPrefixTree(byStep);
    const lastLengths = trajectories.map((steps) => steps[steps.length - 1]!.tokens.length);
    expect(p.tokens.length).toBe(system.length + lastLengths.reduce((s, n) => s + n - system.length, 0));
    expectWellFormed(p, byStep);
  });

  it('looks past a nested fork to find the longest match', () => {
    const inputs = [
      { tokens: [1, 2, 5, 1], promptLength: 2 },
      { tokens: [1, 2, 5, 6, 9], promptLength: 3 },
      { tokens: [1, 2, 5, 6, 7, 8], promptLength: 3 },
      { tokens: [1, 2, 5, 6, 7], promptLength: 2 },
      { tokens: [1, 2, 5, 6, 7, 8] },
    ];
    // The last sequence may enter the first 5 (which forks into two owned 6s, one leading on to
    // 7, 8) or the second (5, 6, 7 only): only looking past the nested fork shows the first is whole.
    const p = packPrefixTree(inputs);
    expect(p.tokens.length).toBe(12);
    expect(packedPositions(p, 4).map((pos) => p.owner[pos])).toEqual([-1, -1, 0, 2, 2, 2]);
    expectWellFormed(p, inputs);
  });

  it('is deterministic for the same input order', () => {
    const inputs = [
      { tokens: [5, 1, 2], promptLength: 1 },
      { tokens: [5, 1, 2, 3], promptLength: 1 },
      { tokens: [4, 4] },
      { tokens: [5, 1, 2], promptLength: 1 },
    ];
    expect(packPrefixTree(inputs)).toEqual(packPrefixTree(inputs));
  });

  it('handles empty batches and empty sequences', () => {
    const none = packPrefixTree([]);
    expect(none.tokens.length).toBe(0);
    expect(none.ratio).toBe(1);
    const inputs = [{ tokens: [] }, { tokens: [3, 4], promptLength: 0 }];
    const p = packPrefixTree(inputs);
    expect(Array.from(p.sequences[0]!)).toEqual([]);
    expect(Array.from(unpackSequence(p, 0))).toEqual([]);
    expectWellFormed(p, inputs);
  });

  it('accepts typed token arrays', () => {
    const inputs = [
      { tokens: Uint32Array.of(1, 2, 3), promptLength: 2 },
      { tokens: Int32Array.of(1, 2, 4), promptLength: 2 },
    ];
    const p = packPrefixTree(inputs);
    expect(Array.from(p.tokens)).toEqual([1, 2, 3, 4]);
    expectWellFormed(p, inputs);
  });

  it('rejects a prompt length outside the sequence', () => {
    expect(() => packPrefixTree([{ tokens: [1, 2], promptLength: 3 }])).toThrow(/inputs\[0\]\.promptLength/);
    expect(() => packPrefixTree([{ tokens: [1], promptLength: -1 }])).toThrow(RangeError);
    expect(() => packPrefixTree([{ tokens: [1], promptLength: 0.5 }])).toThrow(RangeError);
    expect(() => unpackSequence(packPrefixTree([]), 0)).toThrow(RangeError);
  });

  it('agrees with the model at nodes with enough children to be indexed', () => {
    // 23 children under [9, 8] and 30 under the root, with same-token siblings from owned responses;
    // then [9] splits the indexed node and later sequences look up children under its tail.
    const inputs: PackInput[] = [];
    const fan = (i: number) => ({ tokens: [9, 8, i % 23, (i * 7) % 5, i % 2], promptLength: 2 + (i % 4) });
    for (let i = 0; i < 60; i++) inputs.push(fan(i));
    for (let i = 0; i < 30; i++) inputs.push({ tokens: [i, 1, 2], promptLength: i % 2 });
    inputs.push({ tokens: [9] });
    for (let i = 60; i < 90; i++) inputs.push(fan(i));
    expectMatchesModel(packPrefixTree(inputs), inputs);
  });

  // Small alphabets make prefixes collide often; the wider one with more sequences reaches nodes
  // with enough children to switch to indexed lookup.
  for (const [alphabet, maxSequences, numRuns] of [
    [2, 12, 300],
    [3, 12, 300],
    [12, 40, 100],
  ] as const) {
    it(`matches the uncompressed-trie model (alphabet ${alphabet})`, () => {
      const sequence = fc
        .array(fc.integer({ min: 1, max: alphabet }), { maxLength: 10, size: 'max' })
        .chain((tokens) =>
          fc.record({
            tokens: fc.constant(tokens),
            promptLength: fc.option(fc.integer({ min: 0, max: tokens.length }), { nil: undefined }),
          }),
        );
      // Repeats and extensions of earlier sequences, as steps of real trajectories are.
      const batch = fc
        .array(fc.tuple(sequence, fc.nat(), fc.nat({ max: 3 })), { maxLength: maxSequences, size: 'max' })
        .map((draws) => {
          const inputs: PackInput[] = [];
          for (const [fresh, pickEarlier, mode] of draws) {
            const earlier = inputs[pickEarlier % Math.max(1, inputs.length)];
            if (earlier === undefined || mode === 0) inputs.push(fresh);
            else if (mode === 1) inputs.push(earlier);
            else {
              const tokens = [...Array.from(earlier.tokens), ...fresh.tokens];
              inputs.push({ tokens, promptLength: mode === 2 ? tokens.length : earlier.tokens.length });
            }
          }
          return inputs;
        });
      fc.assert(
        fc.property(batch, (inputs) => {
          expectMatchesModel(packPrefixTree(inputs), inputs);
        }),
        { numRuns },
      );
    });
  }
});

describe('packPrefixTree with shared responses (Claw-R1 prefix-tree merge)', () => {
  // Claw-R1's documented example read as steps: one prompt [1, 2, 3], three responses.
  const example: PackInput[] = [
    { tokens: [1, 2, 3, 4, 5], promptLength: 3 },
    { tokens: [1, 2, 3, 6, 7], promptLength: 3 },
    { tokens: [1, 2, 3, 6, 7, 8, 9], promptLength: 3 },
  ];

  it('packs the example into 9 of 17 tokens, against 11 with one owner per response token', () => {
    expect(packPrefixTree(example).tokens.length).toBe(11);
    const p = packPrefixTree(example, { shareResponses: true });
    expect(Array.from(p.tokens)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9]);
    expect(p.ratio).toBe(9 / 17);
    const wire = packingToWire(p);
    expect(wire.owner).toBeUndefined();
    expect(wire.loss_weight).toEqual([0, 0, 0, 1, 1, 2, 2, 1, 1]);
    expect(wire.owner_offsets).toEqual([0, 0, 0, 0, 1, 2, 4, 6, 7, 8]);
    expect(wire.owner_ids).toEqual([0, 0, 1, 2, 1, 2, 2, 2]);
  });

  it('is the plain trie of the tokens, with each sequence owning exactly its response positions', () => {
    const sequence = fc
      .array(fc.integer({ min: 1, max: 3 }), { maxLength: 10 })
      .chain((tokens) =>
        fc.record({ tokens: fc.constant(tokens), promptLength: fc.integer({ min: 0, max: tokens.length }) }),
      );
    fc.assert(
      fc.property(fc.array(sequence, { maxLength: 12 }), (inputs) => {
        const p = packPrefixTree(inputs, { shareResponses: true });
        // The plain trie: every token treated as prompt (already checked against the model above).
        const plain = packPrefixTree(inputs.map((x) => ({ tokens: x.tokens })));
        expect(Array.from(p.tokens)).toEqual(Array.from(plain.tokens));
        expect(Array.from(p.parents)).toEqual(Array.from(plain.parents));
        const owners: number[][] = Array.from(p.tokens, () => []);
        inputs.forEach((input, i) => {
          expect(Array.from(unpackSequence(p, i))).toEqual(input.tokens);
          packedPositions(p, i).forEach((pos, k) => {
            if (k >= input.promptLength) owners[pos]!.push(i);
          });
        });
        const { offsets, ids } = p.owners!;
        owners.forEach((list, j) => {
          expect(Array.from(ids.subarray(offsets[j]!, offsets[j + 1]!))).toEqual(list);
        });
        expect(p.tokens.length).toBeLessThanOrEqual(packPrefixTree(inputs).tokens.length);
      }),
      { numRuns: 300 },
    );
  });
});

/**
 * Steps of one trajectory: each prompt is the previous prompt + response + tool result. Responses
 * start with token 50 ("<think>") and tool results with 60, as in every trajectory; the rest are
 * tokens unique to `trajectory`.
 */
function multiStepTrajectory(system: number[], steps: number, trajectory: number): PackInput[] {
  let counter = 1000 * (trajectory + 1);
  const run = (n: number) => Array.from({ length: n }, () => counter++);
  const out: PackInput[] = [];
  let prompt = [...system];
  for (let k = 0; k < steps; k++) {
    const response = [50, ...run(4)];
    out.push({ tokens: [...prompt, ...response], promptLength: prompt.length });
    prompt = [...prompt, ...response, 60, ...run(2)];
  }
  return out;
}
