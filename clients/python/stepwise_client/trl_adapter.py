"""TRL's `GRPOTrainer` trained on Stepwise groups instead of generating its own (the `trl` extra).

    source = StepwiseRollouts(StepwiseClient(url), channel="train", num_generations=8)
    trainer = GRPOTrainer(
        model=model, processing_class=tokenizer, args=GRPOConfig(num_generations=8, ...),
        reward_funcs=[source.reward], train_dataset=source.dataset(groups_to_train),
        rollout_func=source.rollout, callbacks=[source.callback()],
    )
    trainer.train()

TRL asks its `rollout_func` for `num_generations` completions per prompt. Here each dataset row is a
slot for one Stepwise group: `rollout` leases one complete group per slot
(`n_rollouts = num_generations`) and returns each trajectory as one TRL completion. A multi-turn
trajectory becomes its first step's prompt followed by every later token: the model's responses
(`env_mask` 1, with the engine's log-probs) and what came between them, tool results and chat
markup (`env_mask` 0, TRL's mask for environment tokens). Where a step's prompt does not extend the
previous step's prompt and response (a rewritten history), the completion starts again from that
step. The reward is the trajectory's; TRL computes its own group-relative advantages from it.

Leases are acked once TRL's optimizer step that used them is done (`callback()`), and nacked when
training ends before that, so a crash or an interrupted run gives the groups back.
"""

from __future__ import annotations

import time
from typing import Any

from datasets import Dataset
from transformers import TrainerCallback

from .client import Batch, StepwiseClient


def trajectory_completion(steps: list[dict[str, Any]]) -> dict[str, Any]:
    """One trajectory as (prompt ids, completion ids, log-probs, env mask), steps in order."""
    steps = sorted(steps, key=lambda s: s["step_index"])
    prompt = list(steps[0]["prompt_ids"])
    completion: list[int] = []
    logprobs: list[float] = []
    mask: list[int] = []
    context = list(prompt)  # everything the model has seen so far: prompt + completion
    for step in steps:
        p = step["prompt_ids"]
        if p[: len(context)] == context:
            between = p[len(context) :]
        else:
            # The history was rewritten (not a continuation): start this completion over here.
            prompt, completion, logprobs, mask, between = list(p), [], [], [], []
            context = list(p)
        completion += between
        logprobs += [0.0] * len(between)
        mask += [0] * len(between)
        response = step["response_ids"]
        rollout = step.get("rollout_log_probs") or [0.0] * len(response)
        completion += response
        logprobs += list(rollout)
        mask += [1] * len(response)
        context = p + response
    return {"prompt_ids": prompt, "completion_ids": completion, "logprobs": logprobs, "env_mask": mask}


class StepwiseRollouts:
    """Feeds Stepwise groups to TRL's GRPOTrainer through its `rollout_func`."""

    def __init__(
        self,
        client: StepwiseClient,
        *,
        channel: str = "train",
        num_generations: int,
        wait_s: float = 600.0,
        ttl_ms: int = 3_600_000,
    ) -> None:
        self.client = client
        self.channel = channel
        self.num_generations = num_generations
        self.wait_s = wait_s
        self.ttl_ms = ttl_ms
        self.pending: list[Batch] = []
        self.acked: list[str] = []
        self.served: list[dict[str, Any]] = []

    def dataset(self, groups: int) -> Dataset:
        """`groups` slots, one per group to train on (TRL needs a prompt column to iterate)."""
        return Dataset.from_dict({"prompt": [f"stepwise group {i}" for i in range(groups)]})

    def rollout(self, prompts: list[Any], trainer: Any = None) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: one leased group per prompt slot, its trajectories in order.

        TRL hands each slot `num_generations` times in a row (its sampler repeats prompts) and wants
        one completion per entry: a group's trajectories fill its slot's run.
        """
        n = self.num_generations
        if len(prompts) % n or any(prompts[i] != prompts[i - i % n] for i in range(len(prompts))):
            raise ValueError(f"rollout: expected each prompt {n} times in a row, got {len(prompts)} prompts")
        wanted = len(prompts) // n
        groups: list[dict[str, Any]] = []
        deadline = time.monotonic() + self.wait_s
        while len(groups) < wanted:
            wait_ms = int(max(0.0, min(30.0, deadline - time.monotonic())) * 1000)
            batch = self.client.lease(
                wanted - len(groups),
                channel=self.channel,
                n_rollouts=self.num_generations,
                format="json",
                ttl_ms=self.ttl_ms,
                wait_ms=wait_ms,
            )
            if batch is None:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"only {len(groups)} of {wanted} groups were ready in time")
                continue
            self.pending.append(batch)
            assert batch.data is not None
            for group in batch.data["groups"]:
                if len(group["trajectories"]) != self.num_generations:
                    raise ValueError(
                        f"group {group['group_id']} has {len(group['trajectories'])} trajectories, not "
                        f"num_generations={self.num_generations} (a partial group)"
                    )
                groups.append(group)
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask", "stepwise_reward", "trajectory_uid")}
        for group in groups:
            for trajectory in group["trajectories"]:
                c = trajectory_completion(trajectory["steps"])
                for key in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
                    out[key].append(c[key])
                out["stepwise_reward"].append(float(trajectory.get("reward") or 0.0))
                out["trajectory_uid"].append(trajectory["trajectory_uid"])
        self.served.append(out)
        return out

    def reward(self, prompts: list[Any], completions: list[Any], stepwise_reward: list[float], **_: Any) -> list[float]:
        """The reward function to pass TRL: the trajectories' own rewards, as `rollout` returned them."""
        return list(stepwise_reward)

    def settle(self, verb: str) -> None:
        for batch in self.pending:
            if batch.state == "leased":
                batch.ack() if verb == "ack" else batch.nack()
                if verb == "ack":
                    self.acked.append(batch.lease_id)
        self.pending = []

    def callback(self) -> TrainerCallback:
        """Acks the leases behind each optimizer step; nacks what is left when training stops."""
        source = self

        class _Settle(TrainerCallback):
            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                source.settle("ack")

            def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                source.settle("nack")

        return _Settle()


__all__ = ["StepwiseRollouts", "trajectory_completion"]
