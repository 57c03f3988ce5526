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
"""

from .core import Generation, ReferenceEngine, RequestError, Sampling, Token, parse_tool_calls
from .server import EngineHandler, make_server

__all__ = [
    "EngineHandler",
    "Generation",
    "ReferenceEngine",
    "RequestError",
    "Sampling",
    "Token",
    "make_server",
    "parse_tool_calls",
]
