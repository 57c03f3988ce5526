"""A leased `format="padded"` batch as verl's `DataProto` (the `train` extra; `verl` itself optional).

    from stepwise_client.verl_adapter import to_data_proto

    batch = client.lease(groups, n_rollouts=n, advantage="grpo", format="padded",
                         prompt_length=max_prompt_length, response_length=max_response_length)
    with batch:
        data = to_data_proto(batch, temperature=rollout_temperature)
        ...  # old (and ref) log-probs, then the actor update, as verl's PPO trainer does

The keys, dtypes and shapes are the ones verl's rollout hands its PPO trainer (docs/trainers.md
lists where verl reads each). Rows train on their training prompt: a guided step's (ActGuide-RL)
hint-free `training_prompt_ids`, every other step's prompt, as in `tensors.padded_inputs`.

`rollout_log_probs` is left out when any row came without the engine's log-probs: verl's key is
all-or-nothing, and zeros would read as probability 1 to its bypass mode and rollout correction.
verl then recomputes `old_log_probs` with the actor (its default), and bypass mode refuses the batch.

With `verl` installed the result is a real `verl.protocol.DataProto`; without it, a `VerlBatch`
with the same three parts, so the same code can be tested where verl cannot be installed.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .client import Batch
from .tensors import padded_inputs


@dataclass
class VerlBatch:
    """`DataProto`'s three parts without verl: tensors by row, per-row numpy arrays, batch-wide info."""

    batch: dict[str, torch.Tensor]
    non_tensor_batch: dict[str, np.ndarray] = field(default_factory=dict)
    meta_info: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return next(iter(self.batch.values())).shape[0]


def to_data_proto(
    batch: Batch,
    *,
    temperature: float = 1.0,
    training_prompts: bool = True,
    meta_info: dict[str, Any] | None = None,
    use_verl: bool | None = None,
) -> Any:
    """verl's `DataProto` for a padded batch (a `VerlBatch` when verl is not installed).

    `temperature` must be the rollout engines' sampling temperature: verl's actor divides the
    logits by it before computing log-probs. `meta_info` entries are added to (and override) the
    ones set here. `use_verl=False` always builds a `VerlBatch`; `True` fails without verl.
    """
    a = batch.arrays
    if batch.format != "padded" or not a:
        raise ValueError("to_data_proto: lease the batch with format='padded'")
    x = padded_inputs(batch, training_prompts=training_prompts)
    P = x.prompt_width
    rm_scores = torch.from_numpy(a["rm_scores"]).float()
    # verl's masks are int64 (its rollout pads with the tokenizer and multiplies masks together).
    tensors: dict[str, torch.Tensor] = {
        # Copies, not views of input_ids: an in-place edit of one must not change the other.
        "prompts": x.input_ids[:, :P].clone(),
        "responses": x.input_ids[:, P:].clone(),
        "input_ids": x.input_ids,
        "attention_mask": x.attention_mask,
        "position_ids": x.position_ids,
        "response_mask": x.response_mask.long(),
        "rm_scores": rm_scores,
        # What verl's trainer sets from rm_scores when there is no KL-in-reward penalty.
        "token_level_scores": rm_scores.clone(),
        "token_level_rewards": rm_scores.clone(),
    }
    has_log_probs = np.asarray(a["has_log_probs"]).astype(bool)
    if has_log_probs.all():
        tensors["rollout_log_probs"] = torch.from_numpy(a["rollout_log_probs"]).float()
    if "advantages" in a:
        # Stepwise's advantages are per trajectory; verl's outcome estimators return them as returns too.
        advantages = torch.from_numpy(a["advantages"]).float()
        tensors["advantages"] = advantages
        tensors["returns"] = advantages.clone()

    def per_row(key: str) -> np.ndarray:
        return np.asarray(a[key])

    non_tensors: dict[str, np.ndarray] = {
        # verl's group key: its GRPO/RLOO baselines and prefix grouping read `uid`.
        "uid": per_row("group_ids")[per_row("group_index")].astype(object),
        "trajectory_uid": per_row("trajectory_uids")[per_row("trajectory_index")].astype(object),
        "step_index": per_row("step_index").astype(np.int64),
        "policy_version": per_row("policy_version").astype(np.int64),
        "has_log_probs": has_log_probs,
        "off_policy": per_row("off_policy").astype(bool),
        "truncated": per_row("truncated").astype(bool),
        "trajectory_reward": per_row("trajectory_rewards").astype(np.float32),
    }
    info: dict[str, Any] = {
        "temperature": float(temperature),
        # Real tokens per row: what verl's trainer sets and its workers read for the MFU metric.
        "global_token_num": x.attention_mask.sum(dim=-1).tolist(),
        "stepwise_lease_id": batch.lease_id,
        "stepwise_policy_version": batch.policy_version,
    }
    info.update(meta_info or {})

    data_proto = _data_proto_class(use_verl)
    if data_proto is None:
        return VerlBatch(batch=tensors, non_tensor_batch=non_tensors, meta_info=info)
    return data_proto.from_dict(tensors=tensors, non_tensors=non_tensors, meta_info=info)


def _data_proto_class(use_verl: bool | None) -> Any:
    if use_verl is False:
        return None
    if importlib.util.find_spec("verl") is None:
        if use_verl:
            raise ImportError("to_data_proto(use_verl=True): the verl package is not installed")
        return None
    # An installed verl that fails to import raises here rather than silently falling back.
    from verl import DataProto

    return DataProto


__all__ = ["VerlBatch", "to_data_proto"]
