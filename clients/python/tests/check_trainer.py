"""Leases one channel's groups twice (json + prefix-tree packing, then padded; nacked in between)
and prints, as JSON, what the trainer invariants need (test/trainer.test.ts asserts on it):

- exactness: the trainer's log-probs of the served response ids against the engine's
  `rollout_log_probs`, over the steps that carry them (token_source `engine`);
- packing: log-probs, loss and gradients from the packed batch against the padded one (fp32), with
  one owner per response token and with shared responses (Claw-R1's merge);
- staleness: each group's `staleness` / `stale`, and the per-token staleness the tensors carry.

    python tests/check_trainer.py --url URL --model DIR --channel C --groups G --n-rollouts N
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client import StepwiseClient  # noqa: E402
from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.tensors import packed_inputs, padded_inputs  # noqa: E402
from stepwise_client.trainer import LossConfig, packed_logprobs, padded_logprobs, policy_loss  # noqa: E402


def loss_and_grads(model, inputs, logprobs_of, config):
    model.zero_grad(set_to_none=True)
    logp = logprobs_of(model, inputs)
    loss, _ = policy_loss(logp, logp.detach(), inputs.tokens, config)
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return float(loss), grads


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", required=True, help="the engine's model: a folder or a preset")
    parser.add_argument("--seed", type=int, default=0, help="a preset's seed")
    parser.add_argument("--channel", default="train")
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--n-rollouts", type=int, required=True)
    parser.add_argument("--max-staleness", type=int, default=None)
    parser.add_argument("--ack", action="store_true", help="ack the padded lease instead of nacking it")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = load_policy(args.model, seed=args.seed).model
    client = StepwiseClient(args.url)
    common = dict(channel=args.channel, n_rollouts=args.n_rollouts, advantage="grpo", max_staleness=args.max_staleness)

    packed_batch = client.lease(args.groups, format="json", pack="prefix_tree", **common)
    if packed_batch is None:
        print(json.dumps({"leased": False}))
        return
    packed = packed_inputs(packed_batch)
    groups = [
        {"group_id": g["group_id"], "staleness": g["staleness"], "stale": g["stale"]} for g in packed_batch.data["groups"]
    ]
    sources = [s["token_source"] for g in packed_batch.data["groups"] for t in g["trajectories"] for s in t["steps"]]
    recompute = [t["recompute_log_probs"] for g in packed_batch.data["groups"] for t in g["trajectories"]]
    tool_steps = sum(
        1 for g in packed_batch.data["groups"] for t in g["trajectories"] for s in t["steps"] if s.get("tool_calls")
    )
    packed_batch.nack()

    # Claw-R1's rule: identical response prefixes of rollouts share positions (several owners each).
    shared_batch = client.lease(args.groups, format="json", pack="prefix_tree", share_responses=True, **common)
    shared = packed_inputs(shared_batch)
    shared_weights = [w for g in shared_batch.data["groups"] for w in g["packing"]["loss_weight"]]
    shared_batch.nack()

    padded_batch = client.lease(args.groups, format="padded", **common)
    padded = padded_inputs(padded_batch)
    padded_version = padded_batch.policy_version

    with torch.no_grad():
        lp_packed = packed_logprobs(model, packed)
        lp_padded = padded_logprobs(model, padded)
    exact = padded.tokens.has_behaviour
    config = LossConfig()
    loss_packed, grads_packed = loss_and_grads(model, packed, packed_logprobs, config)
    loss_padded, grads_padded = loss_and_grads(model, padded, padded_logprobs, config)
    loss_shared, grads_shared = loss_and_grads(model, shared, packed_logprobs, config)
    if args.ack:
        padded_batch.ack()
    else:
        padded_batch.nack()
    print(
        json.dumps(
            {
                "leased": True,
                "groups": groups,
                "batch_policy_version": padded_version,
                "token_sources": sources,
                "recompute_log_probs": recompute,
                "tool_call_steps": tool_steps,
                "response_tokens": int(padded.tokens.targets.numel()),
                "same_targets": bool(torch.equal(packed.tokens.targets, padded.tokens.targets)),
                "exact_tokens": int(exact.sum()),
                "exact_max_abs_diff": float((lp_padded - padded.tokens.behaviour_logp)[exact].abs().max()) if exact.any() else None,
                "packed_vs_padded_logprob_max_abs_diff": float((lp_packed - lp_padded).abs().max()),
                "loss_packed": loss_packed,
                "loss_padded": loss_padded,
                "grad_rel_diff": float((grads_packed - grads_padded).norm() / grads_padded.norm().clamp(min=1e-30)),
                "grad_norm": float(grads_padded.norm()),
                "packed_ratio": packed.ratio,
                "shared_ratio": shared.ratio,
                "shared_same_targets": bool(torch.equal(shared.tokens.targets, padded.tokens.targets)),
                "shared_max_loss_weight": max(shared_weights),
                "loss_shared": loss_shared,
                "shared_grad_rel_diff": float((grads_shared - grads_padded).norm() / grads_padded.norm().clamp(min=1e-30)),
                "token_staleness": sorted(set(padded.tokens.staleness.tolist())),
                "packed_token_staleness": sorted(set(packed.tokens.staleness.tolist())),
            }
        )
    )


if __name__ == "__main__":
    main()
