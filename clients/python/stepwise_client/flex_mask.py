"""The packed batch's tree attention mask as a FlexAttention `BlockMask`, built from the packing's structure.

`torch.nn.attention.flex_attention.create_block_mask` (uncompiled) evaluates the mask over the whole
T×T grid: about 10 bytes per element, 36 GB at 60k packed tokens. The packing says more than a grid
does: nodes are in depth-first pre-order with each node's tokens contiguous, so the tokens that see
token i are exactly the interval [i, reach(i)), reach(i) being where the subtree of i's node ends. A
block of queries then sees a block of keys iff some key's reach passes the query block's start, and
sees it fully iff every key precedes every query and the smallest reach covers the last query.
That is per-block arithmetic on O(T) reaches; only the BlockMask's own (T/BLOCK)² index tables remain.

    block_mask = tree_block_mask(inputs, "cuda")    # what trainer.flex_block_mask returns
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Callable

import torch

from .tensors import PackedInputs

BLOCK_SIZE = 128
# Elements of a node×node or block×block table worked on at once (bounds the temporaries).
_CHUNK = 1 << 18


def tree_mask_mod(inputs: PackedInputs, device: torch.device | str = "cpu") -> Callable[..., Any]:
    """mask_mod of the tree mask: kv's node is q's or an ancestor of it, and within one node kv ≤ q."""
    node = inputs.node_of.to(device)
    ancestor = inputs.node_ancestor.to(device)

    def mask_mod(b: Any, h: Any, q: Any, kv: Any) -> Any:
        nq, nk = node[q], node[kv]
        return ancestor[nq, nk] & ((nq != nk) | (kv <= q))

    return mask_mod


def token_reach(inputs: PackedInputs) -> torch.Tensor | None:
    """(T,) int64: the queries that see token i are [i, reach[i]). None when the layout is not the one
    this relies on (nodes in pre-order, each node's tokens contiguous, every subtree contiguous)."""
    node = inputs.node_of.to("cpu", torch.long)
    ancestor = inputs.node_ancestor.to("cpu")
    n_nodes = ancestor.shape[0]
    if node.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    if bool((node[1:] < node[:-1]).any()) or int(node[0]) < 0 or int(node[-1]) >= n_nodes:
        return None
    ids = torch.arange(n_nodes)
    rows = max(1, _CHUNK // max(n_nodes, 1))
    # ancestor[b, a]: a is b or an ancestor of b, so column a counts a's subtree in nodes (summed in
    # row chunks: a whole-matrix sum would make an int64 copy of it).
    size = torch.zeros(n_nodes, dtype=torch.long)
    for r0 in range(0, n_nodes, rows):
        size += ancestor[r0 : r0 + rows].sum(0)
    if bool((size < 1).any()):
        return None  # a node that is not its own ancestor: its tokens would not see themselves
    for r0 in range(0, n_nodes, rows):
        b = ids[r0 : r0 + rows].unsqueeze(1)
        # Pre-order means a's descendants are exactly the nodes a .. a + size[a] - 1.
        if not torch.equal((ids <= b) & (b < ids + size), ancestor[r0 : r0 + rows]):
            return None
    # Tokens of nodes a .. last descendant are contiguous (node_of is sorted): reach is where they end.
    node_end = torch.searchsorted(node, ids, right=True)
    return node_end[ids + size - 1][node]


def _ordered(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, n) bool → BlockMask's (1, 1, n) counts and (1, 1, n, n) indices: each row's listed blocks in
    ascending order, then the others ascending, as create_block_mask lays them out (its stable
    argsort takes seconds at thousands of blocks; ranks from a running count do not)."""
    n = blocks.shape[0]
    counts = blocks.sum(-1, dtype=torch.int32)
    indices = torch.empty((n, n), dtype=torch.int32)
    cols = torch.arange(n, dtype=torch.int32)
    rows = max(1, _CHUNK // max(n, 1))
    for r0 in range(0, n, rows):
        b = blocks[r0 : r0 + rows]
        # int32: a cumsum over bool takes a slow path, 20-40× slower here.
        listed_through = b.to(torch.int32).cumsum(-1, dtype=torch.int32)
        at = torch.where(b, listed_through - 1, counts[r0 : r0 + rows].unsqueeze(1) + cols - listed_through)
        indices[r0 : r0 + rows].scatter_(1, at.long(), cols.expand(b.shape[0], n))
    return counts.view(1, 1, n), indices.view(1, 1, n, n)


def tree_blocks(reach: torch.Tensor, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(partial, full): (n, n) bool over (query block, kv block) from the tokens' reaches, exact:
    partial holds some but not all allowed pairs, full holds only allowed pairs."""
    T = reach.numel()
    n = -(-T // block_size)
    pad = n * block_size - T
    # A block's largest reach decides whether it is seen at all, its smallest whether fully; the
    # padding of the last block lowers its smallest reach below any query, so it is never full.
    r_max = torch.nn.functional.pad(reach, (0, pad), value=0).view(n, block_size).amax(1)
    r_min = torch.nn.functional.pad(reach, (0, pad), value=-1).view(n, block_size).amin(1)
    start = torch.arange(n) * block_size
    end = start + block_size
    q, k = torch.arange(n).unsqueeze(1), torch.arange(n).unsqueeze(0)
    # i sees j iff i ≤ j < reach(i); a diagonal block always holds i = j.
    seen = (k == q) | ((k < q) & (r_max.unsqueeze(0) > start.unsqueeze(1)))
    full = (end.unsqueeze(0) - 1 <= start.unsqueeze(1)) & (r_min.unsqueeze(0) >= end.unsqueeze(1))
    return seen & ~full, full


def tree_block_mask(inputs: PackedInputs, device: torch.device | str = "cpu", block_size: int = BLOCK_SIZE) -> Any:
    """The tree mask as a BlockMask, built blockwise from the packing (never a T×T tensor).

    A packing whose layout `token_reach` cannot vouch for gets every block partial: still the right
    mask (mask_mod decides each element at run time), only without block sparsity."""
    T = inputs.node_of.numel()
    reach = token_reach(inputs)
    if reach is not None:
        partial, full = tree_blocks(reach, block_size)
    else:
        n = -(-T // block_size)
        partial, full = torch.ones((n, n), dtype=torch.bool), torch.zeros((n, n), dtype=torch.bool)
    return _block_mask(partial, full, block_size, T, tree_mask_mod(inputs, device), device)


def _block_mask(partial: torch.Tensor, full: torch.Tensor, block_size: int, T: int, mask_mod: Any, device: Any) -> Any:
    """A BlockMask from (n, n) partial/full block tables, its q-side tables (backward's) ordered here
    as well where this torch lets from_kv_blocks skip its own transpose."""
    from torch.nn.attention.flex_attention import BlockMask

    params = inspect.signature(BlockMask.from_kv_blocks).parameters
    kwargs: dict[str, Any] = {"BLOCK_SIZE": block_size, "mask_mod": mask_mod}
    if "seq_lengths" in params:
        kwargs["seq_lengths"] = (T, T)
    own_q = "compute_q_blocks" in params
    if own_q:
        kwargs["compute_q_blocks"] = False
    to = lambda pair: tuple(t.to(device) for t in pair)  # noqa: E731
    bm = BlockMask.from_kv_blocks(*to(_ordered(partial)), *to(_ordered(full)), **kwargs)
    if own_q:
        bm.q_num_blocks, bm.q_indices = to(_ordered(partial.t()))
        bm.full_q_num_blocks, bm.full_q_indices = to(_ordered(full.t()))
    return bm


def grid_block_mask(inputs: PackedInputs, device: torch.device | str = "cpu", block_size: int = BLOCK_SIZE) -> Any:
    """The former construction, `create_block_mask` over the T×T grid (~10 bytes per element on CPU
    uncompiled): kept as the reference the tests and bench:train compare against."""
    from torch.nn.attention.flex_attention import create_block_mask

    T = inputs.node_of.numel()
    mask_mod = tree_mask_mod(inputs, device)
    return create_block_mask(mask_mod, B=None, H=None, Q_LEN=T, KV_LEN=T, device=str(device), BLOCK_SIZE=block_size)


def allocation_peak(fn: Callable[[], Any]) -> tuple[Any, int | None]:
    """fn()'s result and the peak of the bytes torch's CPU allocator held for it, from the profiler's
    allocation events (tracemalloc does not see torch's allocations). None if the profiler has none."""
    from torch._C._profiler import _EventType

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn()
    events = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        event = stack.pop()
        stack.extend(event.children)
        if event.tag == _EventType.Allocation and event.extra_fields.device.type == "cpu":
            events.append((event.start_time_ns, event.extra_fields.alloc_size))
    if not events:
        return result, None
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return result, peak


def measure(build: Callable[[], Any], repeat: int = 1) -> dict[str, float | int | None]:
    """Median seconds of `repeat` plain calls and the allocation peak of one more, profiled (the
    profiler's bookkeeping would inflate the time)."""
    times = []
    for _ in range(max(1, repeat)):
        started = time.perf_counter()
        build()
        times.append(time.perf_counter() - started)
    _, peak = allocation_peak(build)
    return {"s": sorted(times)[len(times) // 2], "peak_bytes": peak}
