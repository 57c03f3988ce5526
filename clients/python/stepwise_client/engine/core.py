"""The reference engine's model side: rendering, sampling params, token-by-token generation with raw
log-probs, Qwen3 tool-call parsing, weight loading, and the wire shapes of log-probs.

HTTP lives in `server.py`; this module knows nothing of sockets.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ..models import Policy
from .control import Control, Run

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
    version: int | None = None  # the engine's weights version when it was sampled


def version_spans(tokens: list[Token]) -> list[list[Any]]:
    """`[[version, count], ...]` over the tokens in order: which weights produced each."""
    spans: list[list[Any]] = []
    for t in tokens:
        if spans and spans[-1][0] == t.version:
            spans[-1][1] += 1
        else:
            spans.append([t.version, 1])
    return spans


@dataclass
class Generation:
    prompt_ids: list[int]
    tokens: list[Token]
    finish_reason: str  # stop | length | abort
    stop_reason: str | None
    text: str  # decoded output without special tokens, cut at a stop string


def number_field(body: dict[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RequestError(f"{key}: must be a number", key)
    if not lo <= value <= hi:
        raise RequestError(f"{key}: must be between {lo} and {hi}", key)
    return float(value)


def int_field(body: dict[str, Any], key: str, default: int | None, lo: int, hi: int) -> int | None:
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
    """OpenAI's content parts joined to the string the chat template expects (None: empty, as vLLM)."""
    if content is None:
        return ""
    if isinstance(content, str):
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
        self.weights_version: int | None = None  # the int `GET /weights` and the token spans report
        self.weight_version: Any = None  # as /finish_weight_update gave it (vLLM's weight_version)
        self.weight_label: str | None = None
        self.weight_gen = 0  # completed weight updates, any route
        self.weights_epoch = 0  # tensor loads: a parked generation's KV cache is stale when it moved
        self.weights_loaded_at = time.time()
        self.tokens_sampled = 0  # a counter tests and logs can watch
        # One generation at a time; a weight update takes the same lock, so it lands between requests,
        # unless the engine is paused (see control.py).
        self.lock = threading.Lock()
        self.control = Control(self.lock)
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
        if int_field(body, "n", 1, 1, 1) != 1:
            raise RequestError("n: only 1 is supported", "n")
        room = self.max_model_len - prompt_len
        if room <= 0:
            raise RequestError(
                f"the prompt is {prompt_len} tokens, at or beyond the engine's max_model_len {self.max_model_len}",
                "messages" if chat else "prompt",
            )
        key = "max_completion_tokens" if chat and body.get("max_completion_tokens") is not None else "max_tokens"
        max_tokens = int_field(body, key, room if chat else 16, 1, 1 << 30)
        assert max_tokens is not None
        if chat:
            want = body.get("logprobs", False)
            if want is not None and not isinstance(want, bool):
                raise RequestError("logprobs: must be a boolean", "logprobs")
            top = int_field(body, "top_logprobs", 0, 0, MAX_TOP_LOGPROBS) or 0
            want_logprobs = bool(want)
        else:
            top_n = int_field(body, "logprobs", None, 0, MAX_TOP_LOGPROBS)
            want_logprobs = top_n is not None
            top = top_n or 0
        seed = int_field(body, "seed", None, -(1 << 63), (1 << 64) - 1)
        ignore_eos = body.get("ignore_eos", False)
        if not isinstance(ignore_eos, bool):
            raise RequestError("ignore_eos: must be a boolean", "ignore_eos")
        return Sampling(
            max_tokens=min(max_tokens, room),
            temperature=number_field(body, "temperature", 1.0, 0.0, 100.0),
            top_p=number_field(body, "top_p", 1.0, 1e-9, 1.0),
            top_k=int(number_field(body, "top_k", 0, -1, 1 << 20)),
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
        # Inverse CDF with one uniform draw: torch.multinomial over 151k ids costs ~10x more per token.
        cdf = torch.cumsum(probs.double(), 0)
        u = torch.rand(1, generator=generator, dtype=torch.float64) * cdf[-1]
        return int(torch.searchsorted(cdf, u).clamp(max=probs.numel() - 1))

    @torch.no_grad()
    def tokens(self, prompt_ids: list[int], s: Sampling, run: Run | None = None) -> Iterator[Token]:
        """Samples token by token with a KV cache; call with `self.lock` held, or as a `run` of
        `self.control`, which may stop it (abort) or park it at each token boundary.
        """
        model = self.policy.model
        device = next(model.parameters()).device
        generator = self._generator(s.seed)
        ids = list(prompt_ids)
        past = None
        epoch = self.weights_epoch
        step_input = torch.tensor([ids], device=device)
        for _ in range(s.max_tokens):
            if run is not None and not self.control.boundary(run):
                run.stopped = True
                return
            if past is not None and epoch != self.weights_epoch:
                # Weights changed while parked: rebuild the cache for everything so far under the new ones.
                past, step_input = None, torch.tensor([ids], device=device)
            epoch, version = self.weights_epoch, self.weights_version
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
            self.tokens_sampled += 1
            yield Token(token_id, float(logprobs[token_id]), top, version)
            if token_id in self.eos_ids and not s.ignore_eos:
                return
            ids.append(token_id)
            step_input = torch.tensor([[token_id]], device=device)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def generate(
        self,
        prompt_ids: list[int],
        s: Sampling,
        on_token: Callable[[Generation], None] | None = None,
        run: Run | None = None,
    ) -> Generation:
        """The whole generation; `on_token` sees it grow (for streaming). Call with the lock held, or
        as a `run` (then an abort ends it with what it has, finish_reason "abort").
        """
        g = Generation(prompt_ids, [], "length", None, "")
        for token in self.tokens(prompt_ids, s, run):
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
        if run is not None and run.stopped:
            g.finish_reason = "abort"
        return g

    # --- weights -----------------------------------------------------------------------------

    def load_state_dict(self, state: dict[str, torch.Tensor], version: int | None, *, in_update: bool = False) -> dict[str, Any]:
        """Loads tensors in place. A one-shot load (the SGLang-named routes) also names the version;
        within /start_weight_update../finish_weight_update (`in_update`) the finish names it.
        """
        started = time.perf_counter()
        model = self.policy.model
        params = next(model.parameters())
        state = {k: v.to(dtype=params.dtype, device=params.device) for k, v in state.items()}
        with self.control.weights_change():
            missing, unexpected = model.load_state_dict(state, strict=False)
            self.weights_epoch += 1  # even a refused load may have copied some tensors
            # Tied weights (lm_head = embed_tokens) may be sent once; anything else missing is an error.
            missing = [k for k in missing if not (k == "lm_head.weight" and model.config.tie_word_embeddings)]
            if missing or unexpected:
                raise RequestError(
                    f"weights: missing {missing[:5]}, unexpected {unexpected[:5]} (this engine's model differs)",
                    "weights",
                )
            if not in_update:
                self._set_version(version, None)
            self.weights_loaded_at = time.time()
        return {"ok": True, "version": self.weights_version, "loaded_ms": round((time.perf_counter() - started) * 1000, 3)}

    def load_from_disk(self, folder: str, version: int | None, *, in_update: bool = False) -> dict[str, Any]:
        path = Path(folder)
        files = sorted(path.glob("*.safetensors")) if path.is_dir() else []
        if not files:
            raise RequestError(f"model_path: no .safetensors files in {folder!r}", "model_path")
        state: dict[str, torch.Tensor] = {}
        for f in files:
            state.update(load_file(str(f)))
        return self.load_state_dict(state, version, in_update=in_update)

    def _set_version(self, version: Any, label: str | None) -> None:
        self.weight_version = version
        decimal = isinstance(version, str) and version.isascii() and version.isdecimal()
        is_int = isinstance(version, int) and not isinstance(version, bool)
        self.weights_version = int(version) if decimal else version if is_int else None
        self.weight_label = label
        self.weight_gen += 1

    # --- vLLM's weight-update session: start, update (any number), finish ----------------------

    def start_weight_update(self) -> dict[str, Any]:
        if not self.control.start_update():
            raise RequestError("a weight update is already in progress: finish it first", None, 409)
        return {"message": "Weight update started"}

    def update_weights(self, body: dict[str, Any]) -> dict[str, Any]:
        """`{"update_info": {"model_path": DIR}}`: this engine's weight transfer is from disk."""
        info = body.get("update_info")
        folder = info.get("model_path") if isinstance(info, dict) else None
        if not isinstance(folder, str) or not folder:
            raise RequestError('update_info: must be {"model_path": a folder of .safetensors files}', "update_info")
        if not self.control.update_active:
            raise RequestError("no weight update in progress: call /start_weight_update first", None, 409)
        try:
            self.load_from_disk(folder, None, in_update=True)
        except RequestError as error:
            raise RequestError(f"update_info: {error}", "update_info") from None
        return {"message": "Weights updated"}

    def finish_weight_update(self, body: dict[str, Any]) -> dict[str, Any]:
        version, label = body.get("weight_version"), body.get("weight_label")
        if version is not None and (isinstance(version, bool) or not isinstance(version, (str, int))):
            raise RequestError("weight_version: must be a string", "weight_version")
        if label is not None and not isinstance(label, str):
            raise RequestError("weight_label: must be a string", "weight_label")
        if not self.control.finish_update():
            raise RequestError("no weight update in progress: call /start_weight_update first", None, 409)
        self._set_version(version, label)
        return {"message": "Weight update finished", "weight_gen": self.weight_gen, "weight_label": label}

    def update_weight_version(self, body: dict[str, Any]) -> dict[str, Any]:
        """Names the weights in force (vLLM's /update_weight_version): a trainer pushed them itself."""
        version = body.get("new_version")
        if not isinstance(version, str):
            raise RequestError("new_version: must be a string", "new_version")
        gen, label = self.weight_gen, self.weight_label
        self._set_version(version, label)
        self.weight_gen = gen  # a name, not an update
        return {"success": True, "new_version": version}

    def weight_info(self) -> dict[str, Any]:
        return {"weight_version": self.weight_version, "weight_gen": self.weight_gen, "weight_label": self.weight_label}

    # --- wire formats ------------------------------------------------------------------------

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.tokenizer.decode([token_id])
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    def chat_logprobs(self, tokens: list[Token]) -> dict[str, Any]:
        content = []
        for t in tokens:
            top = [self._entry(t.id, t.logprob)] + [self._entry(i, lp) for i, lp in t.top if i != t.id]
            content.append({**self._entry(t.id, t.logprob), "top_logprobs": top[: len(t.top)]})
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
