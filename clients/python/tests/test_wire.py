"""The generated wire (stepwise_client.wire) against its schema and against batches a server leased.

`STEPWISE_WIRE_CASES` names a JSON file of real leased batches, written by test/wire-schema.test.ts
(which runs this file with pytest); without it those tests skip. The schema checks need only the
checkout: schema/wire.schema.json is two folders up from clients/python.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import typing
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwise_client import wire  # noqa: E402
from stepwise_client.client import Batch  # noqa: E402
from stepwise_client.errors import StepwiseFormatError  # noqa: E402

SCHEMA = json.loads((Path(__file__).resolve().parents[3] / "schema" / "wire.schema.json").read_text())
CASES_FILE = os.environ.get("STEPWISE_WIRE_CASES")


def test_every_object_of_the_schema_is_a_dataclass_with_its_fields() -> None:
    defs = SCHEMA["$defs"]
    for name, definition in defs.items():
        cls = getattr(wire, name)
        assert dataclasses.is_dataclass(cls), name
        assert {f.name for f in dataclasses.fields(cls)} == set(definition["properties"]), name
        # A field the schema requires has no default; an optional one defaults to None.
        for f in dataclasses.fields(cls):
            required = f.name in definition.get("required", [])
            assert (f.default is dataclasses.MISSING) == required, f"{name}.{f.name}"


def test_the_header_constants_are_the_schemas() -> None:
    for group, names in SCHEMA["x-headers"].items():
        cls = getattr(wire, f"{group.capitalize()}Headers")
        constants = {k: v for k, v in vars(cls).items() if k.isupper()}
        assert sorted(constants.values()) == sorted(names.values())


def test_a_missing_field_is_a_format_error_naming_it() -> None:
    with pytest.raises(StepwiseFormatError, match="StepTimingsOut: the field 'ttft_ms' is missing"):
        wire.StepTimingsOut.from_dict({"latency_ms": 1.0})
    with pytest.raises(StepwiseFormatError, match="expected a JSON object"):
        wire.RewardTally.from_dict([1, 2])


def _cases() -> list[dict[str, typing.Any]]:
    if not CASES_FILE:
        return []
    return json.loads(Path(CASES_FILE).read_text())["cases"]


@pytest.mark.skipif(not CASES_FILE, reason="STEPWISE_WIRE_CASES names no leased batches")
@pytest.mark.parametrize("case", _cases(), ids=lambda c: c["name"])
def test_a_leased_batch_reads_into_the_dataclasses(case: dict[str, typing.Any]) -> None:
    data = case["batch"]
    batch = Batch(lease_id=data["lease_id"], expires_at=data["expires_at"], format="json", body=bytearray(), data=data)
    typed = batch.wire()
    rows = data.get("rows") == "trajectory"
    assert isinstance(typed, wire.RowsBatchJson if rows else wire.BatchJson)
    assert typed.lease_id == data["lease_id"]
    assert typed.curation.metrics.all.trajectories == data["curation"]["metrics"]["all"]["trajectories"]
    for group, raw_group in zip(typed.groups, data["groups"], strict=True):
        assert group.group_id == raw_group["group_id"]
        for t, raw in zip(group.trajectories, raw_group["trajectories"], strict=True):
            assert t.trajectory_uid == raw["trajectory_uid"]
            assert [s.name for s in t.signals] == [s["name"] for s in raw["signals"]]
            assert all(isinstance(s, wire.SignalOut) for s in t.signals)
            if rows:
                for row, raw_row in zip(t.rows, raw["rows"], strict=True):
                    assert row.input_ids == raw_row["input_ids"]
                    assert [s.response_end for s in row.spans] == [s["response_end"] for s in raw_row["spans"]]
            else:
                for step, raw_step in zip(t.steps, raw["steps"], strict=True):
                    assert isinstance(step, wire.BatchStep)
                    assert step.response_ids == raw_step["response_ids"]
                    assert step.timings.latency_ms == raw_step["timings"]["latency_ms"]
                    assert step.advantage == raw_step.get("advantage")
                    assert (step.label is None) == (raw_step["label"] is None)
        if not rows and "packing" in raw_group:
            assert isinstance(group.packing, wire.Packing)
            assert [tuple(n) for n in raw_group["packing"]["nodes"]] == group.packing.nodes
    assert case["expect"] == {
        "groups": len(typed.groups),
        "trajectories": sum(len(g.trajectories) for g in typed.groups),
    }
