"""`python -m stepwise_client.engine`: serve a model (see the package's docstring)."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from ..lifeline import exit_with_parent
from ..models import load_policy
from .core import ReferenceEngine
from .server import make_server


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
    exit_with_parent()
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


main(sys.argv[1:])
