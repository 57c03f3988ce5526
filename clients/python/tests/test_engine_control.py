"""The reference engine's vLLM RL control routes over real HTTP with the real tiny model: pause
(abort, wait, keep), resume, abort_requests, the weight-update session, and per-token weight versions.

Run: `cd clients/python && python -m pytest -q tests/test_engine_control.py` (needs torch and
transformers). Every wait is on observable state (tokens received, the engine's counters), never a
fixed sleep.
"""

from __future__ import annotations

import http.client
import json
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import unittest

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# A skip both runners read (unittest's discovery runs the client's torch-free tests with plain python3).
try:
    import torch
    import transformers  # noqa: F401
except ImportError:
    raise unittest.SkipTest("the reference engine needs torch and transformers (the train extra)") from None

from stepwise_client.engine import ReferenceEngine, make_server  # noqa: E402
from stepwise_client.models import build_model, load_policy  # noqa: E402

LONG = 1000  # a generation an abort must cut: it would take seconds to run out


@dataclass
class Served:
    engine: ReferenceEngine
    port: int
    folders: dict[int, str]  # seed -> a folder of its weights (safetensors)
    models: dict[int, Any]  # seed -> the same weights, for plain forward passes


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    engine = ReferenceEngine(load_policy("tiny", seed=0), seed=0)
    server = make_server(engine)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    folders, models = {}, {}
    for seed in (0, 1):
        models[seed] = build_model("tiny", seed=seed)
        folders[seed] = str(tmp_path_factory.mktemp(f"tiny-seed{seed}"))
        models[seed].save_pretrained(folders[seed], safe_serialization=True)
    yield Served(engine, server.server_address[1], folders, models)
    server.shutdown()
    server.server_close()


@pytest.fixture
def srv(served: Served) -> Iterator[Served]:
    yield served
    # Each test leaves the engine serving, with no weight update open, whatever it asserted.
    served.engine.control.abort(None)
    served.engine.control.resume()
    served.engine.control.finish_update()


def call(port: int, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = None if body is None else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"content-type": "application/json", **(headers or {})})
    answer = conn.getresponse()
    raw = answer.read()
    conn.close()
    return answer.status, json.loads(raw) if raw else None


class Background(threading.Thread):
    """One request on its own thread: `result` is (status, payload) once it is answered."""

    def __init__(self, port: int, path: str, body: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(daemon=True)
        self.args = (port, "POST", path, body, headers)
        self.result: tuple[int, Any] | None = None
        self.start()

    def run(self) -> None:
        self.result = call(*self.args)

    def answer(self) -> Any:
        self.join(60)
        assert self.result is not None and self.result[0] == 200, self.result
        return self.result[1]


def wait_until(check: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def sampled_at_least(engine: ReferenceEngine, n: int) -> None:
    start = engine.tokens_sampled
    wait_until(lambda: engine.tokens_sampled >= start + n, f"{n} tokens sampled")


def open_stream(port: int, path: str, body: dict[str, Any]) -> tuple[http.client.HTTPConnection, Iterator[Any]]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, body=json.dumps({**body, "stream": True}), headers={"content-type": "application/json"})
    answer = conn.getresponse()
    assert answer.status == 200

    def events() -> Iterator[Any]:
        while line := answer.readline():
            if line.startswith(b"data: "):
                data = line[6:].strip()
                yield "[DONE]" if data == b"[DONE]" else json.loads(data)

    return conn, events()


def completion(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {"prompt": "Once upon a time", "max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True, **extra}


def chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    messages = [{"role": "user", "content": "Tell me a story."}]
    return {"messages": messages, "max_tokens": max_tokens, "ignore_eos": True, "return_token_ids": True, **extra}


def assert_spans_cover(choice: dict[str, Any]) -> None:
    spans = choice["weight_version_spans"]
    assert sum(n for _, n in spans) == len(choice["token_ids"])


def is_paused(port: int) -> bool:
    status, answer = call(port, "GET", "/is_paused")
    assert status == 200
    return answer["is_paused"]


# --- abort ----------------------------------------------------------------------------------


def test_pause_abort_answers_a_whole_chat_with_what_it_has(srv: Served) -> None:
    e = srv.engine
    request = Background(srv.port, "/v1/chat/completions", chat(LONG, logprobs=True))
    sampled_at_least(e, 3)
    assert call(srv.port, "POST", "/pause") == (200, {"status": "paused"})
    choice = request.answer()["choices"][0]
    assert choice["finish_reason"] == "abort"
    assert 3 <= len(choice["token_ids"]) < LONG
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert choice["message"]["content"] == e.decode(choice["token_ids"])
    assert_spans_cover(choice)
    assert is_paused(srv.port)
    assert call(srv.port, "POST", "/resume") == (200, {"status": "resumed"})
    assert not is_paused(srv.port)


def test_pause_abort_ends_a_stream_with_an_abort_chunk(srv: Served) -> None:
    conn, events = open_stream(srv.port, "/v1/completions", completion(LONG, logprobs=0))
    received = 0
    for event in events:
        received += len(event["choices"][0]["token_ids"])
        if received >= 3:
            break
    assert call(srv.port, "POST", "/pause?mode=abort&clear_cache=false") == (200, {"status": "paused"})
    rest = list(events)
    conn.close()
    assert rest[-1] == "[DONE]"
    last = rest[-2]["choices"][0]
    assert last["finish_reason"] == "abort"
    assert all(c["choices"][0]["finish_reason"] is None for c in rest[:-2])
    for chunk in rest[:-1]:
        assert_spans_cover(chunk["choices"][0])
    received += sum(len(c["choices"][0]["token_ids"]) for c in rest[:-1])
    assert 3 <= received < LONG
    assert is_paused(srv.port)


@pytest.mark.parametrize("mode", ["abort", "wait", "keep"])
def test_a_request_sent_while_paused_waits_for_resume(srv: Served, mode: str) -> None:
    assert call(srv.port, "POST", f"/pause?mode={mode}") == (200, {"status": "paused"})
    request = Background(srv.port, "/v1/completions", completion(4))
    wait_until(lambda: srv.engine.control.counts().get("waiting") == 1, "the request to wait for a resume")
    assert request.is_alive()
    assert call(srv.port, "POST", "/resume")[0] == 200
    choice = request.answer()["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 4


def test_pause_wait_returns_once_running_and_admitted_ones_finished(srv: Served) -> None:
    e = srv.engine
    start = e.tokens_sampled
    first = Background(srv.port, "/v1/completions", completion(120))
    sampled_at_least(e, 3)
    second = Background(srv.port, "/v1/completions", completion(20))
    wait_until(lambda: e.control.counts().get("queued") == 1, "the second request to queue behind the first")
    assert e.tokens_sampled - start < 120  # the pause below finds the first one mid-way
    assert call(srv.port, "POST", "/pause?mode=wait") == (200, {"status": "paused"})
    assert e.tokens_sampled - start == 140  # both ran to their end before the answer
    assert first.answer()["choices"][0]["finish_reason"] == "length"
    assert len(second.answer()["choices"][0]["token_ids"]) == 20
    assert is_paused(srv.port)


def test_abort_requests_aborts_by_id_without_pausing(srv: Served) -> None:
    e = srv.engine
    request = Background(srv.port, "/v1/completions", completion(LONG), {"X-Request-Id": "job-1"})
    sampled_at_least(e, 3)
    assert call(srv.port, "POST", "/abort_requests", {"request_ids": ["someone-else"]}) == (200, {"status": "aborted", "aborted": 0})
    assert call(srv.port, "POST", "/abort_requests", {"request_ids": ["job-1"]}) == (200, {"status": "aborted", "aborted": 1})
    answer = request.answer()
    assert answer["id"] == "cmpl-job-1"
    assert answer["choices"][0]["finish_reason"] == "abort" and len(answer["choices"][0]["token_ids"]) < LONG
    assert not is_paused(srv.port)
    request = Background(srv.port, "/v1/chat/completions", chat(LONG))
    sampled_at_least(e, 3)
    assert call(srv.port, "POST", "/abort_requests", {}) == (200, {"status": "aborted", "aborted": 1})
    assert request.answer()["choices"][0]["finish_reason"] == "abort"
    assert call(srv.port, "POST", "/abort_requests", {}) == (200, {"status": "aborted", "aborted": 0})


# --- keep + a weight update -------------------------------------------------------------------


def plain_logprobs(model: Any, prompt: list[int], tokens: list[int]) -> list[float]:
    """Each token's log-prob from one forward pass of prompt + tokens (float64, as the engine)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + tokens])).logits[0]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    return [float(logprobs[len(prompt) - 1 + i, t]) for i, t in enumerate(tokens)]


def keep_stream(srv: Served, update: Callable[[], None]) -> tuple[list[int], list[int], list[float], list[list[Any]]]:
    """A streamed chat paused with keep after 5 tokens; `update` runs while it is parked."""
    conn, events = open_stream(srv.port, "/v1/chat/completions", chat(150, logprobs=True))
    prompt, ids, logprobs, spans = [], [], [], []
    updated = False
    for event in events:
        if event == "[DONE]":
            break
        prompt = event.get("prompt_token_ids") or prompt
        choice = event["choices"][0]
        if "token_ids" in choice:
            assert_spans_cover(choice)
            ids += choice["token_ids"]
            logprobs += [c["logprob"] for c in (choice["logprobs"] or {"content": []})["content"]]
            for version, n in choice["weight_version_spans"]:
                if spans and spans[-1][0] == version:
                    spans[-1][1] += n
                else:
                    spans.append([version, n])
        if len(ids) >= 5 and not updated:
            updated = True
            assert call(srv.port, "POST", "/pause?mode=keep") == (200, {"status": "paused"})
            assert srv.engine.control.counts() == {"held": 1}
            update()
            assert call(srv.port, "POST", "/resume")[0] == 200
    conn.close()
    return prompt, ids, logprobs, spans


def keep_whole(srv: Served, update: Callable[[], None]) -> tuple[list[int], list[int], list[float], list[list[Any]]]:
    """A whole completion paused with keep after 5 tokens; `update` runs while it is parked."""
    request = Background(srv.port, "/v1/completions", completion(150, logprobs=0))
    sampled_at_least(srv.engine, 5)
    assert call(srv.port, "POST", "/pause?mode=keep") == (200, {"status": "paused"})
    assert srv.engine.control.counts() == {"held": 1}
    update()
    assert call(srv.port, "POST", "/resume")[0] == 200
    answer = request.answer()
    choice = answer["choices"][0]
    assert choice["finish_reason"] == "length"
    return answer["choices"][0]["prompt_token_ids"], choice["token_ids"], choice["logprobs"]["token_logprobs"], choice["weight_version_spans"]


@pytest.mark.parametrize("run", [keep_whole, keep_stream], ids=["whole-completion", "streamed-chat"])
def test_keep_across_a_weight_update_gives_exact_logprobs_per_span(srv: Served, run: Callable[..., Any]) -> None:
    port = srv.port
    # A known start: the seed-0 weights as version 1, through the one-shot route (unchanged).
    assert call(port, "POST", "/update_weights_from_disk", {"model_path": srv.folders[0], "version": 1})[1]["version"] == 1

    def update() -> None:
        assert call(port, "POST", "/start_weight_update") == (200, {"message": "Weight update started"})
        assert call(port, "POST", "/update_weights", {"update_info": {"model_path": srv.folders[1]}}) == (200, {"message": "Weights updated"})
        status, finished = call(port, "POST", "/finish_weight_update", {"weight_version": "2", "weight_label": "seed-1"})
        assert status == 200 and finished["message"] == "Weight update finished" and finished["weight_label"] == "seed-1"
        assert call(port, "GET", "/weight_info")[1] == {"weight_version": "2", "weight_gen": finished["weight_gen"], "weight_label": "seed-1"}

    prompt, ids, logprobs, spans = run(srv, update)
    assert len(ids) == len(logprobs) == 150
    assert [v for v, _ in spans] == [1, 2] and spans[0][1] >= 5 and sum(n for _, n in spans) == 150
    assert call(port, "GET", "/weights")[1]["version"] == 2
    old, new = spans[0][1], spans[1][1]
    by_version = {1: plain_logprobs(srv.models[0], prompt, ids), 2: plain_logprobs(srv.models[1], prompt, ids)}
    expected = by_version[1][:old] + by_version[2][old:]
    assert max(abs(a - b) for a, b in zip(logprobs, expected)) <= 1e-4
    # The check has teeth: the later tokens are far from what the old weights give them.
    assert max(abs(a - b) for a, b in zip(logprobs[old:], by_version[1][old:])) > 1e-2
    assert new == 150 - old


# --- errors ---------------------------------------------------------------------------------


def test_bad_modes_and_the_weight_session_state_machine(srv: Served) -> None:
    port = srv.port
    status, answer = call(port, "POST", "/pause?mode=freeze")
    assert status == 400 and answer["error"]["param"] == "mode" and answer["error"]["code"] == 400
    assert call(port, "POST", "/pause?clear_cache=maybe")[1]["error"]["param"] == "clear_cache"
    assert not is_paused(port)
    info = {"update_info": {"model_path": srv.folders[0]}}
    assert call(port, "POST", "/update_weights", info)[0] == 409
    assert call(port, "POST", "/finish_weight_update", {"weight_version": "3"})[0] == 409
    assert call(port, "POST", "/start_weight_update")[0] == 200
    assert call(port, "POST", "/start_weight_update")[0] == 409
    for bad in ({}, {"update_info": None}, {"update_info": {"model_path": "/no/such/folder"}}):
        status, answer = call(port, "POST", "/update_weights", bad)
        assert status == 400 and answer["error"]["param"] == "update_info", bad
    gen = call(port, "GET", "/weight_info")[1]["weight_gen"]
    status, answer = call(port, "POST", "/finish_weight_update", {"weight_version": "run-a/step-3"})
    assert (status, answer) == (200, {"message": "Weight update finished", "weight_gen": gen + 1, "weight_label": None})
    assert call(port, "GET", "/weight_info")[1] == {"weight_version": "run-a/step-3", "weight_gen": gen + 1, "weight_label": None}
    assert call(port, "GET", "/weights")[1]["version"] is None  # not a decimal: no int version
    assert call(port, "POST", "/finish_weight_update", {"weight_version": "3"})[0] == 409


def test_update_weight_version_names_pushed_weights_without_an_update(srv: Served) -> None:
    port = srv.port
    gen = call(port, "GET", "/weight_info")[1]["weight_gen"]
    assert call(port, "POST", "/update_weight_version", {"new_version": 7})[1]["error"]["param"] == "new_version"
    assert call(port, "POST", "/update_weight_version", {"new_version": "12"}) == (200, {"success": True, "new_version": "12"})
    info = call(port, "GET", "/weight_info")[1]
    assert info["weight_version"] == "12" and info["weight_gen"] == gen
    assert call(port, "GET", "/weights")[1]["version"] == 12
