"""The trainer's mismatch report against a real pool (test/mismatch.test.ts asserts on what this prints).

Leases one group prefix-tree packed (`json`) and updates on it with `report_mismatch=True`, then one
group `padded` and calls `Trainer.report_mismatch` on it; both acked. Before each report it computes
every served step's log-probs on its own, one plain causal forward per step (no packing, no padding,
none of the library's row bookkeeping), so the test can work out the expected mismatch itself.

    python tests/check_mismatch.py --url URL --channel C --lower L --upper U
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client import StepwiseClient  # noqa: E402
from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.trainer import LossConfig, Trainer  # noqa: E402


@torch.no_grad()
def step_logprobs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> list[float]:
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids, use_cache=False).logits[0].double()
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt) + k - 1, token]) for k, token in enumerate(response)]


def served_steps(batch: Any) -> list[tuple[str, int, list[int], list[int]]]:
    """(uid, index, prompt, response) of each served step, from the lease itself."""
    if batch.format == "json":
        return [
            (t["trajectory_uid"], s["step_index"], s["prompt_ids"], s["response_ids"])
            for g in batch.data["groups"]
            for t in g["trajectories"]
            for s in t["steps"]
        ]
    a = batch.arrays
    out = []
    for row in range(len(a["step_index"])):
        p, r = int(a["prompt_lengths"][row]), int(a["response_lengths"][row])
        prompt = a["prompts"][row].tolist()[a["prompts"].shape[1] - p :]
        uid = str(a["trajectory_uids"][int(a["trajectory_index"][row])])
        out.append((uid, int(a["step_index"][row]), prompt, a["responses"][row].tolist()[:r]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--lower", type=float, required=True, help="the trainer's IcePop bounds")
    parser.add_argument("--upper", type=float, required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    policy = load_policy("tiny", seed=3)
    loss = LossConfig(rollout_rs="icepop", rollout_rs_threshold=args.upper, rollout_rs_threshold_lower=args.lower)
    trainer = Trainer(policy, StepwiseClient(args.url), channel=args.channel, lr=1e-3, loss=loss)
    out = []
    for pack in (True, False):
        trainer.pack = pack
        batch = trainer.lease(1, n_rollouts=2)
        assert batch is not None, "nothing to lease"
        with batch:
            policy.model.eval()
            logp = {f"{u}/{i}": step_logprobs(policy.model, p, r) for u, i, p, r in served_steps(batch)}
            inputs = trainer.inputs(batch)
            metrics = trainer.update(batch, inputs, report_mismatch=True) if pack else trainer.report_mismatch(batch, inputs)
        out.append({"lease_id": batch.lease_id, "format": batch.format, "logp": logp, "metrics": metrics})
    print(json.dumps({"batches": out}))


if __name__ == "__main__":
    main()
