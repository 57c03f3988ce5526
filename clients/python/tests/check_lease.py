"""Leases from a live Stepwise server, checks the batch layout of docs/serving.md, prints a summary.

    python3 check_lease.py BASE_URL CHANNEL padded   # lease, ack; lease, nack; lease again, ack; 204
    python3 check_lease.py BASE_URL CHANNEL json     # error answers, then one json batch with GRPO
    STEPWISE_NO_NUMPY=1 python3 check_lease.py ...   # the same through the pure-Python arrays

The layout invariants are asserted here (any failure exits non-zero with a traceback); the JSON
summary on stdout lets test/python-client.test.ts compare the batch with what it submitted.
"""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwise_client import HAVE_NUMPY, Batch, StepwiseClient, StepwiseError  # noqa: E402
from stepwise_client.npz import read_npy_header, read_zip_directory  # noqa: E402

if HAVE_NUMPY:
    import numpy as np

ROW_MEMBERS = {
    "input_ids": "<i4",
    "attention_mask": "|u1",
    "position_ids": "<i4",
    "prompts": "<i4",
    "responses": "<i4",
    "response_mask": "|u1",
    "rm_scores": "<f4",
    "rollout_log_probs": "<f4",
    "response_versions": "<i4",
    "advantages": "<f4",
    "training_prompts": "<i4",
}
ROW_KEYS = {
    "prompt_lengths": "<i4",
    "response_lengths": "<i4",
    "truncated": "|u1",
    "has_log_probs": "|u1",
    "group_index": "<i4",
    "trajectory_index": "<i4",
    "step_index": "<i4",
    "policy_version": "<i4",
    "trajectory_rewards": "<f4",
    "training_prompt_lengths": "<i4",
    "off_policy": "|u1",
}


def dtype_of(array: Any) -> str:
    return array.dtype.str if HAVE_NUMPY else array.dtype


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def view_facts(batch: Batch) -> dict[str, Any]:
    """How the arrays relate to the response bytes: alignment, shared memory, numpy.load parity."""
    buf = memoryview(batch.body)
    offsets = [read_npy_header(buf, m.offset, m.size, m.name).data_offset for m in read_zip_directory(batch.body)]
    facts: dict[str, Any] = {"aligned": all(o % 64 == 0 for o in offsets), "members": len(offsets)}
    if not HAVE_NUMPY:
        facts["array_type"] = type(batch["input_ids"]).__name__
        return facts
    whole = np.frombuffer(batch.body, np.uint8)
    shared, from_body, writeable = True, True, True
    for array in batch.arrays.values():
        if array.size == 0:
            continue
        shared &= bool(np.shares_memory(array, whole))
        base = array
        while isinstance(base, np.ndarray) and base.base is not None:
            base = base.base
        if isinstance(base, memoryview):  # NumPy 2 keeps the exporter behind a memoryview
            base = base.obj
        from_body &= base is batch.body
        writeable &= bool(array.flags.writeable)
    loaded = np.load(io.BytesIO(bytes(batch.body)))
    same = sorted(loaded.files) == sorted(batch.arrays) and all(
        np.array_equal(loaded[k], batch.arrays[k]) for k in loaded.files
    )
    facts.update(
        array_type=type(batch["input_ids"]).__name__,
        shares_memory=shared,
        base_is_body=from_body,
        writeable=writeable,
        npz_load_equal=same,
    )
    return facts


def check_padded(batch: Batch, pad: int = 0) -> dict[str, Any]:
    """Asserts the verl layout of one padded batch and returns its rows in plain lists."""
    a = {name: batch[name] for name in {**ROW_MEMBERS, **ROW_KEYS, "group_ids": 0, "trajectory_uids": 0}}
    for name, dtype in {**ROW_MEMBERS, **ROW_KEYS}.items():
        check(dtype_of(a[name]) == dtype, f"{name}: dtype {dtype_of(a[name])}, expected {dtype}")
    for name in ("group_ids", "trajectory_uids"):
        check(dtype_of(a[name]).startswith("<U"), f"{name}: dtype {dtype_of(a[name])}")
    B, L = a["input_ids"].shape
    P, R = a["prompts"].shape[1], a["responses"].shape[1]
    check(L == P + R, f"input_ids width {L} != P {P} + R {R}")
    widths = {"input_ids": L, "attention_mask": L, "position_ids": L, "prompts": P, "training_prompts": P}
    for name in ROW_MEMBERS:
        check(tuple(a[name].shape) == (B, widths.get(name, R)), f"{name}: shape {a[name].shape}")
    for name in ROW_KEYS:
        check(tuple(a[name].shape) == (B,), f"{name}: shape {a[name].shape}")
    check(batch.rows == B, f"X-Stepwise-Rows {batch.rows} != {B} rows")

    v = {name: array.tolist() for name, array in a.items()}
    rows = []
    previous: tuple[int, int, int] | None = None
    for b in range(B):
        pl, rl = v["prompt_lengths"][b], v["response_lengths"][b]
        ids, mask, pos = v["input_ids"][b], v["attention_mask"][b], v["position_ids"][b]
        check(0 <= pl <= P and 0 <= rl <= R, f"row {b}: lengths {pl},{rl} outside {P},{R}")
        halves = ids[:P] == v["prompts"][b] and ids[P:] == v["responses"][b]
        check(halves, f"row {b}: prompts/responses are not the halves of input_ids")
        # Prompt left-padded to P, response right-padded to R; padding holds pad_token_id.
        check(mask == [0] * (P - pl) + [1] * (pl + rl) + [0] * (R - rl), f"row {b}: attention_mask {mask}")
        check(all(t == pad for t, m in zip(ids, mask) if not m), f"row {b}: padding is not {pad}")
        check(v["response_mask"][b] == mask[P:], f"row {b}: response_mask != attention_mask[:, P:]")
        running, expected = 0, []
        for m in mask:
            running += m
            expected.append(max(running - 1, 0))
        check(pos == expected, f"row {b}: position_ids {pos} != clip(cumsum(mask) - 1, 0)")
        scores, logprobs, adv = v["rm_scores"][b], v["rollout_log_probs"][b], v["advantages"][b]
        off_last = [s for j, s in enumerate(scores) if j != rl - 1]
        check(all(s == 0 for s in off_last), f"row {b}: rm_scores off the last response token")
        check(all(x == 0 for x in logprobs[rl:]), f"row {b}: logprobs on padding")
        check(len(set(adv[:rl])) <= 1, f"row {b}: advantage not constant over the response")
        # No generation here spans a weight switch: every response token is the row's version, padding 0.
        versions = v["response_versions"][b]
        check(versions == [v["policy_version"][b]] * rl + [0] * (R - rl), f"row {b}: response_versions {versions}")
        key = (v["group_index"][b], v["trajectory_index"][b], v["step_index"][b])
        in_range = 0 <= key[0] < len(v["group_ids"]) and 0 <= key[1] < len(v["trajectory_uids"])
        check(in_range, f"row {b}: index out of range")
        check(previous is None or key > previous, f"row {b}: rows not ordered group, trajectory, step")
        previous = key
        rows.append(
            {
                "group_id": v["group_ids"][key[0]],
                "trajectory_uid": v["trajectory_uids"][key[1]],
                "step_index": key[2],
                "policy_version": v["policy_version"][b],
                "prompt": ids[P - pl : P],
                "response": ids[P : P + rl],
                "logprobs": logprobs[:rl],
                "has_log_probs": v["has_log_probs"][b],
                "reward": scores[rl - 1] if rl else None,
                "advantage": adv[0] if rl else None,
                "advantage_on_padding": any(x != 0 for x in adv[rl:]),
                "trajectory_reward": v["trajectory_rewards"][b],
                "truncated": v["truncated"][b],
                "off_policy": v["off_policy"][b],
                # Unguided steps: the training prompt is the prompt itself.
                "training_prompt_is_prompt": v["training_prompts"][b] == v["prompts"][b]
                and v["training_prompt_lengths"][b] == pl,
            }
        )
    return {
        "lease_id": batch.lease_id,
        "expires_at": batch.expires_at,
        "rows": B,
        "prompt_width": P,
        "response_width": R,
        "truncated_steps": batch.truncated_steps,
        "dropped_steps": batch.dropped_steps,
        "group_ids": v["group_ids"],
        "trajectory_uids": v["trajectory_uids"],
        "steps": rows,
        **view_facts(batch),
    }


def lease_padded(client: StepwiseClient, channel: str) -> Batch | None:
    return client.lease(1, channel=channel, n_rollouts=4, advantage="grpo", format="padded", consumer="check-lease")


def run_padded(client: StepwiseClient, channel: str) -> dict[str, Any]:
    batches = []
    first = lease_padded(client, channel)
    check(first is not None, "no batch on the first lease")
    summary = check_padded(first)
    summary["settled"] = first.ack()
    batches.append(summary)

    # A failing update inside `with` nacks; the nacked group is served again before any newer one.
    failed_group = None
    try:
        with lease_padded(client, channel) as batch:
            failed_group = batch["group_ids"].tolist()
            raise RuntimeError("update failed")
    except RuntimeError:
        pass
    with lease_padded(client, channel) as batch:
        summary = check_padded(batch)
        summary["retried_after_nack"] = summary["group_ids"] == failed_group
    summary["settled"] = batch.state
    batches.append(summary)

    after = lease_padded(client, channel)
    return {"have_numpy": HAVE_NUMPY, "batches": batches, "after": None if after is None else after.lease_id}


def error_of(call: Any) -> dict[str, Any]:
    try:
        call()
    except StepwiseError as error:
        return {"status": error.status, "code": error.code, "field": error.field, "message": error.message}
    raise AssertionError("expected a StepwiseError")


def run_json(client: StepwiseClient, channel: str) -> dict[str, Any]:
    errors = {
        "batch_size_0": error_of(lambda: client.lease(0, channel=channel, format="json")),
        "bad_format": error_of(lambda: client.lease(1, channel=channel, format="csv")),  # type: ignore[arg-type]
        "padded_only_option": error_of(lambda: client.lease(1, channel=channel, format="json", prompt_length=4)),
        # Widths too small under overlong=reject: 422, and the lease is released at once.
        "overlong": error_of(
            lambda: client.lease(2, channel=channel, n_rollouts=4, prompt_length=1, response_length=1)
        ),
        "unknown_lease": error_of(lambda: client.ack("no-such-lease")),
    }
    # Arrow: the IPC stream is left in `body` (pyarrow reads it); nacked, so json gets the groups.
    arrow = client.lease(2, channel=channel, n_rollouts=4, format="arrow")
    check(arrow is not None and arrow.format == "arrow" and not arrow.arrays, "no arrow batch")
    arrow_summary = {"rows": arrow.rows, "continuation": arrow.body[:4].hex(), "settled": arrow.nack()}
    batch = client.lease(2, channel=channel, n_rollouts=4, advantage="grpo", format="json")
    check(batch is not None and batch.data is not None, "no json batch")
    groups = [
        {
            "group_id": g["group_id"],
            "trajectories": [
                {
                    "trajectory_uid": t["trajectory_uid"],
                    "reward": t["reward"],
                    "advantage": t.get("advantage"),
                    "steps": [
                        {k: s.get(k) for k in ("step_index", "prompt_ids", "response_ids", "reward", "advantage")}
                        for s in t["steps"]
                    ],
                }
                for t in g["trajectories"]
            ],
        }
        for g in batch.data["groups"]
    ]
    settled = batch.ack()
    return {
        "have_numpy": HAVE_NUMPY,
        "errors": errors,
        "arrow": arrow_summary,
        "format": batch.format,
        "rows": batch.rows,
        "lease_id": batch.lease_id,
        "groups": groups,
        "settled": settled,
        "stats": client.stats(channel),
        # Same version again: a no-op that exercises PUT and GET /v1/policy-version.
        "policy_version": {"set": client.set_policy_version(0), "read": client.policy_version()},
    }


def main() -> None:
    base_url, channel, mode = sys.argv[1:4]
    client = StepwiseClient(base_url, timeout=20, retries=2)
    result = run_padded(client, channel) if mode == "padded" else run_json(client, channel)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
