"""TRL's GRPOTrainer on Stepwise groups through `StepwiseRollouts`: one optimizer step, tiny model, CPU.

    python tests/check_trl.py --pool URL --groups 2 --num-generations 4

Prints one JSON object: what TRL was served, what it logged, whether the weights moved, the leases acked.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
import trl  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from stepwise_client.client import StepwiseClient  # noqa: E402
from stepwise_client.models import load_policy  # noqa: E402
from stepwise_client.trl_adapter import StepwiseRollouts  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True)
    p.add_argument("--groups", type=int, required=True)
    p.add_argument("--num-generations", type=int, required=True)
    args = p.parse_args()
    torch.manual_seed(0)
    policy = load_policy("tiny", seed=3)
    before = {k: v.detach().clone() for k, v in policy.model.named_parameters()}
    source = StepwiseRollouts(StepwiseClient(args.pool), channel="train", num_generations=args.num_generations)
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out,
            num_generations=args.num_generations,
            per_device_train_batch_size=args.num_generations * args.groups,
            steps_per_generation=1,
            max_steps=1,
            learning_rate=1e-3,
            beta=0.0,
            use_cpu=True,
            report_to=[],
            logging_steps=1,
            save_strategy="no",
            bf16=False,
            max_completion_length=4096,
        )
        trainer = GRPOTrainer(
            model=policy.model,
            processing_class=policy.tokenizer,
            reward_funcs=[source.reward],
            args=config,
            train_dataset=source.dataset(args.groups),
            rollout_func=source.rollout,
            callbacks=[source.callback()],
        )
        trainer.train()
    moved = sum(float((v.detach() - before[k]).abs().sum()) for k, v in policy.model.named_parameters())
    logs = [h for h in trainer.state.log_history if "reward" in h]
    print(
        json.dumps(
            {
                "trl": trl.__version__,
                "served": source.served,
                "acked": source.acked,
                "pending": len(source.pending),
                "weights_moved": moved,
                "logged_reward": logs[0]["reward"] if logs else None,
            }
        )
    )


if __name__ == "__main__":
    main()
