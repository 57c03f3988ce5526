"""Leased batches as torch tensors: the padded layout (verl's) and prefix-tree packed groups.

Both give the same response tokens in the same order (group → trajectory → step → token), so a loss
computed from either is the same number. The trainer's view of a guided step (ActGuide-RL) is its
hint-free `training_prompt_ids`; every other step's is its prompt.

A step generated across a weight switch has response tokens of several policy versions
(`version_spans`); each token carries its own (`ResponseTokens.versions`). On a channel with
`partial_rollouts: "mask"` the tokens before a step's last switch are left out of the loss: the
padded format's `response_mask` already says so, and a `json` batch's tokens are masked here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .client import Batch


@dataclass
class ResponseTokens:
    """Per response token of the batch, flat: what the loss needs besides the current log-probs."""

    targets: torch.Tensor  # (N,) int64 token ids
    behaviour_logp: torch.Tensor  # (N,) float32 the engine's log-probs (0 where missing)
    has_behaviour: torch.Tensor  # (N,) bool: the step came with rollout log-probs
    advantages: torch.Tensor  # (N,) float32
    sequence: torch.Tensor  # (N,) int64: which step (batch row) the token belongs to
    off_policy: torch.Tensor  # (N,) bool
    staleness: torch.Tensor  # (N,) int64: batch policy version minus the step's version
    versions: torch.Tensor  # (N,) int64: the policy version that produced each token
    rows: int  # steps in the batch


@dataclass
class PaddedInputs:
    input_ids: torch.Tensor  # (B, P+R) int64: training prompt left-padded to P, response right-padded to R
    attention_mask: torch.Tensor  # (B, P+R) int64
    position_ids: torch.Tensor  # (B, P+R) int64
    response_mask: torch.Tensor  # (B, R) bool
    prompt_width: int
    tokens: ResponseTokens


@dataclass
class PackedInputs:
    """All groups of a batch concatenated into one packed sequence with a tree attention mask."""

    input_ids: torch.Tensor  # (T,) int64
    position_ids: torch.Tensor  # (T,) int64
    node_of: torch.Tensor  # (T,) int64: the trie node (globally numbered) of each token
    node_ancestor: torch.Tensor  # (nodes, nodes) bool: [a, b] = b is a or an ancestor of a
    predictor: torch.Tensor  # (N,) int64: the packed position whose output predicts each response token
    tokens: ResponseTokens
    original_tokens: int
    #: Where each group's tokens start in the packed sequence, and the end: no attention crosses them.
    group_bounds: list[int] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        return self.input_ids.numel() / max(self.original_tokens, 1)


def step_versions(step: dict[str, Any]) -> list[int]:
    """The policy version of each response token of a `json` step: its `version_spans` expanded, else
    its `policy_version` throughout."""
    n = len(step["response_ids"])
    spans = step.get("version_spans")
    if not spans:
        return [int(step.get("policy_version") or 0)] * n
    out = [int(v) for v, count in spans for _ in range(count)][:n]
    return out + [out[-1] if out else 0] * (n - len(out))


def masked_prefix(step: dict[str, Any], partial_rollouts: str | None) -> int:
    """How many leading response tokens a `json` step leaves out of the loss: under
    `partial_rollouts: "mask"`, those before its last version switch (every span but the last)."""
    spans = step.get("version_spans")
    if partial_rollouts != "mask" or not spans or len(spans) < 2:
        return 0
    return min(sum(count for _, count in spans[:-1]), len(step["response_ids"]))


def padded_inputs(batch: Batch, *, training_prompts: bool = True) -> PaddedInputs:
    """A `format="padded"` batch as tensors; rows train on their training prompt (ActGuide) by default."""
    a = batch.arrays
    if a is None:
        raise ValueError("padded_inputs: the batch is not in the padded format")
    t = lambda key: torch.from_numpy(a[key])  # noqa: E731 - a view of the received bytes
    responses = t("responses").long()
    response_mask = t("response_mask").bool()
    B, R = responses.shape
    if training_prompts:
        prompts, prompt_lengths = t("training_prompts").long(), t("training_prompt_lengths").long()
    else:
        prompts, prompt_lengths = t("prompts").long(), t("prompt_lengths").long()
    P = prompts.shape[1]
    prompt_mask = torch.arange(P).unsqueeze(0) >= (P - prompt_lengths).unsqueeze(1)
    # Attention covers every real token; the loss mask (response_mask) may leave some of them out
    # (tool output inside a stitched row, tokens before a masked weight switch).
    real = torch.arange(R).unsqueeze(0) < t("response_lengths").long().unsqueeze(1)
    attention_mask = torch.cat([prompt_mask, real], dim=1).long()
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    rows = response_mask.nonzero(as_tuple=False)
    row, col = rows[:, 0], rows[:, 1]
    has_logp = t("has_log_probs").bool()
    version = batch.policy_version if batch.policy_version is not None else 0
    # A server without per-token versions: every token is its row's policy version.
    versions = t("response_versions").long() if "response_versions" in a else t("policy_version").long().unsqueeze(1).expand(B, R)
    tokens = ResponseTokens(
        targets=responses[row, col],
        behaviour_logp=t("rollout_log_probs").float()[row, col],
        has_behaviour=has_logp[row],
        advantages=(t("advantages").float()[row, col] if "advantages" in a else torch.zeros(len(row))),
        sequence=row,
        off_policy=t("off_policy").bool()[row],
        staleness=(version - t("policy_version").long())[row].clamp(min=0),
        rows=B,
        versions=versions[row, col],
    )
    return PaddedInputs(
        input_ids=torch.cat([prompts, responses], dim=1),
        attention_mask=attention_mask,
        position_ids=position_ids,
        response_mask=response_mask,
        prompt_width=P,
        tokens=tokens,
    )


def packed_inputs(batch: Batch | dict[str, Any]) -> PackedInputs:
    """A `format="json", pack="prefix_tree"` batch as one packed sequence (groups side by side)."""
    data = batch.data if isinstance(batch, Batch) else batch
    if not isinstance(data, dict) or "groups" not in data:
        raise ValueError("packed_inputs: the batch is not in the json format")
    version = data.get("policy_version") or 0
    ids: list[int] = []
    pos: list[int] = []
    parents: list[int] = []
    node_of: list[int] = []
    node_parent: list[int] = []
    predictor: list[int] = []
    cols: dict[str, list[Any]] = {k: [] for k in ("targets", "logp", "has", "adv", "seq", "off", "stale", "versions")}
    partial_rollouts = data.get("partial_rollouts")
    original = 0
    row = 0
    bounds = [0]
    for g in data["groups"]:
        packing = g.get("packing")
        if packing is None:
            raise ValueError(f"group {g.get('group_id')}: no packing (lease with pack='prefix_tree')")
        offset, node_offset = len(ids), len(node_parent)
        ids += packing["tokens"]
        pos += packing["position_ids"]
        parents += [p + offset if p >= 0 else -1 for p in packing["parents"]]
        for n, (start, length, parent) in enumerate(packing["nodes"]):
            node_parent.append(parent + node_offset if parent >= 0 else -1)
            node_of += [n + node_offset] * length
        original += packing["original_tokens"]
        bounds.append(len(ids))
        steps = [(tr, s) for tr in g["trajectories"] for s in tr["steps"]]
        if len(steps) != len(packing["sequences"]):
            raise ValueError(f"group {g.get('group_id')}: {len(steps)} steps but {len(packing['sequences'])} packed sequences")
        for (tr, step), path in zip(steps, packing["sequences"]):
            positions = [offset + packing["nodes"][n][0] + k for n in path for k in range(packing["nodes"][n][1])]
            prompt = step.get("training_prompt_ids") or step["prompt_ids"]
            response = step["response_ids"]
            if len(positions) != len(prompt) + len(response):
                raise ValueError(f"step {tr['trajectory_uid']}/{step['step_index']}: the packed path has {len(positions)} tokens, not {len(prompt) + len(response)}")
            logp = step.get("rollout_log_probs")
            advantage = tr.get("advantage", 0.0) or 0.0
            versions = step_versions(step)
            masked = masked_prefix(step, partial_rollouts)
            for k, token in enumerate(response):
                at = positions[len(prompt) + k]
                if ids[at] != token:
                    raise ValueError(f"step {tr['trajectory_uid']}/{step['step_index']}: packed token {at} is not response token {k}")
                if parents[at] < 0 or k < masked:
                    continue  # nothing predicts a root's first token; a masked token has no loss
                predictor.append(parents[at])
                cols["targets"].append(token)
                cols["logp"].append(logp[k] if logp else 0.0)
                cols["has"].append(bool(logp))
                cols["adv"].append(advantage)
                cols["seq"].append(row)
                cols["off"].append(bool(tr.get("off_policy")))
                cols["stale"].append(max(version - (step.get("policy_version") or 0), 0))
                cols["versions"].append(versions[k])
            row += 1
    n_nodes = len(node_parent)
    ancestor = torch.eye(n_nodes, dtype=torch.bool)
    for n in range(n_nodes):  # nodes come in pre-order: a parent's row is complete before its children
        if node_parent[n] >= 0:
            ancestor[n] |= ancestor[node_parent[n]]
    tokens = ResponseTokens(
        targets=torch.tensor(cols["targets"], dtype=torch.long),
        behaviour_logp=torch.tensor(cols["logp"], dtype=torch.float32),
        has_behaviour=torch.tensor(cols["has"], dtype=torch.bool),
        advantages=torch.tensor(cols["adv"], dtype=torch.float32),
        sequence=torch.tensor(cols["seq"], dtype=torch.long),
        off_policy=torch.tensor(cols["off"], dtype=torch.bool),
        staleness=torch.tensor(cols["stale"], dtype=torch.long),
        rows=row,
        versions=torch.tensor(cols["versions"], dtype=torch.long),
    )
    return PackedInputs(
        input_ids=torch.tensor(ids, dtype=torch.long),
        position_ids=torch.tensor(pos, dtype=torch.long),
        node_of=torch.tensor(node_of, dtype=torch.long),
        node_ancestor=ancestor,
        predictor=torch.tensor(predictor, dtype=torch.long),
        tokens=tokens,
        original_tokens=original,
        group_bounds=bounds,
    )
