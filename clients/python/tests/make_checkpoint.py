"""Warms the tiny preset up until it calls a tool, and saves it: a policy whose answers hold real
`<tool_call>` blocks, for the trainer invariant tests (test/trainer.test.ts).

    python tests/make_checkpoint.py OUT_DIR [--seed 7] [--steps 60]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.sft import examples_from_messages, sft  # noqa: E402
from stepwise_client.trainer import save_checkpoint  # noqa: E402

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read",
            "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


def conversation(name: str, answer: str) -> dict:
    call = {"id": "call_0", "type": "function", "function": {"name": "read", "arguments": json.dumps({"path": name})}}
    return {
        "messages": [
            {"role": "user", "content": f"Read {name} and tell me what it says."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_0", "content": answer},
            {"role": "assistant", "content": f"It says {answer}."},
        ],
        "tools": TOOLS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--steps", type=int, default=60)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    policy = load_policy("tiny", seed=args.seed)
    rows = [conversation("a.txt", "42"), conversation("b.txt", "blue")]
    examples = examples_from_messages(policy, rows, {"enable_thinking": False})
    losses = sft(policy, examples, steps=args.steps, lr=1e-2, batch_size=4, seed=args.seed)
    save_checkpoint(policy, args.out)
    print(json.dumps({"out": args.out, "first_loss": losses[0], "last_loss": losses[-1]}))


if __name__ == "__main__":
    main()
