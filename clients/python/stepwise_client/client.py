"""The trainer side of the Stepwise HTTP API: lease batches, ack/nack them, publish policy versions."""

from __future__ import annotations

import http.client
import json
import random
import ssl
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

from .errors import StepwiseConnectionError, StepwiseError, StepwiseFormatError
from .npz import read_padded
from .wire import BatchJson, LeaseHeaders, RowsBatchJson

BatchFormat = Literal["json", "arrow", "padded"]
Advantage = Literal["grpo", "drgrpo", "rloo"]
Overlong = Literal["reject", "truncate", "drop"]

_RETRY_STATUSES = frozenset((502, 503, 504))
#: Steps per `report_mismatch` request: the server takes at most 10,000.
MISMATCH_STEPS_PER_CALL = 10_000
_CONTENT_TYPES: dict[str, BatchFormat] = {
    "application/json": "json",
    "application/zip": "padded",
    "application/vnd.apache.arrow.stream": "arrow",
}


@dataclass
class _Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytearray

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


def _int_header(answer: _Answer, name: str) -> int | None:
    value = answer.header(name)
    return int(value) if value not in (None, "") else None


def _error_from(answer: _Answer, reason: str) -> StepwiseError:
    try:
        data = answer.json()
    except ValueError:
        data = None
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        return StepwiseError(
            answer.status,
            str(error.get("code", "http_error")),
            str(error.get("message", reason)),
            error.get("field"),
            data,
        )
    text = bytes(answer.body[:1000]).decode("utf-8", "replace")
    return StepwiseError(answer.status, "http_error", text.strip() or reason, None, text)


def _read_body(response: http.client.HTTPResponse) -> bytearray:
    """Reads the whole body into a bytearray, so arrays viewing it are writable (torch needs that)."""
    length = response.getheader("content-length")
    if length is None or response.chunked:
        return bytearray(response.read())
    size = int(length)
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    while got < size:
        n = response.readinto(view[got:])
        if not n:
            raise http.client.IncompleteRead(bytes(buf[:got]), size - got)
        got += n
    return buf


@dataclass(eq=False)
class Batch:
    """A leased batch. Settle it exactly once: `ack()` after the update succeeded, else `nack()`.

    `arrays` holds the `padded` members by name (NumPy views of `body`, or `NpyArray`s without
    NumPy); `data` holds the decoded `json` batch; for `arrow`, `body` is the IPC stream. Used as a
    context manager, the batch is acked when the block ends normally and nacked when it raises
    (unless it was settled inside the block).
    """

    lease_id: str
    #: When the lease runs out, in ms since the epoch; unsettled groups then go back to the queue.
    expires_at: int
    format: BatchFormat
    body: bytearray
    arrays: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] | None = None
    #: Steps (rows) in the batch, and steps cut or dropped by `overlong` (None: header absent).
    rows: int | None = None
    truncated_steps: int | None = None
    dropped_steps: int | None = None
    policy_version: int | None = None
    #: `leased`, then `acked` or `nacked` once settled through this object.
    state: str = "leased"
    _client: StepwiseClient | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> Any:
        return self.arrays[name]

    def wire(self) -> BatchJson | RowsBatchJson:
        """The `json` batch as the wire's dataclasses (stepwise_client.wire, generated from its schema)."""
        if self.data is None:
            raise StepwiseFormatError(f"a {self.format} batch has no JSON body; lease format='json'")
        return (RowsBatchJson if self.data.get("rows") == "trajectory" else BatchJson).from_dict(self.data)

    def expires_in(self) -> float:
        """Seconds until the lease expires (negative once it has)."""
        return self.expires_at / 1000 - time.time()

    def ack(self) -> dict[str, Any]:
        """Marks the batch consumed. Raises StepwiseError 409 when the lease had already expired."""
        return self._settle("ack")

    def nack(self) -> dict[str, Any]:
        """Returns the batch's groups to the queue; they are served before newer groups."""
        return self._settle("nack")

    def _settle(self, verb: Literal["ack", "nack"]) -> dict[str, Any]:
        if self._client is None:
            raise RuntimeError("this batch has no client to settle it with")
        answer = self._client._settle(self.lease_id, verb)
        self.state = "acked" if verb == "ack" else "nacked"
        return answer

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.state != "leased":
            return
        if exc is None:
            self.ack()
            return
        # The block failed: give the groups back. A failing nack must not hide the real error;
        # the lease then simply expires after its ttl.
        try:
            self.nack()
        except StepwiseError as nack_error:
            exc.add_note(f"stepwise: nack of lease {self.lease_id} failed too: {nack_error}")


class StepwiseClient:
    """A trainer's client for a Stepwise DataPool.

    Calls that may be repeated safely (ack, nack, policy version, stats) are retried with
    exponential backoff and jitter on connection errors and 502/503/504; 4xx answers are never
    retried. Errors raise `StepwiseError` with the server's code, message and field.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout: float = 30.0,
        *,
        consumer: str | None = None,
        retries: int = 4,
        backoff: float = 0.25,
        max_backoff: float = 8.0,
        ssl_context: ssl.SSLContext | None = None,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
    ) -> None:
        """
        Args:
            base_url: the server's origin, e.g. `http://127.0.0.1:8100` (a path prefix is kept).
            api_key: a key with the `trainer` scope, sent as `Authorization: Bearer`.
            timeout: seconds per socket operation; a long-polling lease adds its `wait_ms`.
            consumer: default lease holder name (the server's default is `anonymous`).
            retries: retries after the first attempt; `backoff` doubles per retry up to `max_backoff`.
            sleep, rng: injectable for tests.
        """
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self._scheme = parts.scheme
        self._host = parts.hostname
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._ssl_context = ssl_context
        self.api_key = api_key
        self.timeout = timeout
        self.consumer = consumer
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._sleep = sleep
        self._rng = rng

    # ---- trainer API ---------------------------------------------------------------------------

    def lease(
        self,
        batch_size: int,
        *,
        channel: str = "train",
        n_rollouts: int | None = None,
        max_staleness: int | None = None,
        wait_ms: int = 0,
        consumer: str | None = None,
        ttl_ms: int | None = None,
        format: BatchFormat = "padded",
        rows: Literal["step", "trajectory"] | None = None,
        advantage: Advantage | None = None,
        pack: Literal["prefix_tree"] | None = None,
        share_responses: bool | None = None,
        prompt_length: int | None = None,
        response_length: int | None = None,
        overlong: Overlong | None = None,
        pad_token_id: int | None = None,
    ) -> Batch | None:
        """Leases `batch_size` ready groups; None when none were ready within `wait_ms` (204).

        Options left at None take the server's defaults (docs/serving.md). The returned batch
        must be acked or nacked before `expires_at`, or its groups go back to the queue.
        """
        request: dict[str, Any] = {"channel": channel, "batch_size": batch_size, "wait_ms": wait_ms}
        if format != "json":  # the server's default; omitting it keeps json leases valid on any version
            request["format"] = format
        options = {
            "n_rollouts": n_rollouts,
            "max_staleness": max_staleness,
            "consumer": consumer if consumer is not None else self.consumer,
            "ttl_ms": ttl_ms,
            "rows": rows,
            "advantage": advantage,
            "pack": pack,
            "share_responses": share_responses,
            "prompt_length": prompt_length,
            "response_length": response_length,
            "overlong": overlong,
            "pad_token_id": pad_token_id,
        }
        request.update({k: v for k, v in options.items() if v is not None})
        # A lease is not idempotent: if the request reached the server, retrying it could lease a
        # second batch while the first sits unacked until its ttl. So it is retried only when the
        # connection could not be opened at all, never after a 502/503/504 or a broken answer.
        answer = self._request(
            "POST",
            "/v1/batches/lease",
            body=request,
            idempotent=False,
            timeout=self.timeout + max(0, wait_ms) / 1000,
        )
        if answer.status == 204:
            return None
        return self._batch_from(answer, format)

    def ack(self, lease_id: str) -> dict[str, Any]:
        """Acks a lease by id (`Batch.ack()` is the usual way)."""
        return self._settle(lease_id, "ack")

    def nack(self, lease_id: str) -> dict[str, Any]:
        """Nacks a lease by id (`Batch.nack()` is the usual way)."""
        return self._settle(lease_id, "nack")

    def set_policy_version(
        self, version: int, drain: bool = False, *, timeout: float | None = None
    ) -> dict[str, Any]:
        """Publishes the policy version the rollout engines now serve (PUT /v1/policy-version).

        Call it right after each weight sync. With `drain=True` the gateway holds new generations
        until running ones finish (up to its drain timeout, 60 s by default), then switches; the
        answer adds `drained_ms` and `drain_timed_out`. Drain needs the gateway in the server
        process (`stepwise serve`). `timeout` defaults to the client's, plus 60 s with `drain`.
        """
        if timeout is None and drain:
            timeout = self.timeout + 60.0
        return self._request(
            "PUT", "/v1/policy-version", body={"version": version, "drain": drain}, timeout=timeout
        ).json()

    def switch_weights(
        self,
        version: int,
        mode: str = "abort",
        *,
        path: str | None = None,
        update_info: dict[str, Any] | None = None,
        timeout: float | None = None,
    ) -> dict[str, Any]:
        """Switches the engines' weights and the policy version together (PUT /v1/policy-version with a mode).

        The gateway pauses every engine (`abort`: running generations are cut and continued under the
        new weights as partial rollouts; `keep`: frozen, then continued; `wait`: finished first), has
        it load `path` (a checkpoint folder) or vLLM's `update_info`, sets the version and resumes.
        Without either, the weights were pushed already and engines only learn their version. The
        answer lists `switched` and `failed` engines (docs/gateway.md#weight-switch).
        """
        if path is not None and update_info is not None:
            raise ValueError("give path or update_info, not both")
        body: dict[str, Any] = {"version": version, "mode": mode}
        if path is not None:
            body["weights"] = {"path": path}
        elif update_info is not None:
            body["weights"] = {"update_info": update_info}
        return self._request("PUT", "/v1/policy-version", body=body, timeout=timeout or self.timeout + 600.0).json()

    def report_mismatch(self, lease_id: str, steps: list[dict[str, Any]]) -> dict[str, Any]:
        """Posts a lease's rollout-vs-trainer mismatch, one entry per step (`stepwise_client.mismatch`):
        `{trajectory_uid, step_index, tokens, k1, k3, max_abs_diff, masked_fraction}`.

        The pool checks each step is in the lease's groups and stores it with the step's engine and
        policy version; `GET /v1/stats` reads it back under `mismatch`. A step reported again replaces
        its row, so the call is retried like an ack. Sent in parts of `MISMATCH_STEPS_PER_CALL`.
        """
        path = f"/v1/batches/{quote(lease_id, safe='')}/mismatch"
        stored = 0
        for start in range(0, len(steps), MISMATCH_STEPS_PER_CALL):
            part = steps[start : start + MISMATCH_STEPS_PER_CALL]
            stored += int(self._request("POST", path, body={"steps": part}).json()["steps"])
        return {"lease_id": lease_id, "steps": stored}

    def policy_version(self) -> int:
        """The pool's current policy version."""
        return int(self._request("GET", "/v1/policy-version").json()["version"])

    def stats(self, channel: str | None = None) -> dict[str, Any]:
        """Pool counters (produced, consumed, leased, dropped, queue depth, staleness...)."""
        query = {"channel": channel} if channel is not None else None
        return self._request("GET", "/v1/stats", query=query).json()

    def register_prompts(
        self, prompts: list[str], channel: str = "train", task_set: str = "default"
    ) -> dict[str, Any]:
        """Registers task ids as the channel's prompts for the pool's scheduler, in order; known ones
        keep their place and history (docs/datapool.md#prompt-scheduler). Sent 10,000 a request."""
        name = quote(channel, safe="")
        answer: dict[str, Any] = {"added": 0, "total": 0}
        for i in range(0, max(len(prompts), 1), 10_000):
            body = {"prompts": [{"task_id": p, "task_set": task_set} for p in prompts[i : i + 10_000]]}
            part = self._request("PUT", f"/v1/channels/{name}/prompts", body=body).json()
            answer = {"added": answer["added"] + part["added"], "total": part["total"]}
        return answer

    def next_prompts(self, count: int = 1, channel: str = "train", task_set: str | None = None) -> list[dict[str, Any]]:
        """What to roll out next: up to `count` prompts not in flight, each `{task_id, task_set,
        n_rollouts, pool}`; roll each out `n_rollouts` times as one group; with `task_set`, only
        prompts of that set. Never retried: a claim whose answer was lost stays in flight until its
        timeout, and a retry would claim others."""
        name = quote(channel, safe="")
        body: dict[str, Any] = {"count": count} if task_set is None else {"count": count, "task_set": task_set}
        answer = self._request("POST", f"/v1/channels/{name}/prompts/next", body=body, idempotent=False)
        return list(answer.json()["prompts"])

    # ---- internals -----------------------------------------------------------------------------

    def _settle(self, lease_id: str, verb: Literal["ack", "nack"]) -> dict[str, Any]:
        # Acks and nacks are idempotent on the server, so retrying them is safe.
        return self._request("POST", f"/v1/batches/{quote(lease_id, safe='')}/{verb}").json()

    def _batch_from(self, answer: _Answer, requested: BatchFormat) -> Batch:
        content_type = (answer.header("content-type") or "").split(";")[0].strip().lower()
        served = _CONTENT_TYPES.get(content_type)
        if served == "json":
            data = answer.json()
            batch = Batch(
                lease_id=data["lease_id"],
                expires_at=int(data["expires_at"]),
                format="json",
                body=answer.body,
                data=data,
                policy_version=data.get("policy_version"),
                _client=self,
            )
            # `rows: "trajectory"` batches carry stitched `rows` in place of `steps`.
            key = "rows" if data.get("rows") == "trajectory" else "steps"
            served_rows = sum(len(t[key]) for g in data["groups"] for t in g["trajectories"])
            batch.rows = _int_header(answer, LeaseHeaders.ROWS) or served_rows
        else:
            lease_id = answer.header(LeaseHeaders.LEASE_ID)
            if not lease_id:
                raise StepwiseFormatError(f"a {content_type or 'untyped'} batch without an X-Lease-Id header")
            batch = Batch(
                lease_id=lease_id,
                expires_at=_int_header(answer, LeaseHeaders.LEASE_EXPIRES_AT) or 0,
                format=served or requested,
                body=answer.body,
                policy_version=_int_header(answer, LeaseHeaders.POLICY_VERSION),
                _client=self,
            )
            batch.rows = _int_header(answer, LeaseHeaders.ROWS)
        batch.truncated_steps = _int_header(answer, LeaseHeaders.TRUNCATED_STEPS)
        batch.dropped_steps = _int_header(answer, LeaseHeaders.DROPPED_STEPS)
        try:
            if served != requested:
                raise StepwiseFormatError(
                    f"asked for a {requested} batch, the server answered {content_type or 'no content type'}"
                )
            if served == "padded":
                batch.arrays = read_padded(answer.body)
        except Exception:
            # A batch we cannot read goes straight back to the queue instead of waiting for its ttl.
            try:
                batch.nack()
            except StepwiseError:
                pass
            raise
        return batch

    def _connection(self, timeout: float) -> http.client.HTTPConnection:
        if self._scheme == "https":
            context = self._ssl_context or ssl.create_default_context()
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout, context=context)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        cap = min(self.max_backoff, self.backoff * 2**attempt)
        delay = cap / 2 + self._rng() * cap / 2  # "equal jitter": spread out, never zero
        if retry_after and retry_after.isdigit():
            delay = max(delay, min(float(retry_after), self.max_backoff))
        return delay

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Mapping[str, Any] | None = None,
        query: Mapping[str, Any] | None = None,
        idempotent: bool = True,
        timeout: float | None = None,
    ) -> _Answer:
        target = self._prefix + path + (f"?{urlencode(query)}" if query else "")
        payload = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json, application/zip, application/vnd.apache.arrow.stream"}
        if payload is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        attempt = 0
        while True:
            # A fresh connection per call: trainer calls are minutes apart, longer than any
            # keep-alive, and a fresh socket tells "never reached the server" from "lost the answer".
            conn = self._connection(timeout if timeout is not None else self.timeout)
            sent = False
            retry_after = None
            try:
                conn.connect()
                sent = True
                conn.request(method, target, body=payload, headers=headers)
                response = conn.getresponse()
                answer = _Answer(response.status, response.headers, _read_body(response))
            except (OSError, http.client.HTTPException) as error:
                failure = StepwiseConnectionError(
                    f"{method} {path}: {'no answer' if sent else 'cannot connect'} ({error!r})",
                    request_sent=sent,
                )
                if attempt >= self.retries or (sent and not idempotent):
                    raise failure from error
            else:
                if answer.status < 400:
                    return answer
                failure = _error_from(answer, f"HTTP {answer.status}")
                if answer.status not in _RETRY_STATUSES or not idempotent or attempt >= self.retries:
                    raise failure
                retry_after = answer.header("retry-after")
            finally:
                conn.close()
            self._sleep(self._delay(attempt, retry_after))
            attempt += 1
