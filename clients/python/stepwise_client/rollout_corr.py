"""Rollout correction: importance weights and rejection masks between the behaviour policy μ (the
engine's `rollout_log_probs`) and the proximal policy π_prox (the trainer's log-probs before the update).

Named after verl's `algorithm.rollout_correction` (docs/algo/rollout_corr.md at verl b178a3c):

- `rollout_is` weights each token by a truncated ratio, detached:
  `"token"`  w_t = min(π_prox(y_t) / μ(y_t), threshold)                        (token-level TIS)
  `"sequence"` w = min(Π_t π_prox / μ, threshold), one weight for a step's tokens  (sequence-level IS)
- `rollout_rs` masks tokens out of the loss (rejection sampling), a ratio outside [lower, upper]:
  `"token"`      per token (IcePop's mask; `"icepop"`, verl's `"token_k1"` are the same)
  `"sequence"`   a whole step, on Π_t π_prox / μ (sequence-level MIS; verl's `"seq_sum_k1"`)
  `"geometric"`  a whole step, on the geometric mean exp(mean_t log(π_prox / μ)) (verl's `"seq_mean_k1"`)

Ratios are taken in log space and bounded to exp(±20), as verl does. Tokens exempt from correction
(ActGuide's guided rows, whose μ is on a hinted prompt) keep weight 1, are never masked and add
nothing to a step's product or mean. A "sequence" is a step: a row of `ResponseTokens.sequence`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

RolloutIS = Literal["token", "sequence"]
RolloutRS = Literal["token", "sequence", "geometric", "icepop", "token_k1", "seq_sum_k1", "seq_mean_k1"]

#: Log-ratios are clamped to ±SAFETY_BOUND before exponentiating (exp(20) ≈ 4.9e8).
SAFETY_BOUND = 20.0

_RS_LEVELS = {
    "token": "token",
    "icepop": "token",
    "token_k1": "token",
    "sequence": "sequence",
    "seq_sum_k1": "sequence",
    "geometric": "geometric",
    "seq_mean_k1": "geometric",
}


@dataclass(frozen=True)
class Correction:
    """What a correction does to a batch's tokens."""

    #: (N,) detached importance weights (1 where nothing is weighted).
    weights: torch.Tensor
    #: (N,) bool: True where the token stays in the loss.
    mask: torch.Tensor
    stats: dict[str, float]


def log_ratios(prox_logp: torch.Tensor, behaviour_logp: torch.Tensor, exempt: torch.Tensor) -> torch.Tensor:
    """log π_prox − log μ per token, 0 on exempt tokens."""
    lr = prox_logp.detach() - behaviour_logp.to(prox_logp.device)
    return torch.where(exempt.to(lr.device), torch.zeros_like(lr), lr)


def _per_step_sum(values: torch.Tensor, sequence: torch.Tensor, rows: int) -> torch.Tensor:
    return torch.zeros(rows, dtype=values.dtype, device=values.device).index_add(0, sequence.to(values.device), values)


def token_is(log_ratio: torch.Tensor, exempt: torch.Tensor, threshold: float) -> Correction:
    """Token-level truncated IS: w_t = min(exp(log_ratio_t), threshold)."""
    raw = torch.exp(log_ratio.clamp(-SAFETY_BOUND, SAFETY_BOUND))
    weights = torch.where(exempt, torch.ones_like(raw), raw.clamp(max=threshold))
    n = max(raw.numel(), 1)
    return Correction(
        weights,
        torch.ones_like(exempt, dtype=torch.bool),
        {
            "is_weight_mean": float(weights.sum()) / n,
            "is_truncated_fraction": float(((raw > threshold) & ~exempt).float().sum()) / n,
        },
    )


def sequence_is(
    log_ratio: torch.Tensor, exempt: torch.Tensor, sequence: torch.Tensor, rows: int, threshold: float
) -> Correction:
    """Sequence-level truncated IS: each step's tokens get min(Π_t ratio_t, threshold)."""
    seq = sequence.to(log_ratio.device)
    raw = torch.exp(_per_step_sum(log_ratio, seq, rows).clamp(-SAFETY_BOUND, SAFETY_BOUND))[seq]
    weights = torch.where(exempt, torch.ones_like(raw), raw.clamp(max=threshold))
    n = max(raw.numel(), 1)
    return Correction(
        weights,
        torch.ones_like(exempt, dtype=torch.bool),
        {
            "is_weight_mean": float(weights.sum()) / n,
            "is_truncated_fraction": float(((raw > threshold) & ~exempt).float().sum()) / n,
        },
    )


def _mask(keep: torch.Tensor, exempt: torch.Tensor, sequence: torch.Tensor, rows: int) -> Correction:
    mask = keep | exempt
    n = max(mask.numel(), 1)
    seq = sequence.to(mask.device)
    masked_per_step = _per_step_sum((~mask).float(), seq, rows)
    steps_with_tokens = _per_step_sum(torch.ones_like(mask, dtype=torch.float32), seq, rows) > 0
    return Correction(
        torch.ones_like(mask, dtype=torch.float32),
        mask,
        {
            "rollout_rs_masked_fraction": float((~mask).float().sum()) / n,
            "rollout_rs_seq_masked_fraction": float((masked_per_step[steps_with_tokens] > 0).float().sum())
            / max(int(steps_with_tokens.sum()), 1),
        },
    )


def token_mask(
    log_ratio: torch.Tensor, exempt: torch.Tensor, sequence: torch.Tensor, rows: int, lower: float, upper: float
) -> Correction:
    """IcePop: a token whose ratio is outside [lower, upper] leaves the loss."""
    keep = (log_ratio >= math.log(lower)) & (log_ratio <= math.log(upper))
    return _mask(keep, exempt, sequence, rows)


def sequence_mask(
    log_ratio: torch.Tensor, exempt: torch.Tensor, sequence: torch.Tensor, rows: int, lower: float, upper: float
) -> Correction:
    """Sequence-level MIS: a step whose Π_t ratio_t is outside [lower, upper] leaves the loss whole."""
    seq = sequence.to(log_ratio.device)
    total = _per_step_sum(log_ratio, seq, rows)
    keep = ((total >= math.log(lower)) & (total <= math.log(upper)))[seq]
    return _mask(keep, exempt, sequence, rows)


def geometric_mask(
    log_ratio: torch.Tensor, exempt: torch.Tensor, sequence: torch.Tensor, rows: int, lower: float, upper: float
) -> Correction:
    """A step whose geometric-mean ratio exp(mean_t log ratio_t) is outside [lower, upper] leaves the loss whole."""
    seq = sequence.to(log_ratio.device)
    counted = _per_step_sum((~exempt).to(log_ratio.dtype), seq, rows)
    mean = _per_step_sum(log_ratio, seq, rows) / counted.clamp(min=1)
    keep = ((mean >= math.log(lower)) & (mean <= math.log(upper)))[seq]
    return _mask(keep, exempt, sequence, rows)


def rs_bounds(upper: float | None, lower: float | None) -> tuple[float, float]:
    """[lower, upper] of a rejection mask: the lower bound defaults to 1 / upper, as in verl."""
    if upper is None:
        raise ValueError("rollout_rs needs rollout_rs_threshold (the upper bound of the ratio)")
    lower = 1.0 / upper if lower is None else lower
    if not 0 < lower <= upper:
        raise ValueError(f"rollout_rs bounds must satisfy 0 < lower <= upper, got [{lower}, {upper}]")
    return lower, upper


def rs_level(rollout_rs: str) -> str:
    """`token`, `sequence` or `geometric`: what a `rollout_rs` name (verl's or IcePop's) masks on."""
    if rollout_rs not in _RS_LEVELS:
        raise ValueError(f"rollout_rs must be one of {sorted(_RS_LEVELS)}, got {rollout_rs!r}")
    return _RS_LEVELS[rollout_rs]


def rollout_correction(
    prox_logp: torch.Tensor,
    behaviour_logp: torch.Tensor,
    exempt: torch.Tensor,
    sequence: torch.Tensor,
    rows: int,
    *,
    rollout_is: RolloutIS | None = "token",
    rollout_is_threshold: float = 2.0,
    rollout_rs: RolloutRS | None = None,
    rollout_rs_threshold: float | None = None,
    rollout_rs_threshold_lower: float | None = None,
) -> Correction:
    """The weights of `rollout_is` (1 when None) and the mask of `rollout_rs` (all kept when None)."""
    exempt = exempt.to(prox_logp.device)
    lr = log_ratios(prox_logp, behaviour_logp, exempt)
    if rollout_is == "token":
        weighted = token_is(lr, exempt, rollout_is_threshold)
    elif rollout_is == "sequence":
        weighted = sequence_is(lr, exempt, sequence, rows, rollout_is_threshold)
    elif rollout_is is None:
        ones = torch.ones_like(exempt, dtype=torch.bool)
        weighted = Correction(torch.ones_like(lr), ones, {"is_weight_mean": 1.0, "is_truncated_fraction": 0.0})
    else:
        raise ValueError(f"rollout_is must be 'token', 'sequence' or None, got {rollout_is!r}")
    if rollout_rs is None:
        masked = _mask(torch.ones_like(exempt, dtype=torch.bool), exempt, sequence, rows)
    else:
        lower, upper = rs_bounds(rollout_rs_threshold, rollout_rs_threshold_lower)
        make = {"token": token_mask, "sequence": sequence_mask, "geometric": geometric_mask}[rs_level(rollout_rs)]
        masked = make(lr, exempt, sequence, rows, lower, upper)
    return Correction(weighted.weights, masked.mask, {**weighted.stats, **masked.stats})


__all__ = [
    "Correction",
    "RolloutIS",
    "RolloutRS",
    "SAFETY_BOUND",
    "geometric_mask",
    "log_ratios",
    "rollout_correction",
    "rs_bounds",
    "rs_level",
    "sequence_is",
    "sequence_mask",
    "token_is",
    "token_mask",
]
