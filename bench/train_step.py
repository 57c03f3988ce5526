"""bench:train's Python half: lease -> tensors -> forward + backward, packed against padded.

    python bench/train_step.py --pool URL --groups G --n-rollouts R --reps N [--model tiny] [--device cpu]

Each rep leases the same groups twice (nacking in between): once `format="json", pack="prefix_tree"`,
once `format="padded"`; times the lease (HTTP + decode), the tensors, and one forward + backward of
the policy-gradient loss. Then the packed batch's tree BlockMask: seconds and allocation peak of
building it blockwise (`flex_mask.tree_block_mask`, what the trainer uses) against the grid-built
`create_block_mask`, for the leased batch and for its groups repeated to 60k tokens (the grid only
up to 16k tokens: ~10 bytes per T² element). Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))

import torch  # noqa: E402

from stepwise_client.client import StepwiseClient  # noqa: E402
from stepwise_client.flex_mask import BLOCK_SIZE, grid_block_mask, measure, tree_block_mask  # noqa: E402
from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.tensors import PackedInputs, packed_inputs, padded_inputs  # noqa: E402
from stepwise_client.trainer import batch_logprobs, policy_loss  # noqa: E402


# The grid construction's peak is ~10 bytes per T² element: 2.6 GB at 16k tokens, 36 GB at 60k.
GRID_LIMIT_TOKENS = 16_000
LARGE_TOKENS = 60_000

_TABLES = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")


def mask_report(data: dict[str, Any]) -> dict[str, Any]:
    """The BlockMask's construction, blockwise against grid, on the leased packed batch and on its
    groups repeated past LARGE_TOKENS (groups are independent, so the repeat is a valid batch)."""
    batch = packed_inputs(data)
    copies = -(-LARGE_TOKENS // max(batch.input_ids.numel(), 1))
    large = packed_inputs({**data, "groups": data["groups"] * copies})
    tree_block_mask(batch)  # the first build imports FlexAttention: keep that out of the timings
    # Built on the CPU whatever --device says: the construction's memory is what this measures.
    out: dict[str, Any] = {
        "block_size": BLOCK_SIZE,
        "peak_method": "torch.profiler allocation events (profile_memory): peak bytes held by torch's CPU allocator during the build",
        "grid_limit_tokens": GRID_LIMIT_TOKENS,
    }
    for name, inputs in (("batch", batch), ("large", large)):
        T = inputs.input_ids.numel()
        new = tree_block_mask(inputs)
        row: dict[str, Any] = {
            "tokens": T,
            "groups": len(inputs.group_bounds) - 1,
            "blocks_per_side": int(new.kv_num_blocks.numel()),
            "listed_blocks": int(new.kv_num_blocks.sum() + new.full_kv_num_blocks.sum()),
            "full_blocks": int(new.full_kv_num_blocks.sum()),
            "blockwise": measure(lambda: tree_block_mask(inputs), repeat=5),
            "grid": None,
        }
        if T <= GRID_LIMIT_TOKENS:
            row["grid"] = measure(lambda: grid_block_mask(inputs))
            old = grid_block_mask(inputs)
            row["same_blocks"] = all(torch.equal(getattr(new, t), getattr(old, t)) for t in _TABLES)
        out[name] = row
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True)
    p.add_argument("--groups", type=int, required=True)
    p.add_argument("--n-rollouts", type=int, required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--model", default="tiny")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = load_policy(args.model, seed=0, dtype=args.dtype, device=args.device)
    model = policy.model
    model.train()
    client = StepwiseClient(args.pool, timeout=300.0, consumer="bench-train")
    results: dict[str, dict[str, list[float]]] = {}
    shape: dict[str, dict[str, float]] = {}
    packed_data: dict[str, Any] = {}
    for rep in range(args.reps + 1):  # rep 0 warms up
        for mode in ("packed", "padded"):
            started = time.perf_counter()
            if mode == "packed":
                batch = client.lease(args.groups, n_rollouts=args.n_rollouts, format="json", pack="prefix_tree", advantage="grpo", ttl_ms=600_000)
            else:
                batch = client.lease(args.groups, n_rollouts=args.n_rollouts, format="padded", advantage="grpo", ttl_ms=600_000)
            assert batch is not None, "nothing to lease"
            leased = time.perf_counter()
            inputs = packed_inputs(batch) if mode == "packed" else padded_inputs(batch)
            built = time.perf_counter()
            if mode == "packed":
                packed_data = batch.data
            logp = batch_logprobs(model, inputs)
            loss, _ = policy_loss(logp, logp.detach(), inputs.tokens)
            model.zero_grad(set_to_none=True)
            loss.backward()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            stepped = time.perf_counter()
            batch.nack()
            if isinstance(inputs, PackedInputs):
                computed, original = inputs.input_ids.numel(), inputs.original_tokens
            else:
                computed, original = inputs.input_ids.numel(), int(inputs.attention_mask.sum())
            shape[mode] = {"computed_tokens": computed, "original_tokens": original, "response_tokens": int(inputs.tokens.targets.numel())}
            if rep == 0:
                continue
            r = results.setdefault(mode, {"lease_s": [], "tensor_s": [], "step_s": []})
            r["lease_s"].append(leased - started)
            r["tensor_s"].append(built - leased)
            r["step_s"].append(stepped - built)
    med = {m: {k: statistics.median(v) for k, v in r.items()} for m, r in results.items()}
    for m in med:
        med[m]["tokens_per_s"] = shape[m]["original_tokens"] / med[m]["step_s"]
    mask = mask_report(packed_data)
    print(json.dumps({"model": args.model, "dtype": args.dtype, "device": args.device, "torch": torch.__version__, "shape": shape, "median": med, "runs": results, "mask": mask}))


if __name__ == "__main__":
    main()
