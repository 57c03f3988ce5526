"""Rollout-vs-trainer mismatch per step: how far the trainer's recomputed log-probs π are from the
engine's behaviour log-probs μ, for `StepwiseClient.report_mismatch` (docs/trainers.md#mismatch-telemetry).

The response tokens were sampled from μ, so over a step's tokens, with d = log μ − log π and r = π / μ:

    k1 = mean(d)                   unbiased estimate of KL(μ ‖ π); may be negative
    k3 = mean((r − 1) − log r)     unbiased estimate of KL(μ ‖ π) too, never negative, lower variance

(Schulman's k1 and k3 estimators, of the KL from the behaviour policy to the trainer's.) Only tokens
with a behaviour log-prob count, and not ActGuide's guided rows (their μ is on a hinted prompt).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from .client import Batch
from .tensors import ResponseTokens


def row_steps(batch: Batch | dict[str, Any]) -> list[tuple[str, int]]:
    """(trajectory_uid, step_index) of each row of a step-rows batch, in `ResponseTokens.sequence` order."""
    if isinstance(batch, Batch) and batch.format == "padded":
        uids = batch["trajectory_uids"].tolist()
        return [(str(uids[t]), int(s)) for t, s in zip(batch["trajectory_index"].tolist(), batch["step_index"].tolist())]
    data = batch.data if isinstance(batch, Batch) else batch
    if not isinstance(data, dict) or "groups" not in data:
        raise ValueError("row_steps: a padded or json batch is needed")
    if data.get("rows") == "trajectory":
        raise ValueError("row_steps: mismatch is reported per step; lease with rows='step'")
    return [(tr["trajectory_uid"], int(s["step_index"])) for g in data["groups"] for tr in g["trajectories"] for s in tr["steps"]]


def step_mismatch(
    tokens: ResponseTokens,
    prox_logp: torch.Tensor,
    steps: Sequence[tuple[str, int]],
    masked: torch.Tensor | None = None,
) -> list[dict[str, Any]]:
    """The report of each step with measurable tokens: `trajectory_uid`, `step_index`, `tokens`, `k1`,
    `k3`, `max_abs_diff` and `masked_fraction` (of its measured tokens, those `masked` marks: what the
    rollout correction left out of the loss)."""
    if len(steps) != tokens.rows:
        raise ValueError(f"step_mismatch: {len(steps)} step keys for {tokens.rows} rows")
    measured = (tokens.has_behaviour & ~tokens.off_policy).cpu()
    rows = tokens.rows
    seq = tokens.sequence.cpu()[measured]
    d = (tokens.behaviour_logp.cpu().double() - prox_logp.detach().cpu().double())[measured]
    # (r − 1) − log r with r = exp(−d), as expm1(−d) + d: no cancellation when r is near 1.
    k3 = (torch.expm1(-d) + d).clamp(min=0)
    out = (masked.cpu()[measured] if masked is not None else torch.zeros_like(d, dtype=torch.bool)).double()

    def per_step(values: torch.Tensor) -> torch.Tensor:
        return torch.zeros(rows, dtype=torch.float64).index_add(0, seq, values)

    count = per_step(torch.ones_like(d))
    sum_d, sum_k3, sum_out = per_step(d), per_step(k3), per_step(out)
    max_abs = torch.zeros(rows, dtype=torch.float64).scatter_reduce(0, seq, d.abs(), "amax", include_self=True)
    reports = []
    for row in count.nonzero().flatten().tolist():
        n = float(count[row])
        uid, index = steps[row]
        reports.append(
            {
                "trajectory_uid": uid,
                "step_index": index,
                "tokens": int(n),
                "k1": float(sum_d[row]) / n,
                "k3": float(sum_k3[row]) / n,
                "max_abs_diff": float(max_abs[row]),
                "masked_fraction": float(sum_out[row]) / n,
            }
        )
    return reports


def summarize(reports: Sequence[dict[str, Any]]) -> dict[str, float]:
    """A batch's reports in one line of metrics: token-weighted k1 and k3, the largest |Δ|, steps."""
    tokens = sum(r["tokens"] for r in reports)
    if tokens == 0:
        return {"mismatch_steps": 0.0}
    return {
        "mismatch_steps": float(len(reports)),
        "mismatch_k1": sum(r["k1"] * r["tokens"] for r in reports) / tokens,
        "mismatch_k3": sum(r["k3"] * r["tokens"] for r in reports) / tokens,
        "mismatch_max_abs_diff": max(r["max_abs_diff"] for r in reports),
    }


__all__ = ["row_steps", "step_mismatch", "summarize"]
