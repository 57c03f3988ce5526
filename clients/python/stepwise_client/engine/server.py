"""The reference engine's HTTP side: vLLM's OpenAI-compatible routes, the weight-update routes and
vLLM's RL control routes (pause, resume, abort, weight-update session), on the standard library's
threading HTTP server: one thread per connection, a generation runs on its request's thread.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from safetensors.torch import load as load_safetensors_bytes

from .core import (
    MAX_BODY_BYTES,
    TOOL_CALL_START,
    Generation,
    ReferenceEngine,
    RequestError,
    Sampling,
    Token,
    int_field,
    parse_tool_calls,
    version_spans,
)
from .control import PAUSE_MODES

TRUE_WORDS = ("true", "1", "yes", "on")
FALSE_WORDS = ("false", "0", "no", "off")


def _spans(tokens: list[Token], want_ids: bool) -> dict[str, Any]:
    """The extension field beside `token_ids`: which weights version sampled each of them."""
    return {"weight_version_spans": version_spans(tokens)} if want_ids else {}


def _usage(g: Generation) -> dict[str, Any]:
    n = len(g.tokens)
    return {"prompt_tokens": len(g.prompt_ids), "total_tokens": len(g.prompt_ids) + n, "completion_tokens": n, "prompt_tokens_details": None}


class EngineHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stepwise-reference-engine"
    engine: ReferenceEngine  # set on the subclass made by `make_server`
    streaming = False  # whether the answer's headers are out (an error then goes as an event)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if getattr(self.server, "verbose", False):
            super().log_message(format, *args)

    # --- plumbing ----------------------------------------------------------------------------

    def _send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, param: str | None = None) -> None:
        kinds = {400: "BadRequestError", 404: "NotFoundError", 409: "ConflictError"}
        kind = kinds.get(status, "InternalServerError")
        self._send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def _body(self) -> bytes:
        length = self.headers.get("content-length")
        if length is None:
            raise RequestError("the request needs a content-length", None, 411)
        if not length.isdigit():
            raise RequestError(f"content-length: {length!r} is not a byte count", None, 400)
        size = int(length)
        if size > MAX_BODY_BYTES:
            raise RequestError(f"the body is {size} bytes, above {MAX_BODY_BYTES}", None, 413)
        return self.rfile.read(size)

    def _json_body(self) -> dict[str, Any]:
        raw = self._body()
        try:
            body = json.loads(raw)
        except ValueError as error:
            raise RequestError(f"the body is not JSON ({error})") from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object")
        return body

    def _optional_json(self) -> dict[str, Any]:
        """A control route's body: none or empty reads as `{}`."""
        if self.headers.get("content-length") in (None, "0"):
            return {}
        return self._json_body()

    def _request_id(self, body: dict[str, Any], prefix: str) -> tuple[str, set[str]]:
        """vLLM's ids: `prefix-` + the body's request_id or X-Request-Id, else random; an abort may
        name the answer's id or the caller's own.
        """
        given = self.headers.get("x-request-id") or body.get("request_id")
        if isinstance(given, str) and given:
            return f"{prefix}-{given}", {f"{prefix}-{given}", given}
        rid = f"{prefix}-{secrets.token_hex(16)}"
        return rid, {rid}

    def _start_stream(self) -> None:
        self.streaming = True
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _event(self, payload: Any) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        chunk = f"data: {data}\n\n".encode("utf-8")
        self.wfile.write(f"{len(chunk):x}\r\n".encode("ascii") + chunk + b"\r\n")
        self.wfile.flush()

    def _end_stream(self) -> None:
        self._event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _dispatch(self, handler: Callable[[], None]) -> None:
        self.streaming = False
        try:
            handler()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left: its generation stopped with the write
        except Exception as error:  # noqa: BLE001 - every failure is answered, never a dropped socket
            status, param = (error.status, error.param) if isinstance(error, RequestError) else (500, None)
            message = str(error) if isinstance(error, RequestError) else f"{type(error).__name__}: {error}"
            if self.streaming:
                # Headers are out: the failure goes as an error event, and the stream ends without [DONE].
                self._event({"error": {"message": message, "type": "InternalServerError", "param": param, "code": status}})
                self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True
            else:
                self._error(status, message, param)

    # --- routes ------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = urlsplit(self.path).path
        e = self.engine
        if path == "/health":
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()
        elif path == "/v1/models":
            self._send_json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": e.served_name,
                            "object": "model",
                            "created": int(e.weights_loaded_at),
                            "owned_by": "stepwise",
                            "root": e.policy.name,
                            "parent": None,
                            "max_model_len": e.max_model_len,
                        }
                    ],
                },
            )
        elif path == "/weights":
            self._send_json(200, {"version": e.weights_version, "loaded_at": e.weights_loaded_at})
        elif path == "/is_paused":
            self._send_json(200, {"is_paused": e.control.is_paused()})
        elif path == "/weight_info":
            self._send_json(200, e.weight_info())
        else:
            self._error(404, f"no route GET {path}")

    def do_POST(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        routes: dict[str, Callable[[], None]] = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
            "/update_weights_from_disk": self._weights_from_disk,
            "/update_weights_from_tensor": lambda: self._weights_from_tensor(parse_qs(url.query)),
            "/pause": lambda: self._pause(parse_qs(url.query)),
            "/resume": self._resume,
            "/abort_requests": self._abort_requests,
            "/start_weight_update": lambda: self._answer(self.engine.start_weight_update),
            "/update_weights": lambda: self._answer(self.engine.update_weights, self._optional_json()),
            "/finish_weight_update": lambda: self._answer(self.engine.finish_weight_update, self._optional_json()),
            "/update_weight_version": lambda: self._answer(self.engine.update_weight_version, self._optional_json()),
        }
        self._dispatch(routes.get(url.path) or (lambda: self._no_route(url.path)))

    def _no_route(self, path: str) -> None:
        self._body()  # read, so the connection can serve the next request
        raise RequestError(f"no route POST {path}", None, 404)

    # --- control (vLLM's dev-mode RL routes) ------------------------------------------------

    def _answer(self, action: Callable[..., dict[str, Any]], *args: Any) -> None:
        if not args:
            self._optional_json()  # read, so the connection can serve the next request
        self._send_json(200, action(*args))

    def _pause(self, query: dict[str, list[str]]) -> None:
        self._optional_json()
        mode = query.get("mode", ["abort"])[0]
        if mode not in PAUSE_MODES:
            raise RequestError(f"mode: must be one of {', '.join(PAUSE_MODES)}, not {mode!r}", "mode")
        # clear_cache is accepted for vLLM's shape; this engine keeps no cache across generations.
        clear = query.get("clear_cache", ["true"])[0].lower()
        if clear not in TRUE_WORDS + FALSE_WORDS:
            raise RequestError(f"clear_cache: must be true or false, not {clear!r}", "clear_cache")
        self.engine.control.pause(mode)
        self._send_json(200, {"status": "paused"})

    def _resume(self) -> None:
        self._optional_json()
        self.engine.control.resume()
        self._send_json(200, {"status": "resumed"})

    def _abort_requests(self) -> None:
        ids = self._optional_json().get("request_ids")
        if ids is not None and not (isinstance(ids, list) and all(isinstance(i, str) for i in ids)):
            raise RequestError("request_ids: must be a list of strings", "request_ids")
        aborted = self.engine.control.abort(None if ids is None else set(ids))
        self._send_json(200, {"status": "aborted", "aborted": aborted})

    # --- weights (SGLang's names) ------------------------------------------------------------

    def _weights_from_disk(self) -> None:
        body = self._json_body()
        folder = body.get("model_path")
        if not isinstance(folder, str) or not folder:
            raise RequestError("model_path: must be a folder path", "model_path")
        version = int_field(body, "version", None, 0, (1 << 31) - 1)
        self._send_json(200, self.engine.load_from_disk(folder, version))

    def _weights_from_tensor(self, query: dict[str, list[str]]) -> None:
        raw = self._body()
        version = None
        if "version" in query:
            try:
                version = int(query["version"][0])
            except ValueError:
                raise RequestError("version: must be an integer", "version") from None
        try:
            state = load_safetensors_bytes(bytes(raw))
        except Exception as error:  # noqa: BLE001 - any parse failure is the sender's
            raise RequestError(f"weights: the body is not a safetensors file ({error})", "weights") from None
        self._send_json(200, self.engine.load_state_dict(state, version))

    def _chat(self) -> None:
        body = self._json_body()
        e = self.engine
        prompt_ids = e.render_chat(body)
        s = e.sampling_of(body, len(prompt_ids), chat=True)
        want_ids = body.get("return_token_ids") is True
        tool_choice = body.get("tool_choice", "auto" if body.get("tools") else "none")
        parse_tools = bool(body.get("tools")) and tool_choice != "none"
        rid, keys = self._request_id(body, "chatcmpl")
        meta = {"id": rid, "created": int(time.time()), "model": body.get("model") or e.served_name}
        if body.get("stream") is True:
            self._chat_stream(body, prompt_ids, s, want_ids, parse_tools, meta, keys)
            return
        with e.control.generation(keys) as run:
            g = e.generate(prompt_ids, s, run=run)
        content, calls = parse_tool_calls(g.text) if parse_tools else (g.text, [])
        finish = "tool_calls" if calls and g.finish_reason == "stop" else g.finish_reason
        self._send_json(
            200,
            {
                **meta,
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": content,
                            "refusal": None,
                            "annotations": None,
                            "audio": None,
                            "function_call": None,
                            "tool_calls": calls,
                            "reasoning_content": None,
                        },
                        "logprobs": e.chat_logprobs(g.tokens) if s.want_logprobs else None,
                        "finish_reason": finish,
                        "stop_reason": g.stop_reason,
                        "token_ids": [t.id for t in g.tokens] if want_ids else None,
                        **_spans(g.tokens, want_ids),
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": _usage(g),
                "prompt_logprobs": None,
                "prompt_token_ids": prompt_ids if want_ids else None,
                "kv_transfer_params": None,
            },
        )

    def _chat_stream(
        self,
        body: dict[str, Any],
        prompt_ids: list[int],
        s: Sampling,
        want_ids: bool,
        parse_tools: bool,
        meta: dict[str, Any],
        keys: set[str],
    ) -> None:
        """Content token by token; from a `<tool_call>` on, tokens are held and the calls sent whole."""
        e = self.engine
        base = {**meta, "object": "chat.completion.chunk"}
        usage_wanted = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage") is True
        sent_text = 0  # characters of content sent
        sent_tokens = 0  # tokens whose ids went out

        def chunk(delta: dict[str, Any], tokens: list[Token], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            choice: dict[str, Any] = {
                "index": 0,
                "delta": delta,
                "logprobs": e.chat_logprobs(tokens) if s.want_logprobs and tokens else None,
                "finish_reason": finish,
            }
            if want_ids:
                choice["token_ids"] = [t.id for t in tokens]
                choice.update(_spans(tokens, want_ids))
            choice.update(extra)
            return {**base, "choices": [choice]}

        def sendable(text: str) -> int:
            """How much of the text may go out as content: not a `<tool_call>` block nor its possible start."""
            if parse_tools:
                at = text.find(TOOL_CALL_START)
                if at >= 0:
                    return at
                for k in range(min(len(TOOL_CALL_START) - 1, len(text)), 0, -1):
                    if TOOL_CALL_START.startswith(text[-k:]):
                        return len(text) - k
            # A trailing U+FFFD may be half a character: hold it until the next token completes it.
            return len(text) - 1 if text.endswith("\ufffd") else len(text)

        def on_token(g: Generation) -> None:
            nonlocal sent_text, sent_tokens
            end = sendable(g.text)
            if end > sent_text:
                self._event(chunk({"content": g.text[sent_text:end]}, g.tokens[sent_tokens:]))
                sent_text, sent_tokens = end, len(g.tokens)

        first = {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}]}
        if want_ids:
            first["prompt_token_ids"] = prompt_ids
        with e.control.generation(keys) as run:
            self._start_stream()
            self._event(first)
            g = e.generate(prompt_ids, s, on_token, run)
        content, calls = parse_tool_calls(g.text) if parse_tools else (g.text, [])
        rest = g.tokens[sent_tokens:]
        eos_last = bool(rest) and rest[-1].id in e.eos_ids and g.finish_reason == "stop"
        body_tokens, end_tokens = (rest[:-1], rest[-1:]) if eos_last else (rest, [])
        if calls:
            if content is not None and len(content) > sent_text:
                self._event(chunk({"content": content[sent_text:]}, []))
            deltas = [{"index": i, **c} for i, c in enumerate(calls)]
            self._event(chunk({"tool_calls": deltas}, body_tokens))
        elif len(g.text) > sent_text or body_tokens:
            self._event(chunk({"content": g.text[sent_text:]}, body_tokens))
        finish = "tool_calls" if calls and g.finish_reason == "stop" else g.finish_reason
        self._event(chunk({"content": ""}, end_tokens, finish, stop_reason=g.stop_reason))
        if usage_wanted:
            self._event({**base, "choices": [], "usage": _usage(g)})
        self._end_stream()

    def _completions(self) -> None:
        body = self._json_body()
        e = self.engine
        for key in ("echo", "suffix"):
            if body.get(key):
                raise RequestError(f"{key}: not supported by the reference engine", key)
        if int_field(body, "best_of", 1, 1, 1) != 1:
            raise RequestError("best_of: only 1 is supported", "best_of")
        prompt_ids = e.prompt_of(body)
        s = e.sampling_of(body, len(prompt_ids), chat=False)
        want_ids = body.get("return_token_ids") is True
        rid, keys = self._request_id(body, "cmpl")
        base = {"id": rid, "created": int(time.time()), "model": body.get("model") or e.served_name, "object": "text_completion"}
        if body.get("stream") is True:
            self._completions_stream(body, prompt_ids, s, want_ids, base, keys)
            return
        with e.control.generation(keys) as run:
            g = e.generate(prompt_ids, s, run=run)
        self._send_json(
            200,
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "text": g.text,
                        "logprobs": e.legacy_logprobs(g.tokens) if s.want_logprobs else None,
                        "finish_reason": g.finish_reason,
                        "stop_reason": g.stop_reason,
                        "prompt_logprobs": None,
                        "prompt_token_ids": prompt_ids if want_ids else None,
                        "token_ids": [t.id for t in g.tokens] if want_ids else None,
                        **_spans(g.tokens, want_ids),
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": _usage(g),
                "kv_transfer_params": None,
            },
        )

    def _completions_stream(
        self, body: dict[str, Any], prompt_ids: list[int], s: Sampling, want_ids: bool, base: dict[str, Any], keys: set[str]
    ) -> None:
        e = self.engine
        usage_wanted = isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage") is True
        sent_text = 0
        sent_tokens = 0

        def choice(text: str, tokens: list[Token], offset: int, finish: str | None, first: bool, stop: str | None = None) -> dict[str, Any]:
            return {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": e.legacy_logprobs(tokens, offset) if s.want_logprobs else None,
                        "finish_reason": finish,
                        "stop_reason": stop,
                        "prompt_token_ids": prompt_ids if want_ids and first else None,
                        "token_ids": [t.id for t in tokens] if want_ids else None,
                        **_spans(tokens, want_ids),
                    }
                ],
                "usage": None,
            }

        def on_token(g: Generation) -> None:
            nonlocal sent_text, sent_tokens
            end = len(g.text) - 1 if g.text.endswith("\ufffd") else len(g.text)
            if end > sent_text:
                self._event(choice(g.text[sent_text:end], g.tokens[sent_tokens:], sent_text, None, sent_tokens == 0))
                sent_text, sent_tokens = end, len(g.tokens)

        with e.control.generation(keys) as run:
            self._start_stream()
            g = e.generate(prompt_ids, s, on_token, run)
        rest = g.tokens[sent_tokens:]
        self._event(choice(g.text[sent_text:], rest, sent_text, g.finish_reason, sent_tokens == 0, g.stop_reason))
        if usage_wanted:
            self._event({**base, "choices": [], "usage": _usage(g)})
        self._end_stream()


def make_server(engine: ReferenceEngine, host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> ThreadingHTTPServer:
    handler = type("BoundEngineHandler", (EngineHandler,), {"engine": engine})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.verbose = verbose  # type: ignore[attr-defined]
    return server
