"""Partial rollouts in the Python client: each response token's policy version beside its behaviour
log-prob, and the mask a `partial_rollouts: "mask"` batch asks for (docs/serving.md#partial-rollouts).

The leased batches come from test/wire-schema.test.ts (STEPWISE_WIRE_CASES), which runs this file
with pytest; the other tests need no server. torch is imported inside the tests: `unittest discover`
(test/python-client.test.ts) imports this module on a Python that may not have it.
"""

from __future__ import annotations

import json
import os
import sys
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwise_client.client import Batch  # noqa: E402

CASES_FILE = os.environ.get("STEPWISE_WIRE_CASES")

SPANNED = {"response_ids": [10, 11, 12, 13, 14], "policy_version": 2, "version_spans": [[2, 2], [3, 2], [4, 1]]}


def test_a_steps_spans_expand_to_one_version_per_token_and_mask_all_but_the_last() -> None:
    from stepwise_client.tensors import masked_prefix, step_versions

    assert step_versions(SPANNED) == [2, 2, 3, 3, 4]
    assert step_versions({"response_ids": [1, 2], "policy_version": 7, "version_spans": None}) == [7, 7]
    assert masked_prefix(SPANNED, "mask") == 4
    assert masked_prefix(SPANNED, "train") == 0
    assert masked_prefix({**SPANNED, "version_spans": [[2, 5]]}, "mask") == 0


def _padded_batch(with_versions: bool) -> Batch:
    np = pytest.importorskip("numpy")
    i4 = lambda rows: np.array(rows, dtype=np.int32)  # noqa: E731
    u1 = lambda rows: np.array(rows, dtype=np.uint8)  # noqa: E731
    # Row 0: prompt 5 6, response 7 8 9 at versions 2 3 3, its first token masked by the server.
    # Row 1: prompt 6 (left-padded), response 7 8 at version 1, then padding.
    arrays = {
        "prompts": i4([[5, 6], [0, 6]]),
        "prompt_lengths": i4([2, 1]),
        "training_prompts": i4([[5, 6], [0, 6]]),
        "training_prompt_lengths": i4([2, 1]),
        "responses": i4([[7, 8, 9], [7, 8, 0]]),
        "response_lengths": i4([3, 2]),
        "response_mask": u1([[0, 1, 1], [1, 1, 0]]),
        "rollout_log_probs": np.array([[-0.5, -0.25, -0.125], [-1.0, -2.0, 0.0]], dtype=np.float32),
        "has_log_probs": u1([1, 1]),
        "off_policy": u1([0, 0]),
        "policy_version": i4([2, 1]),
    }
    if with_versions:
        arrays["response_versions"] = i4([[2, 3, 3], [1, 1, 0]])
    return Batch(lease_id="l", expires_at=0, format="padded", body=bytearray(), arrays=arrays, policy_version=4)


def test_padded_inputs_read_each_tokens_version_and_attend_to_masked_tokens() -> None:
    from stepwise_client.tensors import padded_inputs

    x = padded_inputs(_padded_batch(with_versions=True))
    assert x.tokens.targets.tolist() == [8, 9, 7, 8]
    assert x.tokens.versions.tolist() == [3, 3, 1, 1]
    assert x.tokens.behaviour_logp.tolist() == [-0.25, -0.125, -1.0, -2.0]
    # The masked token 7 of row 0 is context: attended to, not trained on.
    assert x.attention_mask.tolist() == [[1, 1, 1, 1, 1], [0, 1, 1, 1, 0]]
    # A batch from a server without the member: each row's policy_version.
    assert padded_inputs(_padded_batch(with_versions=False)).tokens.versions.tolist() == [2, 2, 1, 1]


def _partial_cases() -> list[dict[str, typing.Any]]:
    if not CASES_FILE:
        return []
    return [c for c in json.loads(Path(CASES_FILE).read_text())["cases"] if "partial" in c]


@pytest.mark.skipif(not CASES_FILE, reason="STEPWISE_WIRE_CASES names no leased batches")
def test_packed_inputs_of_a_leased_masked_batch_keep_versions_and_drop_masked_tokens() -> None:
    from stepwise_client.tensors import packed_inputs

    [case] = [c for c in _partial_cases() if c["name"] == "partial-packed"]
    data = case["batch"]
    assert data["partial_rollouts"] == "mask"
    steps = [s for g in data["groups"] for t in g["trajectories"] for s in t["steps"]]
    keys = [f"{s['trajectory_uid']}/{s['step_index']}" for s in steps]
    versions, trained = case["partial"]["versions"], case["partial"]["trained"]
    batch = Batch(lease_id=data["lease_id"], expires_at=data["expires_at"], format="json", body=bytearray(), data=data)
    x = packed_inputs(batch)
    kept = [(k, i) for k in keys for i, keep in enumerate(trained[k]) if keep]
    assert x.tokens.versions.tolist() == [versions[k][i] for k, i in kept]
    assert x.tokens.targets.tolist() == [steps[keys.index(k)]["response_ids"][i] for k, i in kept]
    # The same batch read as a "train" one keeps every token.
    everything = packed_inputs({**data, "partial_rollouts": "train"})
    assert everything.tokens.versions.tolist() == [v for k in keys for v in versions[k]]


@pytest.mark.skipif(not CASES_FILE, reason="STEPWISE_WIRE_CASES names no leased batches")
def test_stitched_rows_of_a_leased_masked_batch_carry_versions_and_the_mask() -> None:
    [case] = [c for c in _partial_cases() if c["name"] == "partial-rows"]
    typed = Batch(lease_id="l", expires_at=0, format="json", body=bytearray(), data=case["batch"]).wire()
    assert typed.partial_rollouts == "mask"
    rows = {t.trajectory_uid: t.rows[0] for g in typed.groups for t in g.trajectories}
    versions, trained = case["partial"]["versions"], case["partial"]["trained"]
    for uid, row in rows.items():
        # Every row is the prompt 1 2 3 (its step's policy_version: the first token's) then the response.
        key = f"{uid}/0"
        assert row.versions == [versions[key][0]] * 3 + versions[key]
        assert row.loss_mask == [0, 0, 0] + [int(t) for t in trained[key]]
