"""Leases padded batches from a live pool, turns each into verl's DataProto, prints what came out.

    python tests/check_verl.py --pool URL --lease train:2:3:grpo --lease partial:1:2 --temperature 0.7

Each `--lease CHANNEL:GROUPS:N_ROLLOUTS[:ADVANTAGE]` is leased, converted with `to_data_proto` and
acked. Prints one JSON object: per lease, every key with its dtype, shape and values, next to the
leased arrays, for test/verl-adapter.test.ts to check against what it stored. Where `verl` imports,
the DataProto is real and verl's own functions are run on it too (the `verl` part of the report).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import pickle
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from stepwise_client.client import StepwiseClient  # noqa: E402
from stepwise_client.verl_adapter import to_data_proto  # noqa: E402


def described(value: Any) -> dict[str, Any]:
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape), "values": value.tolist()}
    return {"dtype": str(value.dtype), "shape": list(value.shape), "values": value.tolist()}


def verl_checks(data: Any) -> dict[str, Any]:
    """verl's own code on the DataProto: the calls its PPO trainer and workers make with these keys."""
    from verl import DataProto
    from verl.trainer.ppo import core_algos
    from verl.trainer.ppo.ray_trainer import compute_response_mask
    from verl.trainer.ppo.rollout_corr_helper import apply_bypass_mode
    from verl.workers.config import FSDPActorConfig
    from verl.workers.utils.padding import left_right_2_no_padding, no_padding_2_padding

    out: dict[str, Any] = {"is_data_proto": isinstance(data, DataProto)}
    b = data.batch
    out["response_mask_is_verls"] = bool(torch.equal(compute_response_mask(data), b["response_mask"]))

    def same(other: Any) -> bool:
        return all(torch.equal(other.batch[k], b[k]) for k in b.keys()) and all(
            np.array_equal(other.non_tensor_batch[k], data.non_tensor_batch[k]) for k in data.non_tensor_batch
        )

    # Round trips through the ways verl splits a batch across workers, ships it (Ray pickles it)
    # and joins the answers.
    out["chunk_concat_identity"] = same(DataProto.concat(data.chunk(2)))
    out["pickle_round_trip"] = same(pickle.loads(pickle.dumps(data)))
    if "rollout_log_probs" not in b.keys():
        try:
            apply_bypass_mode(data, None, None)
            out["bypass_mode_refuses"] = False
        except ValueError:
            out["bypass_mode_refuses"] = True
        return out
    old = DataProto.from_dict(tensors={"old_log_probs": b["rollout_log_probs"].clone()})
    data = data.union(old)
    b = data.batch
    update_keys = ["responses", "response_mask", "input_ids", "attention_mask", "position_ids", "old_log_probs", "advantages"]
    out["actor_update_keys_selectable"] = len(data.select(batch_keys=update_keys).batch.keys()) == len(update_keys)
    # On-policy (log_prob == old_log_prob) the clipped loss is minus the token-mean advantage.
    config = FSDPActorConfig(strategy="fsdp", ppo_mini_batch_size=1, ppo_micro_batch_size_per_gpu=1, rollout_n=1)
    loss, _ = core_algos.compute_policy_loss_vanilla(
        old_log_prob=b["old_log_probs"],
        log_prob=b["old_log_probs"],
        advantages=b["advantages"],
        response_mask=b["response_mask"],
        loss_agg_mode="token-mean",
        config=config,
    )
    out["pg_loss"] = float(loss)
    # verl's GRPO over each trajectory's last step (the only rewarded one here) reproduces Stepwise's.
    last = [i for i in range(len(data)) if i + 1 == len(data) or data.non_tensor_batch["trajectory_uid"][i + 1] != data.non_tensor_batch["trajectory_uid"][i]]
    final = data.select_idxs(last)
    adv, ret = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=final.batch["token_level_rewards"],
        response_mask=final.batch["response_mask"],
        index=final.non_tensor_batch["uid"],
    )
    out["grpo_max_abs_diff"] = float((adv - final.batch["advantages"]).abs().max())
    out["grpo_returns_equal"] = bool(torch.equal(adv, ret))
    # verl's padding-free path: the log-prob at each position predicts the next token, and
    # no_padding_2_padding takes columns [-R-1:-1]. Feeding it "next token ids" must give responses.
    td = left_right_2_no_padding(data.to_tensordict())
    rows = [seq[1:].tolist() + [-1] for seq in td["input_ids"].unbind(0)]
    shifted = torch.nested.as_nested_tensor([torch.tensor(r, dtype=torch.long) for r in rows], layout=torch.jagged)
    predicted = no_padding_2_padding(shifted, td)
    mask = b["response_mask"].bool()
    out["no_padding_round_trip"] = bool(torch.equal(predicted[mask], b["responses"][mask]))
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True)
    p.add_argument("--lease", action="append", required=True, help="CHANNEL:GROUPS:N_ROLLOUTS[:ADVANTAGE]")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--response-length", type=int)
    args = p.parse_args()
    client = StepwiseClient(args.pool)
    has_verl = importlib.util.find_spec("verl") is not None
    report: dict[str, Any] = {"has_verl": has_verl, "batches": {}}
    for spec in args.lease:
        channel, groups, n, *advantage = spec.split(":")
        batch = client.lease(
            int(groups),
            channel=channel,
            n_rollouts=int(n),
            advantage=advantage[0] if advantage else None,
            format="padded",
            response_length=args.response_length,
        )
        if batch is None:
            raise SystemExit(f"channel {channel}: no ready group to lease")
        with batch:
            data = to_data_proto(batch, temperature=args.temperature)
            report["batches"][channel] = {
                "class": type(data).__name__,
                "len": len(data),
                "tensors": {k: described(v) for k, v in data.batch.items()},
                "non_tensors": {k: described(v) for k, v in data.non_tensor_batch.items()},
                "meta_info": data.meta_info,
                "leased": {k: np.asarray(v).tolist() for k, v in batch.arrays.items()},
                "lease_id": batch.lease_id,
                "verl": verl_checks(data) if has_verl else None,
            }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
