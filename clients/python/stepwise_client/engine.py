"""A reference inference engine: vLLM's OpenAI-compatible wire protocol over a Hugging Face causal LM.

    python -m stepwise_client.engine --model tiny --port 8300          # random Qwen3-shaped weights
    python -m stepwise_client.engine --model ./checkpoint --port 8300  # a saved model folder

It speaks what `stepwise serve --engine vllm=URL` speaks to vLLM, nothing Stepwise-specific:
`/v1/chat/completions` (streaming or not, tools through the chat template and Qwen3's hermes
`<tool_call>` blocks) and `/v1/completions` with `return_token_ids` (`prompt_token_ids`, `token_ids`)
and per-token logprobs, `/v1/models`, `/health`. Logprobs are the model's raw ones (vLLM's default
`logprobs_mode`: before temperature or top-p), so a trainer's recomputed log-probs match them.

Weights switch atomically between generations (SGLang's endpoint names):
`POST /update_weights_from_disk {"model_path": DIR}` and `POST /update_weights_from_tensor` with a
safetensors body (`?version=N` is recorded and reported by `/health`-adjacent `GET /weights`).

Generations run one at a time under one lock (a reference, not a throughput engine).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import torch
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import load_file

from .models import Policy, load_policy

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_TOP_LOGPROBS = 20
TOOL_CALL_START = "<tool_call>"
TOOL_CALL_RE = re.compile(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", re.DOTALL)


class RequestError(Exception):
    """A bad request: answered 400 in OpenAI's error shape, naming the field."""

    def __init__(self, message: str, param: str | None = None, status: int = 400) -> None:
        super().__init__(message)
        self.param = param
        self.status = status


@dataclass
class Sampling:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    top_logprobs: int = 0
    want_logprobs: bool = False
    ignore_eos: bool = False


@dataclass
class Token:
    id: int
    logprob: float
    top: list[tuple[int, float]]


@dataclass
class Generation:
    prompt_ids: list[int]
    tokens: list[Token]
    finish_reason: str  # stop | length
    stop_reason: str | None
    text: str  # decoded output without special tokens, cut at a stop string


def _number(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{key}: must be a number", key)
    if not lo <= value <= hi:
        raise RequestError(f"{key}: must be between {lo} and {hi}", key)
    return float(value)


def _int(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"{key}: must be an integer", key)
    if not lo <= value <= hi:
        raise RequestError(f"{key}: must be between {lo} and {hi}", key)
    return value


def _stops(body: dict[str, Any]) -> list[str]:
    stop = body.get("stop")
    if stop is None:
        return []
    if isinstance(stop, str):
        return [stop] if stop else []
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return [s for s in stop if s]
    raise RequestError("stop: must be a string or a list of strings", "stop")


def _text_content(content: Any, where: str) -> Any:
    """OpenAI's content parts joined to the string the chat template expects."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(f"{where}[{i}]: only text parts are supported", f"{where}[{i}]")
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(f"{where}: must be a string or a list of text parts", where)


def parse_tool_calls(text: str) -> tuple[str | None, list[dict[str, Any]]]:
    """Hermes-style `<tool_call>{json}</tool_call>` blocks, as vLLM's hermes parser reads them.

    Text before the first block is the content; a block that is not `{"name", "arguments"}` JSON
    leaves the whole text as content with no calls (vLLM's behaviour on a parse failure).
    """
    start = text.find(TOOL_CALL_START)
    if start < 0:
        return text, []
    calls = []
    for match in TOOL_CALL_RE.finditer(text, start):
        raw = (match.group(1) if match.group(1) is not None else match.group(2)).strip()
        try:
            parsed = json.loads(raw)
        except ValueError:
            return text, []
        if not isinstance(parsed, dict) or not isinstance(parsed.get("name"), str):
            return text, []
        arguments = parsed.get("arguments", {})
        calls.append(
            {
                "id": f"chatcmpl-tool-{secrets.token_hex(16)}",
                "type": "function",
                "function": {
                    "name": parsed["name"],
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False),
                },
            }
        )
    content = text[:start]
    return (content if content.strip() else None), calls


class ReferenceEngine:
    """The model, the tokenizer and the generation loop; HTTP lives in `EngineHandler`."""

    def __init__(self, policy: Policy, *, seed: int = 0, max_model_len: int = 4096, served_name: str | None = None):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.served_name = served_name or policy.name
        self.max_model_len = max_model_len
        self.seed = seed
        self.requests = 0
        self.weights_version: int | None = None
        self.weights_loaded_at = time.time()
        # One generation at a time; a weight update takes the same lock, so it lands between requests.
        self.lock = threading.Lock()
        eos = {self.tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
        self.eos_ids = {i for i in eos if isinstance(i, int) and i >= 0}
        self.special_ids = set(self.tokenizer.all_special_ids)

    # --- rendering ---------------------------------------------------------------------------

    def render_chat(self, body: dict[str, Any]) -> list[int]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError("messages: must be a non-empty list", "messages")
        clean = []
        for i, m in enumerate(messages):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise RequestError(f"messages[{i}]: must be an object with a role", f"messages[{i}].role")
            m = dict(m)
            m["content"] = _text_content(m.get("content"), f"messages[{i}].content")
            if m.get("tool_calls") is not None and not isinstance(m["tool_calls"], list):
                raise RequestError(f"messages[{i}].tool_calls: must be a list", f"messages[{i}].tool_calls")
            clean.append(m)
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError("tools: must be a list", "tools")
        kwargs = body.get("chat_template_kwargs") or {}
        if not isinstance(kwargs, dict):
            raise RequestError("chat_template_kwargs: must be an object", "chat_template_kwargs")
        try:
            text = self.tokenizer.apply_chat_template(
                clean, tools=tools or None, add_generation_prompt=True, tokenize=False, **kwargs
            )
        except Exception as error:  # the template raises on shapes it cannot render
            raise RequestError(f"messages: the chat template could not render them ({error})", "messages") from None
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt_of(self, body: dict[str, Any]) -> list[int]:
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt, add_special_tokens=False)
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            vocab = self.policy.model.config.vocab_size
            bad = next((t for t in prompt if not 0 <= t < vocab), None)
            if bad is not None:
                raise RequestError(f"prompt: token id {bad} is outside the vocabulary (0..{vocab - 1})", "prompt")
            return list(prompt)
        raise RequestError("prompt: must be a string, a list of token ids, or a batch of one of those", "prompt")

    def sampling_of(self, body: dict[str, Any], prompt_len: int, *, chat: bool) -> Sampling:
        if _int(body, "n", 1, 1, 1) != 1:
            raise RequestError("n: only 1 is supported", "n")
        room = self.max_model_len - prompt_len
        if room <= 0:
            raise RequestError(
                f"the prompt is {prompt_len} tokens, at or beyond the engine's max_model_len {self.max_model_len}",
                "messages" if chat else "prompt",
            )
        key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = _int(body, key, room if chat else 16, 1, 1 << 30)
        assert max_tokens is not None
        if chat:
            want = body.get("logprobs", False)
            if want is not None and not isinstance(want, bool):
                raise RequestError("logprobs: must be a boolean", "logprobs")
            top = _int(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS) or 0
            want_logprobs = bool(want)
        else:
            top_n = _int(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
            want_logprobs = top_n is not None
            top = top_n or 0
        seed = _int(body, "seed", None, -(1 << 63), (1 << 64) - 1)
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise RequestError("ignore_eos: must be a boolean", "ignore_eos")
        return Sampling(
            max_tokens=min(max_tokens, room),
            temperature=_number(body, "temperature", 1.0, 0.0, 100.0),
            top_p=_number(body, "top_p", 1.0, 1e-9, 1.0),
            top_k=int(_number(body, "top_k", 0, -1, 1 << 20)),
            seed=seed,
            stop=_stops(body),
            top_logprobs=top,
            want_logprobs=want_logprobs,
            ignore_eos=ignore_eos,
        )

    # --- generation --------------------------------------------------------------------------

    def _generator(self, seed: int | None) -> torch.Generator:
        if seed is None:
            # Reproducible runs, distinct rollouts: the engine seed and a request counter.
            self.requests += 1
            seed = self.seed * 1_000_003 + self.requests
        return torch.Generator().manual_seed(seed % (1 << 63))

    @staticmethod
    def _pick(logits: torch.Tensor, s: Sampling, generator: torch.Generator) -> int:
        if s.temperature == 0.0:
            return int(torch.argmax(logits))
        scaled = logits / s.temperature
        if s.top_k > 0 and s.top_k < scaled.numel():
            kth = torch.topk(scaled, s.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, float("-inf"))
        probs = torch.softmax(scaled, dim=-1)
        if s.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            keep = torch.cumsum(sorted_probs, 0) - sorted_probs < s.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_probs[keep])
        return int(torch.multinomial(probs, 1, generator=generator))

    @torch.no_grad()
    def tokens(self, prompt_ids: list[int], s: Sampling) -> Iterator[Token]:
        """Samples token by token with a KV cache; call with `self.lock` held."""
        model = self.policy.model
        device = next(model.parameters()).device
        generator = self._generator(s.seed)
        past = None
        step_input = torch.tensor([prompt_ids], device=device)
        for _ in range(s.max_tokens):
            out = model(input_ids=step_input, past_key_values=past, use_cache=True, logits_to_keep=1)
            past = out.past_key_values
            logits = out.logits[0, -1].float().cpu()
            # In float64: torch's fp32 log_softmax on CPU drifts by up to 3e-4 over 151k ids.
            logprobs = torch.log_softmax(logits.double(), dim=-1)
            token_id = self._pick(logits, s, generator)
            top: list[tuple[int, float]] = []
            if s.top_logprobs:
                values, ids = torch.topk(logprobs, s.top_logprobs)
                top = list(zip(ids.tolist(), values.tolist()))
            yield Token(token_id, float(logprobs[token_id]), top)
            if token_id in self.eos_ids and not s.ignore_eos:
                return
            step_input = torch.tensor([[token_id]], device=device)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(self, prompt_ids: list[int], s: Sampling, on_token: Callable[[Generation], None] | None = None) -> Generation:
        """The whole generation; `on_token` sees it grow (for streaming). Call with the lock held."""
        g = Generation(prompt_ids, [], "length", None, "")
        for token in self.tokens(prompt_ids, s):
            g.tokens.append(token)
            if token.id in self.eos_ids and not s.ignore_eos:
                g.finish_reason = "stop"
                break
            g.text = self.decode([t.id for t in g.tokens])
            hit = next(((i, stop) for stop in s.stop if (i := g.text.find(stop)) >= 0), None)
            if hit:
                g.text, g.finish_reason, g.stop_reason = g.text[: hit[0]], "stop", hit[1]
                break
            if on_token:
                on_token(g)
        return g

    # --- weights -----------------------------------------------------------------------------

    def load_state_dict(self, state: dict[str, torch.Tensor], version: int | None) -> dict[str, Any]:
        started = time.perf_counter()
        model = self.policy.model
        params = next(model.parameters())
        state = {k: v.to(dtype=params.dtype, device=params.device) for k, v in state.items()}
        with self.lock:
            missing, unexpected = model.load_state_dict(state, strict=False)
            # Tied weights (lm_head = embed_tokens) may be sent once; anything else missing is an error.
            missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
            if missing or unexpected:
                raise RequestError(
                    f"weights: missing {missing[:5]}, unexpected {unexpected[:5]} (this engine's model differs)",
                    "weights",
                )
            self.weights_version = version
            self.weights_loaded_at = time.time()
        return {"ok": True, "version": version, "loaded_ms": round((time.perf_counter() - started) * 1000, 3)}

    def load_from_disk(self, folder: str, version: int | None) -> dict[str, Any]:
        path = Path(folder)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
        if not files:
            raise RequestError(f"model_path: no .safetensors files in {folder!r}", "model_path")
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        return self.load_state_dict(state, version)

    # --- wire formats ------------------------------------------------------------------------

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def chat_logprobs(self, tokens: list[Token]) -> dict[str, Any]:
        content = []
        for t in tokens:
            top = [self._entry(t.id, t.logprob)] + [self._entry(i, lp) for i, lp in t.top if i != t.id]
            content.append({**self._entry(t.id, t.logprob), "top_logprobs": top[: max(len(t.top), 0)]})
        return {"content": content}

    def legacy_logprobs(self, tokens: list[Token], offset: int = 0) -> dict[str, Any]:
        out: dict[str, Any] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        position = offset
        for t in tokens:
            text = self.tokenizer.decode([t.id])
            out["text_offset"].append(position)
            out["token_logprobs"].append(t.logprob)
            out["tokens"].append(text)
            top = {text: t.logprob}
            for i, lp in t.top:
                top.setdefault(self.tokenizer.decode([i]), lp)
            out["top_logprobs"].append(dict(list(top.items())[: max(len(t.top), 1)]))
            if t.id not in self.special_ids:
                position += len(text)
        return out


def _usage(g: Generation) -> dict[str, Any]:
    n = len(g.tokens)
    return {"prompt_tokens": len(g.prompt_ids), "total_tokens": len(g.prompt_ids) + n, "completion_tokens": n, "prompt_tokens_details": None}


class EngineHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stepwise-reference-engine"
    engine: ReferenceEngine  # set on the subclass made by `make_server`

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
        kind = "BadRequestError" if status == 400 else "NotFoundError" if status == 404 else "InternalServerError"
        self._send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def _body(self) -> Any:
        length = self.headers.get("content-length")
        if length is None:
            raise RequestError("the request needs a content-length", None, 411)
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

    def _start_stream(self) -> None:
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
        try:
            handler()
        except RequestError as error:
            self._error(error.status, str(error), error.param)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client left: its generation stopped with the write
        except Exception as error:  # noqa: BLE001 - every failure is answered, never a dropped socket
            self._error(500, f"{type(error).__name__}: {error}")

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
        else:
            self._error(404, f"no route GET {path}")

    def do_POST(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        routes: dict[str, Callable[[], None]] = {
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
            "/update_weights_from_disk": self._weights_from_disk,
            "/update_weights_from_tensor": lambda: self._weights_from_tensor(parse_qs(url.query)),
        }
        route = routes.get(url.path)
        if route is None:
            self._body() if self.headers.get("content-length") else None
            self._error(404, f"no route POST {url.path}")
            return
        self._dispatch(route)

    def _weights_from_disk(self) -> None:
        body = self._json_body()
        folder = body.get("model_path")
        if not isinstance(folder, str) or not folder:
            raise RequestError("model_path: must be a folder path", "model_path")
        version = _int(body, "version", None, 0, (1 << 31) - 1)
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
        meta = {"id": f"chatcmpl-{secrets.token_hex(16)}", "created": int(time.time()), "model": body.get("model") or e.served_name}
        if body.get("stream") is True:
            self._chat_stream(body, prompt_ids, s, want_ids, parse_tools, meta)
            return
        with e.lock:
            g = e.generate(prompt_ids, s)
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

    def _chat_stream(self, body: dict[str, Any], prompt_ids: list[int], s: Sampling, want_ids: bool, parse_tools: bool, meta: dict[str, Any]) -> None:
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
        with e.lock:
            self._start_stream()
            self._event(first)
            g = e.generate(prompt_ids, s, on_token)
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
        if _int(body, "best_of", 1, 1, 1) != 1:
            raise RequestError("best_of: only 1 is supported", "best_of")
        prompt_ids = e.prompt_of(body)
        s = e.sampling_of(body, len(prompt_ids), chat=False)
        want_ids = body.get("return_token_ids") is True
        meta = {"id": f"cmpl-{secrets.token_hex(16)}", "created": int(time.time()), "model": body.get("model") or e.served_name}
        base = {**meta, "object": "text_completion"}
        if body.get("stream") is True:
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

            with e.lock:
                self._start_stream()
                g = e.generate(prompt_ids, s, on_token)
            rest = g.tokens[sent_tokens:]
            self._event(choice(g.text[sent_text:], rest, sent_text, g.finish_reason, sent_tokens == 0, g.stop_reason))
            if usage_wanted:
                self._event({**base, "choices": [], "usage": _usage(g)})
            self._end_stream()
            return
        with e.lock:
            g = e.generate(prompt_ids, s)
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
                    }
                ],
                "service_tier": None,
                "system_fingerprint": None,
                "usage": _usage(g),
                "kv_transfer_params": None,
            },
        )


def make_server(engine: ReferenceEngine, host: str = "127.0.0.1", port: int = 0, verbose: bool = False) -> ThreadingHTTPServer:
    handler = type("BoundEngineHandler", (EngineHandler,), {"engine": engine})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    server.verbose = verbose  # type: ignore[attr-defined]
    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m stepwise_client.engine",
        description="A vLLM-compatible reference engine over a Hugging Face causal LM (torch + transformers).",
    )
    parser.add_argument("--model", default="tiny", help="a preset (tiny, qwen3-0.6b-shape: random weights) or a model folder")
    parser.add_argument("--tokenizer", default=None, help="tokenizer folder (default: the model folder's, else the checkout's Qwen3 files)")
    parser.add_argument("--served-model-name", default=None, help="the model id /v1/models lists")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8300, help="0 picks a free port (printed)")
    parser.add_argument("--seed", type=int, default=0, help="initial weights of a preset, and sampling when a request sends no seed")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--verbose", action="store_true", help="log each request")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    policy = load_policy(args.model, seed=args.seed, dtype=args.dtype, device=args.device, tokenizer=args.tokenizer)
    engine = ReferenceEngine(policy, seed=args.seed, max_model_len=args.max_model_len, served_name=args.served_model_name)
    server = make_server(engine, args.host, args.port, args.verbose)
    host, port = server.server_address[:2]
    # One JSON line on stdout says where it listens (a parent process reads it).
    print(json.dumps({"listening": f"http://{host}:{port}", "model": engine.served_name}), flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main(sys.argv[1:])
