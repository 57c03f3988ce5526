"""One trainer iteration against a live pool and engine: lease → update → ack → weights to the
engine → policy version (drained). Prints what changed, as JSON (test/trainer.test.ts).

    python tests/train_once.py --url URL --engine URL --model DIR --channel C --groups G --n-rollouts N
"""

from __future__ import annotations

import argparse
import json
import sys
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from stepwise_client import StepwiseClient  # noqa: E402
from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.trainer import Trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--engine", required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--channel", default="train")
    parser.add_argument("--groups", type=int, required=True)
    parser.add_argument("--n-rollouts", type=int, required=True)
    parser.add_argument("--pack", action="store_true")
    args = parser.parse_args()
    torch.manual_seed(0)
    policy = load_policy(args.model)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    trainer = Trainer(policy, StepwiseClient(args.url), engines=[args.engine], lr=1e-3, pack=args.pack, channel=args.channel)
    start_version = trainer.version
    metrics = trainer.train_step(args.groups, n_rollouts=args.n_rollouts, wait_ms=5000)
    changed = sum(int(not torch.equal(before[k], v)) for k, v in policy.model.state_dict().items())
    published = trainer.publish(drain=True)
    with urllib.request.urlopen(f"{args.engine}/weights") as answer:
        engine_weights = json.load(answer)
    print(
        json.dumps(
            {
                "metrics": metrics,
                "start_version": start_version,
                "published": published,
                "engine_weights_version": engine_weights["version"],
                "tensors_changed": changed,
            }
        )
    )


if __name__ == "__main__":
    main()
