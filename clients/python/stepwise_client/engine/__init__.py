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
safetensors body (`?version=N`); `GET /weights` says which version is served.

Generations run one at a time under one lock (a reference, not a throughput engine).

vLLM's dev-mode RL control routes, with vLLM's semantics (control.py): `POST /pause?mode=abort|wait|keep`,
`POST /resume`, `GET /is_paused`, `POST /abort_requests`, and the weight-update session
`POST /start_weight_update`, `/update_weights {"update_info": {"model_path": DIR}}`,
`/finish_weight_update {"weight_version": V}`, `GET /weight_info`. Every choice that carries
`token_ids` also carries `weight_version_spans` (`[[version, count], ...]`: the weights behind each).
"""

from .control import Control, Run
from .core import Generation, ReferenceEngine, RequestError, Sampling, Token, parse_tool_calls
from .server import EngineHandler, make_server

__all__ = [
    "Control",
    "EngineHandler",
    "Generation",
    "ReferenceEngine",
    "RequestError",
    "Run",
    "Sampling",
    "Token",
    "make_server",
    "parse_tool_calls",
]
