"""Unit tests of the client without a Stepwise server: the zip/.npy reader and the retry rules.

Run: `python3 -m unittest discover -s clients/python/tests` (add STEPWISE_NO_NUMPY=1 for the
pure-Python arrays). test/python-client.test.ts runs them both ways, then against a real server.
"""

from __future__ import annotations

import io
import json
import struct
import sys
import threading
import unittest
import zipfile
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stepwise_client import (  # noqa: E402
    HAVE_NUMPY,
    NpyArray,
    StepwiseClient,
    StepwiseConnectionError,
    StepwiseError,
    StepwiseFormatError,
    read_padded,
    read_zip_directory,
)
from stepwise_client.npz import read_npy_header  # noqa: E402

if HAVE_NUMPY:
    import numpy as np


def npy_bytes(descr: str, shape: tuple[int, ...], data: bytes, version: int = 1, pad_to: int = 64, at: int = 0) -> bytes:
    """A .npy file whose data starts at a multiple of `pad_to` when the file starts at `at`."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    prefix = 10 if version == 1 else 12
    while (at + prefix + len(text) + 1) % pad_to:
        text += " "
    header = (text + "\n").encode("latin1")
    length = struct.pack("<H", len(header)) if version == 1 else struct.pack("<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header + data


def stored_zip(members: list[tuple[str, bytes]], method: int = 0) -> bytes:
    """A minimal zip (stored, or deflated when method=8), written by hand like the server does."""
    out = bytearray()
    central = bytearray()
    for name, raw in members:
        data = zlib.compress(raw)[2:-4] if method == 8 else raw
        crc = zlib.crc32(raw)
        offset = len(out)
        encoded = name.encode()
        out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, method, 0, 0, crc, len(data), len(raw), len(encoded), 0)
        out += encoded + data
        central += struct.pack(
            "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, method, 0, 0, crc, len(data), len(raw), len(encoded), 0, 0, 0, 0, 0, offset
        )
        central += encoded
    cd_offset = len(out)
    out += central
    out += struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members), len(members), len(central), cd_offset, 0)
    return bytes(out)


def aligned_zip(members: list[tuple[str, str, tuple[int, ...], bytes]], version: int = 1) -> bytes:
    """Members laid out so that each array's data starts on a 64-byte boundary of the zip."""
    built: list[tuple[str, bytes]] = []
    at = 0
    for name, descr, shape, data in members:
        entry = name + ".npy"
        local = 30 + len(entry.encode())
        npy = npy_bytes(descr, shape, data, version=version, at=at + local)
        built.append((entry, npy))
        at += local + len(npy)
    return stored_zip(built)


def i32(values: list[int]) -> bytes:
    return struct.pack(f"<{len(values)}i", *values)


class ReaderTest(unittest.TestCase):
    def test_reads_every_dtype_of_the_padded_format(self) -> None:
        body = bytearray(
            aligned_zip(
                [
                    ("input_ids", "<i4", (2, 3), i32([1, 2, 3, -4, 5, 6])),
                    ("attention_mask", "|u1", (2, 3), bytes([0, 1, 1, 1, 1, 0])),
                    ("rm_scores", "<f4", (2,), struct.pack("<2f", 0.5, -1.25)),
                    ("big", "<i8", (1,), struct.pack("<q", 2**40)),
                    ("wide", "<f8", (1,), struct.pack("<d", 0.1)),
                    ("group_ids", "<U3", (2,), "g1\0".encode("utf-32-le") + "g22".encode("utf-32-le")),
                    ("empty", "<i4", (0, 4), b""),
                ]
            )
        )
        view = memoryview(body)
        for member in read_zip_directory(body):
            self.assertEqual(read_npy_header(view, member.offset, member.size).data_offset % 64, 0)
        arrays = read_padded(body)
        self.assertEqual(arrays["input_ids"].tolist(), [[1, 2, 3], [-4, 5, 6]])
        self.assertEqual(arrays["attention_mask"].tolist(), [[0, 1, 1], [1, 1, 0]])
        self.assertEqual(arrays["rm_scores"].tolist(), [0.5, -1.25])
        self.assertEqual(arrays["big"].tolist(), [2**40])
        self.assertEqual(arrays["wide"].tolist(), [0.1])
        self.assertEqual(arrays["group_ids"].tolist(), ["g1", "g22"])
        self.assertEqual(arrays["empty"].tolist(), [])
        self.assertEqual(tuple(arrays["empty"].shape), (0, 4))
        if HAVE_NUMPY:
            whole = np.frombuffer(body, np.uint8)
            for name, arr in arrays.items():
                if arr.size:
                    self.assertTrue(np.shares_memory(arr, whole), name)
                    self.assertTrue(arr.flags.writeable, name)
        else:
            ids = arrays["input_ids"]
            self.assertIsInstance(ids, NpyArray)
            self.assertEqual(ids.shape, (2, 3))
            self.assertEqual(ids[1].tolist(), [-4, 5, 6])
            self.assertEqual(ids[-1][0], -4)
            self.assertEqual(ids.values.typecode in ("i", "l"), True)
            self.assertEqual(arrays["group_ids"][1], "g22")
            with self.assertRaises(IndexError):
                ids[2]

    def test_npy_versions_2_and_3(self) -> None:
        for version in (2, 3):
            arrays = read_padded(aligned_zip([("x", "<i4", (3,), i32([7, 8, 9]))], version=version))
            self.assertEqual(arrays["x"].tolist(), [7, 8, 9])

    def test_reads_what_numpy_and_zipfile_write(self) -> None:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
            zf.writestr("a.npy", npy_bytes("<i4", (2, 2), i32([1, 2, 3, 4]), pad_to=16))
            with zf.open("b.npy", "w", force_zip64=True) as f:
                f.write(npy_bytes("|u1", (3,), bytes([1, 0, 1])))
        arrays = read_padded(buf.getvalue())
        self.assertEqual(arrays["a"].tolist(), [[1, 2], [3, 4]])
        self.assertEqual(arrays["b"].tolist(), [1, 0, 1])
        if HAVE_NUMPY:
            buf = io.BytesIO()
            np.savez(buf, ids=np.arange(6, dtype=np.int32).reshape(2, 3), s=np.array(["x", "yz"]))
            arrays = read_padded(buf.getvalue())
            self.assertEqual(arrays["ids"].tolist(), [[0, 1, 2], [3, 4, 5]])
            self.assertEqual(arrays["s"].tolist(), ["x", "yz"])

    def test_rejects_compressed_members(self) -> None:
        body = stored_zip([("x.npy", npy_bytes("<i4", (1,), i32([1])))], method=8)
        with self.assertRaisesRegex(StepwiseFormatError, "compressed"):
            read_padded(body)

    def test_rejects_truncated_bodies_and_unknown_dtypes(self) -> None:
        body = aligned_zip([("x", "<i4", (4,), i32([1, 2, 3, 4]))])
        with self.assertRaises(StepwiseFormatError):
            read_padded(body[: len(body) // 2])
        with self.assertRaisesRegex(StepwiseFormatError, "unsupported dtype"):
            read_padded(aligned_zip([("x", ">i4", (1,), b"\0\0\0\1")]))
        with self.assertRaisesRegex(StepwiseFormatError, "does not fit"):
            read_padded(aligned_zip([("x", "<i4", (5,), i32([1, 2, 3, 4]))]))


class _Handler(BaseHTTPRequestHandler):
    """Answers from a script: a list of (status, body) per path, then 200 {}."""

    script: dict[str, list[tuple[int, dict[str, Any] | None]]] = {}
    seen: list[tuple[str, str, dict[str, Any] | None, str | None]] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        type(self).seen.append((self.command, self.path, body, self.headers.get("authorization")))
        queue = type(self).script.get(self.path.split("?")[0], [])
        status, payload = queue.pop(0) if queue else (200, {})
        data = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_PUT = _answer

    def log_message(self, *args: Any) -> None:
        pass


class RetryTest(unittest.TestCase):
    def setUp(self) -> None:
        _Handler.script = {}
        _Handler.seen = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()
        self.sleeps: list[float] = []
        self.client = StepwiseClient(
            f"http://127.0.0.1:{self.server.server_port}", api_key="k1", retries=3, sleep=self.sleeps.append, rng=lambda: 0.5
        )

    def tearDown(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def test_idempotent_calls_retry_on_503_with_growing_backoff(self) -> None:
        busy = (503, {"error": {"code": "unavailable", "message": "restarting"}})
        _Handler.script = {"/v1/batches/L1/ack": [busy, busy, (200, {"lease_id": "L1", "state": "acked", "groups": 1})]}
        self.assertEqual(self.client.ack("L1")["state"], "acked")
        self.assertEqual(len(_Handler.seen), 3)
        self.assertEqual(len(self.sleeps), 2)
        self.assertLess(self.sleeps[0], self.sleeps[1])
        self.assertEqual(_Handler.seen[0][3], "Bearer k1")

    def test_4xx_is_not_retried_and_names_the_field(self) -> None:
        error = {"error": {"code": "invalid_request", "message": "batch_size: must be >= 1", "field": "batch_size"}}
        _Handler.script = {"/v1/batches/lease": [(400, error)]}
        with self.assertRaises(StepwiseError) as caught:
            self.client.lease(0)
        self.assertEqual((caught.exception.status, caught.exception.field), (400, "batch_size"))
        self.assertEqual(len(_Handler.seen), 1)

    def test_a_lease_is_not_retried_after_a_gateway_error(self) -> None:
        _Handler.script = {"/v1/batches/lease": [(502, None), (200, {})]}
        with self.assertRaises(StepwiseError) as caught:
            self.client.lease(1)
        self.assertEqual(caught.exception.status, 502)
        self.assertEqual(len(_Handler.seen), 1)
        self.assertEqual(self.sleeps, [])

    def test_lease_body_carries_only_the_options_given(self) -> None:
        _Handler.script = {"/v1/batches/lease": [(204, None)]}
        self.assertIsNone(self.client.lease(2, n_rollouts=4, advantage="grpo", wait_ms=10))
        self.assertEqual(
            _Handler.seen[0][2],
            {"channel": "train", "batch_size": 2, "wait_ms": 10, "format": "padded", "n_rollouts": 4, "advantage": "grpo"},
        )

    def test_policy_version_and_stats(self) -> None:
        _Handler.script = {"/v1/policy-version": [(200, {"version": 3})], "/v1/stats": [(200, {"produced": {}})]}
        self.assertEqual(self.client.set_policy_version(3), {"version": 3})
        self.assertEqual(self.client.stats("eval"), {"produced": {}})
        self.assertEqual(_Handler.seen[0][:3], ("PUT", "/v1/policy-version", {"version": 3, "drain": False}))
        self.assertEqual(_Handler.seen[1][1], "/v1/stats?channel=eval")

    def test_register_and_next_prompts(self) -> None:
        prompts = [{"task_id": "a", "task_set": "default", "n_rollouts": 4, "pool": "unseen"}]
        _Handler.script = {
            "/v1/channels/my%20run/prompts": [(200, {"channel": "my run", "added": 2, "total": 2})],
            "/v1/channels/train/prompts/next": [(503, None), (200, {"prompts": prompts}), (200, {"prompts": []})],
        }
        self.assertEqual(self.client.register_prompts(["a", "b"], channel="my run"), {"added": 2, "total": 2})
        self.assertEqual(
            _Handler.seen[0][:3],
            ("PUT", "/v1/channels/my%20run/prompts", {"prompts": [{"task_id": "a", "task_set": "default"}, {"task_id": "b", "task_set": "default"}]}),
        )
        # A claim is not idempotent: a 503 is reported, not retried (a retry could claim twice).
        with self.assertRaises(StepwiseError):
            self.client.next_prompts(4)
        self.assertEqual(self.client.next_prompts(4), prompts)
        self.assertEqual(_Handler.seen[2][:3], ("POST", "/v1/channels/train/prompts/next", {"count": 4}))
        self.assertEqual(self.client.next_prompts(2, task_set="math"), [])
        self.assertEqual(_Handler.seen[3][2], {"count": 2, "task_set": "math"})

    def test_report_mismatch_posts_in_parts_and_retries_like_an_ack(self) -> None:
        from stepwise_client import client as client_module

        zero = {"tokens": 1, "k1": 0.0, "k3": 0.0, "max_abs_diff": 0.0, "masked_fraction": 0.0}
        steps = [{"trajectory_uid": f"t{i}", "step_index": 0, **zero} for i in range(5)]
        path = "/v1/batches/L%2F1/mismatch"
        busy = (503, {"error": {"code": "unavailable", "message": "restarting"}})
        _Handler.script = {path: [busy] + [(200, {"lease_id": "L/1", "steps": n}) for n in (2, 2, 1)]}
        saved = client_module.MISMATCH_STEPS_PER_CALL
        client_module.MISMATCH_STEPS_PER_CALL = 2
        try:
            self.assertEqual(self.client.report_mismatch("L/1", steps), {"lease_id": "L/1", "steps": 5})
        finally:
            client_module.MISMATCH_STEPS_PER_CALL = saved
        # The 503 was retried; then three parts of 2, 2 and 1 steps, in order.
        self.assertEqual([(m, p) for m, p, _, _ in _Handler.seen], [("POST", path)] * 4)
        parts = [[s["trajectory_uid"] for s in body["steps"]] for _, _, body, _ in _Handler.seen[1:]]
        self.assertEqual(parts, [["t0", "t1"], ["t2", "t3"], ["t4"]])
        self.assertEqual(len(self.sleeps), 1)

    def test_a_lease_that_cannot_connect_is_retried_then_fails(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        with self.assertRaises(StepwiseConnectionError) as caught:
            self.client.lease(1)
        self.assertFalse(caught.exception.request_sent)
        self.assertEqual(len(self.sleeps), 3)
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)  # for tearDown
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()


if __name__ == "__main__":
    unittest.main()
