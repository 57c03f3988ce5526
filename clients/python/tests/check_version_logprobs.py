"""Recomputes each response token's log-prob under the weights of the policy version that produced it
(a partial rollout's tokens on both sides of a weight switch), against the behaviour log-probs the
gateway stored. For test/partial-rollouts-reference.test.ts.

    python tests/check_version_logprobs.py IN.json   # {"folders": {"0": DIR, ...}, "steps": [...]}

Each step: {"prompt_ids", "response_ids", "logprobs", "version_spans": [[version, count], ...]}.
Prints {"tokens": n, "max_abs_diff": d, "tokens_by_version": {...}} as one JSON line.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client.models import load_policy  # noqa: E402


@torch.no_grad()
def logprobs_under(model: torch.nn.Module, prompt: list[int], response: list[int]) -> list[float]:
    ids = torch.tensor([prompt + response])
    logits = model(input_ids=ids).logits[0].double()
    # Position p predicts token p + 1; in float64 as the engine computes them.
    lp = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) + len(response) - 1], dim=-1)
    return lp.gather(1, torch.tensor(response).unsqueeze(1)).squeeze(1).tolist()


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    torch.set_num_threads(1)
    models = {v: load_policy(folder).model.eval() for v, folder in spec["folders"].items()}
    worst, tokens, by_version, naive = 0.0, 0, {}, 0.0
    for step in spec["steps"]:
        at = 0
        first = str(step["version_spans"][0][0])
        start = logprobs_under(models[first], step["prompt_ids"], step["response_ids"])
        for version, count in step["version_spans"]:
            got = logprobs_under(models[str(version)], step["prompt_ids"], step["response_ids"])
            for i in range(at, at + count):
                worst = max(worst, abs(got[i] - step["logprobs"][i]))
                # The check has teeth: the start's weights alone miss the tokens after a switch.
                naive = max(naive, abs(start[i] - step["logprobs"][i]))
            by_version[str(version)] = by_version.get(str(version), 0) + count
            tokens += count
            at += count
    print(json.dumps({"tokens": tokens, "max_abs_diff": worst, "tokens_by_version": by_version, "start_weights_max_abs_diff": naive}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
