"""Rollout correction (stepwise_client.rollout_corr), its use in `policy_loss`, and the mismatch
estimators (stepwise_client.mismatch), on small tensors whose expected values are worked out by hand
in the comments. `old_policy_loss` below is the loss as it was before the corrections, kept verbatim:
the default configuration must give the same numbers bit for bit.

torch is imported guardedly: `unittest discover` (test/python-client.test.ts) imports this module on
a Python without the train extra, and collects nothing from it; pytest runs it with torch.
"""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import torch

    from stepwise_client.client import Batch
    from stepwise_client.errors import StepwiseError
    from stepwise_client.mismatch import row_steps, step_mismatch, summarize
    from stepwise_client.models import Policy
    from stepwise_client.rollout_corr import (
        geometric_mask,
        rollout_correction,
        rs_bounds,
        sequence_is,
        sequence_mask,
        token_is,
        token_mask,
    )
    from stepwise_client.tensors import ResponseTokens
    from stepwise_client.trainer import LossConfig, Trainer, policy_loss
except ImportError:  # no torch: only unittest's discovery imports this, and finds no TestCase
    torch = None  # type: ignore[assignment]

# Two steps: tokens 0-1 are step 0, tokens 2-4 step 1, with ratios π_prox / μ of 3, 0.5 | 1.5, 0.8, 1.
RATIOS = [3.0, 0.5, 1.5, 0.8, 1.0]
SEQ = [0, 0, 1, 1, 1]


def _lr() -> Any:
    return torch.tensor([math.log(r) for r in RATIOS], dtype=torch.float64)


def _seq() -> Any:
    return torch.tensor(SEQ)


def _none() -> Any:
    return torch.zeros(5, dtype=torch.bool)


def _close(t: Any, values: list[float]) -> None:
    assert torch.allclose(t.double(), torch.tensor(values, dtype=torch.float64), atol=1e-12), (t.tolist(), values)


def test_token_is_truncates_each_ratio_at_the_threshold() -> None:
    c = token_is(_lr(), _none(), 2.0)
    _close(c.weights, [2.0, 0.5, 1.5, 0.8, 1.0])  # only the 3 is cut
    assert c.mask.all()
    assert c.stats["is_truncated_fraction"] == pytest.approx(1 / 5)
    assert c.stats["is_weight_mean"] == pytest.approx(5.8 / 5)


def test_sequence_is_weights_a_step_by_its_truncated_product() -> None:
    # Products: step 0 3 x 0.5 = 1.5, step 1 1.5 x 0.8 x 1 = 1.2.
    _close(sequence_is(_lr(), _none(), _seq(), 2, 2.0).weights, [1.5, 1.5, 1.2, 1.2, 1.2])
    cut = sequence_is(_lr(), _none(), _seq(), 2, 1.3)
    _close(cut.weights, [1.3, 1.3, 1.2, 1.2, 1.2])
    assert cut.stats["is_truncated_fraction"] == pytest.approx(2 / 5)


def test_icepop_token_mask_drops_tokens_outside_the_bounds() -> None:
    c = token_mask(_lr(), _none(), _seq(), 2, 0.6, 2.5)  # 3 and 0.5 are out
    assert c.mask.tolist() == [False, False, True, True, True]
    _close(c.weights, [1.0] * 5)
    assert c.stats["rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
    assert c.stats["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)


def test_sequence_mask_drops_whole_steps_on_their_product() -> None:
    # [0.8, 1.25]: step 0's 1.5 is out, step 1's 1.2 in; [0.8, 1.6] keeps both.
    assert sequence_mask(_lr(), _none(), _seq(), 2, 0.8, 1.25).mask.tolist() == [False, False, True, True, True]
    assert sequence_mask(_lr(), _none(), _seq(), 2, 0.8, 1.6).mask.all()


def test_geometric_mask_drops_whole_steps_on_their_geometric_mean() -> None:
    # Geometric means: step 0 sqrt(1.5) = 1.2247, step 1 1.2^(1/3) = 1.0627; [1/1.1, 1.1] keeps step 1 only.
    c = geometric_mask(_lr(), _none(), _seq(), 2, 1 / 1.1, 1.1)
    assert c.mask.tolist() == [False, False, True, True, True]
    assert geometric_mask(_lr(), _none(), _seq(), 2, 1 / 1.25, 1.25).mask.all()


def test_exempt_tokens_keep_weight_one_stay_in_and_leave_the_step_products() -> None:
    exempt = torch.tensor([True, False, False, False, False])
    c = rollout_correction(
        torch.tensor([math.log(r) for r in RATIOS]),
        torch.zeros(5),
        exempt,
        _seq(),
        2,
        rollout_is="sequence",
        rollout_is_threshold=10.0,
        rollout_rs="sequence",
        rollout_rs_threshold=1.9,
    )
    # Step 0's product is 0.5 alone (the exempt 3 is left out): inside [1/1.9, 1.9]? 0.5 < 0.526: masked.
    _close(c.weights, [1.0, 0.5, 1.2, 1.2, 1.2])
    assert c.mask.tolist() == [True, False, True, True, True]


def test_rs_bounds_default_to_the_reciprocal_and_refuse_nonsense() -> None:
    assert rs_bounds(2.0, None) == (0.5, 2.0)
    assert rs_bounds(5.0, 0.5) == (0.5, 5.0)
    with pytest.raises(ValueError):
        rs_bounds(None, None)
    with pytest.raises(ValueError):
        rs_bounds(0.5, 2.0)
    with pytest.raises(ValueError):
        LossConfig(rollout_rs="token")  # no threshold
    with pytest.raises(ValueError):
        LossConfig(rollout_rs="tokens", rollout_rs_threshold=2.0)  # type: ignore[arg-type]


def _tokens(behaviour: list[float], adv: list[float], seq: list[int], has: list[bool] | None = None, off: list[bool] | None = None) -> Any:
    n = len(behaviour)
    return ResponseTokens(
        targets=torch.arange(n),
        behaviour_logp=torch.tensor(behaviour),
        has_behaviour=torch.tensor(has if has is not None else [True] * n),
        advantages=torch.tensor(adv),
        sequence=torch.tensor(seq),
        off_policy=torch.tensor(off if off is not None else [False] * n),
        staleness=torch.zeros(n, dtype=torch.long),
        versions=torch.zeros(n, dtype=torch.long),
        rows=max(seq) + 1,
    )


def test_policy_loss_by_hand_with_and_without_corrections() -> None:
    # π_θ = π_prox (first epoch): ratio 1, so each token's term is -A·w. π_prox / μ = 3, 0.5, 1.
    prox = torch.tensor([-1.0, -2.0, -0.5])
    tokens = _tokens([-1.0 - math.log(3), -2.0 - math.log(0.5), -0.5], [1.0, -1.0, 2.0], [0, 1, 2])
    # Default (token IS at 2): weights 2, 0.5, 1 → terms -2, 0.5, -2 → mean -3.5 / 3.
    loss, stats = policy_loss(prox.clone(), prox, tokens)
    assert float(loss) == pytest.approx(-3.5 / 3, abs=1e-6)
    assert stats["is_truncated_fraction"] == pytest.approx(1 / 3)
    assert stats["rollout_rs_masked_fraction"] == 0.0
    # IcePop [0.6, 2.5] leaves the third token alone, and the mean is over it only: -2 / 1.
    icepop = LossConfig(rollout_rs="icepop", rollout_rs_threshold=2.5, rollout_rs_threshold_lower=0.6)
    loss, stats = policy_loss(prox.clone(), prox, tokens, icepop)
    assert float(loss) == pytest.approx(-2.0, abs=1e-6)
    assert stats["rollout_rs_masked_fraction"] == pytest.approx(2 / 3)
    # No IS: terms -1, 1, -2 → -2 / 3. rollout_is_threshold overrides is_cap: 1.5 → terms -1.5, 0.5, -2.
    assert float(policy_loss(prox.clone(), prox, tokens, LossConfig(rollout_is=None))[0]) == pytest.approx(-2 / 3, abs=1e-6)
    assert float(policy_loss(prox.clone(), prox, tokens, LossConfig(rollout_is_threshold=1.5))[0]) == pytest.approx(-3.0 / 3, abs=1e-6)


def old_policy_loss(logp: Any, prox_logp: Any, tokens: Any, config: Any) -> Any:
    """policy_loss before rollout corrections (commit 166034d), kept as the reference."""
    device = logp.device
    prox = prox_logp.detach().to(device)
    has = tokens.has_behaviour.to(device)
    behaviour = torch.where(has, tokens.behaviour_logp.to(device), prox)
    guided = tokens.off_policy.to(device) & has
    adv = tokens.advantages.to(device)
    anchor = torch.where(guided, behaviour, prox)
    ratio = torch.exp((logp - anchor).clamp(-20.0, 20.0))
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    per_token = torch.maximum(-adv * ratio, -adv * clipped)
    if config.dual_clip is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * config.dual_clip), per_token)
    raw_weight = torch.exp((prox - behaviour).clamp(-20.0, 20.0))
    weight = torch.where(guided, torch.ones_like(raw_weight), raw_weight.clamp(max=config.is_cap))
    per_token = per_token * weight
    seq = tokens.sequence.to(device)
    n_seq = max(tokens.rows, 1)
    if config.aggregation == "token-mean":
        loss = per_token.sum() / max(per_token.numel(), 1)
    else:
        sums = torch.zeros(n_seq, device=device, dtype=per_token.dtype).index_add(0, seq, per_token)
        if config.aggregation == "seq-mean-token-mean":
            counts = torch.zeros(n_seq, device=device).index_add(0, seq, torch.ones_like(per_token))
            loss = (sums / counts.clamp(min=1)).sum() / max(int((counts > 0).sum()), 1)
        else:
            loss = sums.sum() / (n_seq * config.norm_length)
    n = max(per_token.numel(), 1)
    stats = {
        "is_weight_mean": float(weight.sum()) / n,
        "is_truncated_fraction": float(((raw_weight > config.is_cap) & ~guided).float().sum()) / n,
    }
    return loss, stats


@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
@pytest.mark.parametrize("is_cap", [2.0, 0.7, 5.0])
def test_the_default_correction_is_the_old_loss_bit_for_bit(aggregation: str, is_cap: float) -> None:
    g = torch.Generator().manual_seed(7)
    n = 64
    seq = torch.sort(torch.randint(0, 9, (n,), generator=g)).values
    tokens = ResponseTokens(
        targets=torch.arange(n),
        behaviour_logp=-torch.rand(n, generator=g) * 3,
        has_behaviour=torch.rand(n, generator=g) > 0.2,
        advantages=torch.randn(n, generator=g),
        sequence=seq,
        off_policy=torch.rand(n, generator=g) > 0.8,
        staleness=torch.zeros(n, dtype=torch.long),
        versions=torch.zeros(n, dtype=torch.long),
        rows=10,  # one step with no tokens
    )
    prox = -torch.rand(n, generator=g) * 3
    config = LossConfig(is_cap=is_cap, aggregation=aggregation)  # type: ignore[arg-type]
    for shift in (0.0, 0.3):  # a first epoch (π_θ = π_prox) and a later one
        logp = (prox + shift * torch.randn(n, generator=g)).requires_grad_()
        old_logp = logp.detach().clone().requires_grad_()
        new, stats = policy_loss(logp, prox, tokens, config)
        old, old_stats = old_policy_loss(old_logp, prox, tokens, config)
        new.backward()
        old.backward()
        assert torch.equal(new.detach(), old.detach())
        assert torch.equal(logp.grad, old_logp.grad)
        assert {k: stats[k] for k in old_stats} == old_stats


def test_step_mismatch_estimators_by_hand() -> None:
    # Step 0: d = log μ − log π = ln 2, −ln 2, so r = π / μ = 1/2, 2: k1 = 0, k3 = ((−1/2 + ln 2) + (1 − ln 2)) / 2 = 1/4.
    # Step 1: d = 0.1 three times: k1 = 0.1, k3 = e^−0.1 − 1 + 0.1; one of its tokens masked.
    # Step 2 has no behaviour log-probs and step 3 is guided: neither is reported.
    ln2 = math.log(2)
    behaviour = [-1.0, -2.0, -0.5, -0.6, -0.7, -1.0, -1.0]
    prox = torch.tensor([-1.0 - ln2, -2.0 + ln2, -0.6, -0.7, -0.8, -3.0, -3.0])
    tokens = _tokens(behaviour, [0.0] * 7, [0, 0, 1, 1, 1, 2, 3], has=[True] * 5 + [False, True], off=[False] * 6 + [True])
    masked = torch.tensor([False, False, False, True, False, True, True])
    steps = [("a", 0), ("a", 1), ("b", 0), ("c", 0)]
    reports = step_mismatch(tokens, prox, steps, masked=masked)
    assert [(r["trajectory_uid"], r["step_index"], r["tokens"]) for r in reports] == [("a", 0, 2), ("a", 1, 3)]
    assert reports[0]["k1"] == pytest.approx(0.0, abs=1e-7)
    assert reports[0]["k3"] == pytest.approx(0.25, abs=1e-7)
    assert reports[0]["max_abs_diff"] == pytest.approx(ln2, abs=1e-7)
    assert reports[0]["masked_fraction"] == 0.0
    assert reports[1]["k1"] == pytest.approx(0.1, abs=1e-7)
    assert reports[1]["k3"] == pytest.approx(math.exp(-0.1) - 0.9, abs=1e-7)
    assert reports[1]["max_abs_diff"] == pytest.approx(0.1, abs=1e-7)
    assert reports[1]["masked_fraction"] == pytest.approx(1 / 3)
    # Token-weighted over the batch: k3 = (2 · 0.25 + 3 · (e^−0.1 − 0.9)) / 5.
    summary = summarize(reports)
    assert summary["mismatch_k3"] == pytest.approx((0.5 + 3 * (math.exp(-0.1) - 0.9)) / 5, abs=1e-7)
    assert summary["mismatch_steps"] == 2.0
    with pytest.raises(ValueError):
        step_mismatch(tokens, prox, steps[:3])


def test_row_steps_follow_the_batch_rows() -> None:
    data = {
        "groups": [
            {"trajectories": [{"trajectory_uid": "t1", "steps": [{"step_index": 0}, {"step_index": 1}]}]},
            {"trajectories": [{"trajectory_uid": "t2", "steps": [{"step_index": 3}]}, {"trajectory_uid": "t3", "steps": []}]},
        ]
    }
    assert row_steps(data) == [("t1", 0), ("t1", 1), ("t2", 3)]
    np = pytest.importorskip("numpy")
    padded = Batch(
        lease_id="L",
        expires_at=0,
        format="padded",
        body=bytearray(),
        arrays={
            "trajectory_uids": np.array(["u0", "u1"]),
            "trajectory_index": np.array([0, 0, 1], dtype=np.int32),
            "step_index": np.array([0, 1, 0], dtype=np.int32),
        },
    )
    assert row_steps(padded) == [("u0", 0), ("u0", 1), ("u1", 0)]
    with pytest.raises(ValueError):
        row_steps({**data, "rows": "trajectory"})


class _Client:
    """What a Trainer asks of its client here: the version, and the reports (or a failure)."""

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.posted: list[tuple[str, list[dict[str, Any]]]] = []

    def policy_version(self) -> int:
        return 0

    def report_mismatch(self, lease_id: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
        if self.fail:
            raise StepwiseError(404, "not_found", f"lease {lease_id} does not exist")
        self.posted.append((lease_id, steps))
        return {"lease_id": lease_id, "steps": len(steps)}


def test_trainer_reports_mismatch_with_its_corrections_mask() -> None:
    # Two steps of one trajectory, d = log μ − log π: 0.5 | 0, 0. The trainer's IcePop at [0.8, 1.25]
    # masks the first token (ratio e^−0.5 = 0.61).
    data = {"groups": [{"trajectories": [{"trajectory_uid": "t", "steps": [{"step_index": 0}, {"step_index": 1}]}]}]}
    batch = Batch(lease_id="L1", expires_at=0, format="json", body=bytearray(), data=data)
    tokens = _tokens([-1.0, -1.0, -2.0], [1.0, 1.0, 1.0], [0, 1, 1])
    inputs = type("Inputs", (), {"tokens": tokens})()
    prox = torch.tensor([-1.5, -1.0, -2.0])
    client = _Client()
    icepop = LossConfig(rollout_rs="token", rollout_rs_threshold=1.25, rollout_rs_threshold_lower=0.8)
    trainer = Trainer(Policy(torch.nn.Linear(2, 2), None, "stub"), client, loss=icepop)  # type: ignore[arg-type]
    summary = trainer.report_mismatch(batch, inputs, prox)  # type: ignore[arg-type]
    [(lease, steps)] = client.posted
    assert lease == "L1"
    assert [(s["step_index"], s["tokens"], s["masked_fraction"]) for s in steps] == [(0, 1, 1.0), (1, 2, 0.0)]
    assert steps[0]["k1"] == pytest.approx(0.5) and steps[0]["k3"] == pytest.approx(math.exp(-0.5) - 0.5)
    assert summary["mismatch_reported"] == 1.0
    assert summary["mismatch_k3"] == pytest.approx((math.exp(-0.5) - 0.5) / 3)
    failing = Trainer(Policy(torch.nn.Linear(2, 2), None, "stub"), _Client(fail=True))  # type: ignore[arg-type]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert failing.report_mismatch(batch, inputs, prox)["mismatch_reported"] == 0.0  # type: ignore[arg-type]
    assert "not reported" in str(caught[0].message)
