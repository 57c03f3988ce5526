"""A verl-style training loop on a Stepwise DataPool: lease -> tensors -> PPO update -> ack -> sync.

    python3 examples/train_loop.py --url http://127.0.0.1:8100 --batch-size 8 --n-rollouts 4

The PPO update and the weight sync are stand-ins (a masked mean, a counter); replace them with your
trainer's. Everything else is the real protocol, see docs/trainers.md. Uses torch when installed,
NumPy arrays when only NumPy is, and plain lists otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from stepwise_client import HAVE_NUMPY, Batch, StepwiseClient  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

# Token-level members of the padded batch that a PPO update reads.
TENSOR_KEYS = (
    "input_ids",
    "attention_mask",
    "position_ids",
    "prompts",
    "responses",
    "response_mask",
    "rm_scores",
    "rollout_log_probs",
    "advantages",
)


def to_batch_dict(batch: Batch) -> dict[str, Any]:
    """The DataProto-like dict of a padded batch: tensors when torch is there, else the arrays.

    `torch.from_numpy` shares memory with the NumPy views, which share it with the response bytes:
    no copy until `.to(device)`. Masks arrive as uint8; verl wants long attention masks and bool
    (or float) response masks.
    """
    arrays = {key: batch[key] for key in TENSOR_KEYS}
    if torch is None or not HAVE_NUMPY:
        return arrays
    tensors = {key: torch.from_numpy(value) for key, value in arrays.items()}
    tensors["input_ids"] = tensors["input_ids"].long()
    tensors["position_ids"] = tensors["position_ids"].long()
    tensors["attention_mask"] = tensors["attention_mask"].long()
    tensors["response_mask"] = tensors["response_mask"].bool()
    return tensors


def fake_ppo_update(data: dict[str, Any]) -> dict[str, float]:
    """Stands in for actor/critic updates: the mean advantage over real response tokens."""
    adv, mask = data["advantages"], data["response_mask"]
    if torch is not None and isinstance(adv, torch.Tensor):
        tokens = mask.sum().item()
        return {"tokens": tokens, "mean_advantage": (adv * mask).sum().item() / max(tokens, 1)}
    if HAVE_NUMPY:
        tokens = int(mask.sum())
        return {"tokens": tokens, "mean_advantage": float((adv * mask).sum()) / max(tokens, 1)}
    flat_adv = [a for row in adv.tolist() for a in row]
    flat_mask = [m for row in mask.tolist() for m in row]
    tokens = sum(flat_mask)
    return {"tokens": tokens, "mean_advantage": sum(a * m for a, m in zip(flat_adv, flat_mask)) / max(tokens, 1)}


def sync_weights_to_rollout_engines(version: int) -> None:
    """Stands in for pushing the new weights to vLLM/SGLang (NCCL broadcast, checkpoint reload...)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8100")
    parser.add_argument("--api-key", default=None, help="a key with the trainer scope")
    parser.add_argument("--channel", default="train")
    parser.add_argument("--batch-size", type=int, default=8, help="prompt groups per update")
    parser.add_argument("--n-rollouts", type=int, default=4, help="trajectories per group")
    parser.add_argument("--max-staleness", type=int, default=None, help="policy versions a group may lag")
    parser.add_argument("--steps", type=int, default=10, help="updates to run")
    parser.add_argument("--wait-ms", type=int, default=30_000, help="long-poll per lease")
    parser.add_argument("--ttl-ms", type=int, default=600_000, help="must exceed one update")
    parser.add_argument("--sync-every", type=int, default=1, help="updates between weight syncs")
    parser.add_argument("--drain", action="store_true", help="no group mixes policy versions")
    parser.add_argument("--max-idle", type=int, default=3, help="stop after this many empty leases in a row")
    args = parser.parse_args()

    client = StepwiseClient(args.url, api_key=args.api_key, consumer="train_loop.py")
    version = client.policy_version()
    idle = 0
    for step in range(args.steps):
        batch = client.lease(
            args.batch_size,
            channel=args.channel,
            n_rollouts=args.n_rollouts,
            max_staleness=args.max_staleness,
            wait_ms=args.wait_ms,
            ttl_ms=args.ttl_ms,
            advantage="grpo",
            format="padded",
        )
        if batch is None:  # nothing ready within wait_ms
            idle += 1
            if idle >= args.max_idle:
                break
            continue
        idle = 0
        # Acked when the block ends normally; nacked (groups re-served first) when the update raises.
        with batch:
            metrics = fake_ppo_update(to_batch_dict(batch))
        print(f"step {step}: {batch.rows} rows, lease {batch.lease_id} acked, {metrics}", flush=True)

        if (step + 1) % args.sync_every == 0:
            version += 1
            sync_weights_to_rollout_engines(version)
            # Right after the engines serve the new weights: new steps are stamped with this version.
            answer = client.set_policy_version(version, drain=args.drain)
            print(f"policy version {answer['version']}", flush=True)


if __name__ == "__main__":
    main()
