"""The blockwise tree BlockMask (stepwise_client.flex_mask) against the grid-built one and the dense mask.

Batches go through the library's own `packed_inputs` from lease JSON whose `packing` a small
prefix-tree packer below writes the way the pool does (docs/serving.md#packing): one trie per group,
prompts merged, each response token owned by its step, nodes in depth-first pre-order.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import unittest

import pytest

# A skip both runners read (unittest's discovery runs the client's torch-free tests with plain python3).
try:
    import torch
except ImportError:
    raise unittest.SkipTest("the FlexAttention mask needs torch (the train extra)") from None

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwise_client.flex_mask import allocation_peak, grid_block_mask, tree_block_mask, tree_mask_mod  # noqa: E402
from stepwise_client.tensors import PackedInputs, ResponseTokens, packed_inputs  # noqa: E402
from stepwise_client.trainer import packed_logprobs, tree_mask  # noqa: E402

VOCAB = 151_669


def pack_group(seqs: list[tuple[list[int], list[int]]]) -> dict[str, Any]:
    """A group's (prompt, response) steps as the pool's `packing` object."""
    tok: list[int] = []
    parent: list[int] = []
    own: list[int | None] = []
    kids: list[list[int]] = []
    roots: list[int] = []
    ends: set[int] = set()
    paths: list[list[int]] = []
    for s, (prompt, response) in enumerate(seqs):
        cur, path = -1, []
        for k, t in enumerate(prompt + response):
            in_prompt = k < len(prompt)
            siblings = roots if cur < 0 else kids[cur]
            # A prompt token follows any equal token; a response token only one no step owns yet.
            nxt = next((c for c in siblings if tok[c] == t and (in_prompt or own[c] is None)), None)
            if nxt is None:
                nxt = len(tok)
                tok.append(t), parent.append(cur), own.append(None), kids.append([]), siblings.append(nxt)
            if not in_prompt and own[nxt] is None:
                own[nxt] = s
            cur = nxt
            path.append(cur)
        ends.add(cur)
        paths.append(path)
    order: list[int] = []
    depth = [0] * len(tok)
    node_of: dict[int, int] = {}
    nodes: list[list[int]] = []
    stack = list(reversed(roots))
    while stack:  # pre-order; a node runs on while its token has one child and ends no sequence
        c = stack.pop()
        p = parent[c]
        if p < 0 or len(kids[p]) != 1 or p in ends:
            nodes.append([len(order), 0, node_of[p] if p >= 0 else -1])
        node_of[c] = len(nodes) - 1
        nodes[-1][1] += 1
        depth[c] = depth[p] + 1 if p >= 0 else 0
        order.append(c)
        stack.extend(reversed(kids[c]))
    at = {c: i for i, c in enumerate(order)}
    return {
        "tokens": [tok[c] for c in order],
        "position_ids": [depth[c] for c in order],
        "parents": [at[parent[c]] if parent[c] >= 0 else -1 for c in order],
        "nodes": nodes,
        "sequences": [list(dict.fromkeys(node_of[c] for c in path)) for path in paths],
        "original_tokens": sum(len(p) + len(r) for p, r in seqs),
    }


def group_json(g: int, rollouts: list[list[tuple[list[int], list[int]]]], rng: random.Random) -> dict[str, Any]:
    trajectories = [
        {
            "trajectory_uid": f"g{g}-t{t}",
            "advantage": rng.uniform(-1, 1),
            "steps": [{"step_index": i, "prompt_ids": p, "response_ids": r, "policy_version": 0} for i, (p, r) in enumerate(steps)],
        }
        for t, steps in enumerate(rollouts)
    ]
    return {"group_id": f"g{g}", "trajectories": trajectories, "packing": pack_group([s for steps in rollouts for s in steps])}


def agentic(seed: int, groups: int, rollouts: int, steps: int, system: int, response: int) -> dict[str, Any]:
    """bench:train's shape: a shared system prompt, a task per group, each step's prompt the last
    step's prompt + response + a tool result."""
    rng = random.Random(seed)
    toks = lambda n: [rng.randrange(VOCAB) for _ in range(n)]  # noqa: E731
    sys_prompt = toks(system)
    out = []
    for g in range(groups):
        task = toks(system // 5)
        runs = []
        for _ in range(rollouts):
            prompt, run = sys_prompt + task, []
            for _ in range(steps):
                r = toks(rng.randint(response // 2, response * 3 // 2))
                run.append((prompt, r))
                prompt = prompt + r + toks(10)
            runs.append(run)
        out.append(group_json(g, runs, rng))
    return {"policy_version": 0, "groups": out}


def single_turn(seed: int) -> dict[str, Any]:
    """GRPO groups of one-step rollouts with repeated and prefix-sharing responses, a long chain (one
    rollout, several blocks of it full), and groups smaller than a block."""
    rng = random.Random(seed)
    toks = lambda n: [rng.randrange(VOCAB) for _ in range(n)]  # noqa: E731
    out = []
    for g in range(5):
        prompt, first = toks(rng.randint(20, 60)), toks(30)
        responses = [toks(rng.randint(1, 60)) for _ in range(4)] + [first, first, first[:12] + toks(9)]
        out.append(group_json(g, [[(prompt, r)] for r in responses], rng))
    out.append(group_json(5, [[(toks(300), toks(45))]], rng))
    out.append(group_json(6, [[(toks(2), toks(1))]], rng))
    out.append(group_json(7, [[(toks(5), toks(3))], [(toks(4), [])]], rng))
    return {"policy_version": 0, "groups": out}


BATCHES = {
    "agentic": lambda: agentic(1, groups=3, rollouts=4, steps=3, system=150, response=20),
    "single_turn": lambda: single_turn(2),
}


@pytest.fixture(scope="module", params=sorted(BATCHES))
def batch(request: pytest.FixtureRequest) -> PackedInputs:
    return packed_inputs(BATCHES[request.param]())


def block_sets(bm: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(partial, full) (n, n) bool from a BlockMask's ordered kv tables."""

    def dense(num: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        num, idx = num[0, 0].long(), idx[0, 0].long()
        n = idx.shape[0]
        listed = torch.arange(idx.shape[1]).unsqueeze(0) < num.unsqueeze(1)
        out = torch.zeros((n, n + 1), dtype=torch.bool)
        out[torch.arange(n).unsqueeze(1).expand_as(idx), torch.where(listed, idx, n)] = True
        return out[:, :n]

    return dense(bm.kv_num_blocks, bm.kv_indices), dense(bm.full_kv_num_blocks, bm.full_kv_indices)


def expand(bm: Any, inputs: PackedInputs, rows: range | None = None) -> torch.Tensor:
    """The (query, kv) bool mask a BlockMask stands for: True in full blocks, its mask_mod in partial
    ones, False elsewhere; only the query blocks in `rows` (all by default)."""
    T = inputs.node_of.numel()
    size = bm.BLOCK_SIZE[0]
    partial, full = block_sets(bm)
    rows = rows or range(partial.shape[0])
    q = torch.arange(rows.start * size, min(rows.stop * size, T))
    kv = torch.arange(T)
    qb, kb = (q // size).unsqueeze(1), (kv // size).unsqueeze(0)
    by_mod = tree_mask_mod(inputs)(None, None, q.unsqueeze(1), kv.unsqueeze(0))
    return full[qb, kb] | (partial[qb, kb] & by_mod)


@pytest.mark.parametrize("block_size", [128, 16])
def test_blocks_equal_the_grid_built_ones(batch: PackedInputs, block_size: int) -> None:
    new, old = tree_block_mask(batch, block_size=block_size), grid_block_mask(batch, block_size=block_size)
    assert new.shape == old.shape and new.BLOCK_SIZE == old.BLOCK_SIZE
    # Both are exact, so the tables match entry for entry, the backward's q-side ones included.
    for table in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        for side in (table, table.replace("kv", "q")):
            assert torch.equal(getattr(new, side), getattr(old, side)), side
    new_partial, new_full = block_sets(new)
    assert bool(new_full.any()), "the batch should have full blocks to classify"
    assert not bool((new_partial | new_full).all()), "groups should leave blocks out"


@pytest.mark.parametrize("block_size", [128, 16])
def test_expands_to_the_dense_tree_mask(batch: PackedInputs, block_size: int) -> None:
    bm = tree_block_mask(batch, block_size=block_size)
    assert torch.equal(expand(bm, batch), tree_mask(batch)[0, 0])


def test_a_layout_it_cannot_vouch_for_gets_every_block_partial() -> None:
    # Node 1 (tokens 0-2) is a child of node 0 (tokens 3-5): the child comes first, not pre-order.
    n = 6
    zeros = torch.zeros(0)
    inputs = PackedInputs(
        input_ids=torch.arange(n),
        position_ids=torch.tensor([3, 4, 5, 0, 1, 2]),
        node_of=torch.tensor([1, 1, 1, 0, 0, 0]),
        node_ancestor=torch.tensor([[True, False], [True, True]]),
        predictor=zeros.long(),
        tokens=ResponseTokens(zeros.long(), zeros, zeros.bool(), zeros, zeros.long(), zeros.bool(), zeros.long(), zeros.long(), 0),
        original_tokens=n,
        group_bounds=[0, n],
    )
    bm = tree_block_mask(inputs, block_size=2)
    partial, full = block_sets(bm)
    assert bool(partial.all()) and not bool(full.any())
    dense = tree_mask(inputs)[0, 0]
    assert bool(dense[0, 3]), "the child's tokens see their parent's, which come later"
    assert torch.equal(expand(bm, inputs), dense)


@pytest.fixture(scope="module")
def policies() -> tuple[torch.nn.Module, torch.nn.Module]:
    from stepwise_client.models import load_policy

    flex = load_policy("tiny", seed=3, attn_implementation="flex_attention").model
    sdpa = load_policy("tiny", seed=3).model
    return flex, sdpa


@pytest.fixture(scope="module")
def agentic_batch() -> PackedInputs:
    return packed_inputs(BATCHES["agentic"]())


# Compiling FlexAttention on a CPU costs about a minute a batch: the agentic one covers the shapes.
def test_flex_logprobs_equal_the_dense_per_group_ones(agentic_batch: PackedInputs, policies: tuple[torch.nn.Module, torch.nn.Module]) -> None:
    batch = agentic_batch
    flex, sdpa = policies
    # The compiled CPU kernel skips what the block tables leave out and trusts full blocks unmasked,
    # so a wrong table shows in these numbers (eager flex would evaluate mask_mod everywhere).
    with torch.no_grad():
        by_flex = packed_logprobs(flex, batch)
        by_dense = packed_logprobs(sdpa, batch)
        by_eager = packed_logprobs(sdpa, batch, attention="eager")
    assert by_flex.numel() == batch.tokens.targets.numel() > 0
    assert torch.allclose(by_flex, by_dense, rtol=0, atol=1e-5), float((by_flex - by_dense).abs().max())
    assert torch.allclose(by_flex, by_eager, rtol=0, atol=1e-5), float((by_flex - by_eager).abs().max())


def test_a_60k_token_batch_builds_in_block_memory() -> None:
    data = agentic(7, groups=4, rollouts=8, steps=6, system=500, response=40)
    copies = -(-60_000 // packed_inputs(data).input_ids.numel())
    inputs = packed_inputs({**data, "groups": data["groups"] * copies})
    T = inputs.node_of.numel()
    assert T >= 60_000
    bm, peak = allocation_peak(lambda: tree_block_mask(inputs))
    n = -(-T // 128)
    # The index tables are the BlockMask format's (T/128)² entries; everything else is O(T).
    assert bm.kv_indices.numel() == bm.full_kv_indices.numel() == n * n
    assert peak is not None and peak < 64 * 2**20 < T * T, f"peak {peak} bytes at T={T}"
    partial, full = block_sets(bm)
    assert int((partial | full).sum()) < n * n // 10, "the groups' blocks only"
    # Spot-check query blocks against the definition, a few rows of the T×T mask at a time.
    for start in (0, n // 3, n // 2, n - 2):
        rows = range(start, start + 2)
        q = torch.arange(rows.start * 128, min(rows.stop * 128, T)).unsqueeze(1)
        nq, nk = inputs.node_of[q], inputs.node_of.unsqueeze(0)
        want = inputs.node_ancestor[nq, nk] & ((nq != nk) | (torch.arange(T).unsqueeze(0) <= q))
        assert torch.equal(expand(bm, inputs, rows), want)
