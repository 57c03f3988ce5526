"""The trainer's LM-head log-probs (`target_logprobs`, its backward written out) against autograd's
own graph of the same ops, and prints, as JSON, whether each output and gradient is bit for bit the
same (test/trainer-head.test.ts asserts on it): one chunk (logits kept), several chunks (logits
recomputed), and a second backward of a retained graph.

    python tests/check_head_logprobs.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client import trainer  # noqa: E402


def autograd_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    chunk = trainer.LOGIT_CHUNK
    return torch.cat([trainer._chunk_logprobs(head, hidden[i : i + chunk], targets[i : i + chunk]) for i in range(0, len(hidden), chunk)])


def run(logprobs_of, rows: int, backwards: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(rows)
    head = torch.nn.Linear(16, 5000, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(5000, 16, generator=g))
    hidden = torch.randn(rows, 16, generator=g).requires_grad_(True)
    targets = torch.randint(0, 5000, (rows,), generator=g)
    weights = torch.randn(rows, generator=g)
    out = logprobs_of(head, hidden, targets)
    loss = (out * weights).sum()
    for _ in range(backwards):
        loss.backward(retain_graph=True)
    return {"out": out.detach(), "grad_hidden": hidden.grad, "grad_weight": head.weight.grad}


def main() -> None:
    torch.set_num_threads(1)
    trainer.LOGIT_CHUNK = 8
    report = {}
    for case, rows, backwards in [("one_chunk", 6, 1), ("several_chunks", 29, 1), ("second_backward", 29, 2), ("second_backward_one_chunk", 6, 2)]:
        ours = run(trainer.target_logprobs, rows, backwards)
        theirs = run(autograd_logprobs, rows, backwards)
        report[case] = {k: bool(torch.equal(ours[k], theirs[k])) for k in ours}
        report[case]["max_abs_diff"] = max(float((ours[k] - theirs[k]).abs().max()) for k in ours)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
