"""The trainer side of `stepwise train`: a warm-up, then lease → update → publish, one version per batch.

    python -m stepwise_client.rl --pool http://127.0.0.1:8100 --engine http://127.0.0.1:8300 \\
        --sft sft.jsonl --warmup-steps 120 --versions 20 --batch-groups 8

1. Warm-up (ClawGym's recipe before RL): `--warmup-steps` steps of SFT on the rows of a
   `stepwise export sft` file, pushed to the engines as the pool's current version.
2. RL: wait for `--batch-groups` ready groups, lease them (prefix-tree packed), take `--epochs`
   clipped policy-gradient steps, ack, push the weights to the engines and bump the pool's policy
   version with drain. `--no-update` runs the same loop without the optimizer step (a control run).
   With `--switch abort|keep` each version is saved under `--versions-dir` and the gateway switches
   the engines to it in flight (running generations continue as partial rollouts); every batch's
   behaviour log-probs are then checked against the checkpoint of the version that made each token.

Progress goes to stdout as JSON lines, one object per event (`warmup`, `ready`, `update`, `done`,
`error`), for the orchestrator; everything else (library warnings) goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .client import StepwiseClient
from .errors import StepwiseError
from .lifeline import exit_with_parent
from .models import load_policy
from .sft import examples_from_messages, read_sft_rows, sft
from .trainer import LossConfig, Trainer, batch_logprobs, save_checkpoint


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m stepwise_client.rl", description=__doc__.splitlines()[0])
    p.add_argument("--pool", required=True, help="the Stepwise server's origin")
    p.add_argument("--engine", action="append", default=[], help="a reference engine's origin (repeatable)")
    p.add_argument("--api-key", default=os.environ.get("STEPWISE_API_KEY"), help="a key with the trainer scope")
    p.add_argument("--model", default="tiny", help="a preset or a model folder (the engine must start from the same)")
    p.add_argument("--seed", type=int, default=7, help="initial weights of a preset, warm-up batches")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--sft", default=None, help="an `stepwise export sft` file (or folder) to warm up on")
    p.add_argument("--warmup-steps", type=int, default=0)
    p.add_argument("--warmup-lr", type=float, default=1e-2)
    p.add_argument("--warmup-batch", type=int, default=8)
    p.add_argument(
        "--chat-template-kwargs", default="{}", help="JSON the agent sends as chat_template_kwargs (renders the warm-up prompts alike)"
    )
    p.add_argument("--versions", type=int, required=True, help="policy versions to train (one batch each)")
    p.add_argument("--batch-groups", type=int, default=8, help="groups per leased batch")
    p.add_argument("--channel", default="train")
    p.add_argument("--max-staleness", type=int, default=None, help="lease option: older groups are dropped or flagged")
    p.add_argument("--advantage", default="grpo", choices=["grpo", "drgrpo", "rloo"])
    p.add_argument("--pack", default="prefix_tree", choices=["prefix_tree", "padded"])
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--adam-eps", type=float, default=1e-8, help="AdamW's eps: larger keeps ids with tiny gradients (most of a tied LM head) still"
    )
    p.add_argument("--clip", type=float, default=0.2, help="PPO clip range ε: the ratio is clipped to [1 - ε, 1 + ε]")
    p.add_argument("--epochs", type=int, default=1, help="optimizer steps per batch (PPO epochs)")
    p.add_argument("--no-update", action="store_true", help="lease, ack and publish, but never step the optimizer")
    p.add_argument("--wait-s", type=float, default=900.0, help="longest wait for a full batch")
    p.add_argument("--lease-ttl-s", type=int, default=900, help="time an update may take before its groups go back")
    p.add_argument("--checkpoint", default=None, help="save the final policy here (a model folder)")
    p.add_argument(
        "--switch",
        default="drain",
        choices=["drain", "abort", "keep"],
        help="how a new version reaches the engines: pushed, then the version set with drain; or saved and switched in flight by the gateway (abort: running generations cut and continued; keep: frozen)",
    )
    p.add_argument("--versions-dir", default=None, help="with --switch abort|keep: each version's weights, a model folder per version")
    p.add_argument("--save-warmup", default=None, help="save the warmed-up policy here (a model folder) before RL")
    return p.parse_args(argv)


def wait_for_groups(client: StepwiseClient, channel: str, groups: int, deadline: float, stop: threading.Event) -> bool:
    """Until `groups` groups are ready (True): a batch holds one round of the gym, not a part of one.
    False: asked to stop meanwhile."""
    while not stop.is_set():
        ready = int(client.stats(channel).get("groups", {}).get("ready", 0))
        if ready >= groups:
            return True
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready} of {groups} groups were ready in time")
        stop.wait(0.25)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    exit_with_parent()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    policy = load_policy(args.model, seed=args.seed)
    client = StepwiseClient(args.pool, api_key=args.api_key, timeout=120.0, consumer="stepwise-train")
    if args.sft and args.warmup_steps > 0:
        started = time.perf_counter()
        examples = examples_from_messages(policy, read_sft_rows(args.sft), json.loads(args.chat_template_kwargs))

        def progress(step: int, loss: float) -> None:
            if (step + 1) % 10 == 0 or step + 1 == args.warmup_steps:
                emit("warmup", step=step + 1, steps=args.warmup_steps, loss=loss)

        sft(policy, examples, steps=args.warmup_steps, lr=args.warmup_lr, batch_size=args.warmup_batch, seed=args.seed, on_step=progress)
        emit("warmup_done", examples=len(examples), seconds=time.perf_counter() - started)
        if args.save_warmup:
            save_checkpoint(policy, args.save_warmup)
    trainer = Trainer(
        policy,
        client,
        engines=args.engine,
        lr=args.lr,
        adam_eps=args.adam_eps,
        pack=args.pack == "prefix_tree",
        advantage=args.advantage,
        loss=LossConfig(clip_low=args.clip, clip_high=args.clip),
        channel=args.channel,
        epochs=args.epochs,
    )
    assert trainer.version is not None
    in_flight = args.switch != "drain"
    if in_flight and not args.versions_dir:
        raise ValueError("--switch abort|keep needs --versions-dir")
    # The warm-up is what the engines serve from the start, under the pool's current version.
    trainer.push_weights(trainer.version)
    checkpoints = VersionCheckpoints(args.versions_dir, policy) if in_flight else None
    if checkpoints:
        checkpoints.save(trainer.version)
    # SIGINT ends the run after the update in progress (`stepwise train --target-reward`, or Ctrl-C):
    # the checkpoint is still saved and `done` still emitted.
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    emit("ready", version=trainer.version)
    for _ in range(args.versions):
        waited = time.perf_counter()
        if not wait_for_groups(client, args.channel, args.batch_groups, time.monotonic() + args.wait_s, stop):
            break
        batch = trainer.lease(args.batch_groups, max_staleness=args.max_staleness, wait_ms=30_000, ttl_ms=args.lease_ttl_s * 1000)
        if batch is None:
            continue  # the ready groups went stale or elsewhere between the two calls
        lease_s = time.perf_counter() - waited
        with batch:
            inputs = trainer.inputs(batch)
            staleness = inputs.tokens.staleness
            metrics: dict[str, Any] = {"tokens": float(inputs.tokens.targets.numel())}
            if checkpoints:
                metrics.update(checkpoints.verify(inputs))
            # The trainer's log-probs against the engines' (mismatch telemetry: /v1/stats, the dashboard).
            if not args.no_update:
                metrics.update(trainer.update(batch, inputs, report_mismatch=True))
            else:
                metrics.update(trainer.report_mismatch(batch, inputs))
        rewards = [float(g.get("reward") or 0.0) for g in _trajectories(batch)]
        published = time.perf_counter()
        if checkpoints:
            trainer.version += 1
            folder = checkpoints.save(trainer.version)
            answer = client.switch_weights(trainer.version, args.switch, path=folder)
            if answer.get("failed"):
                raise StepwiseError(f"engines failed to switch to version {trainer.version}: {answer['failed']}")
        else:
            trainer.publish()
        emit(
            "update",
            version=trainer.version,
            groups=len(batch.data["groups"]) if batch.data else None,
            rows=batch.rows,
            trajectories=len(rewards),
            reward_mean=sum(rewards) / max(len(rewards), 1),
            staleness_max=int(staleness.max()) if staleness.numel() else 0,
            pack_ratio=getattr(inputs, "ratio", None),
            wait_s=lease_s,
            publish_s=time.perf_counter() - published,
            **{k: v for k, v in metrics.items() if isinstance(v, float)},
        )
    if args.checkpoint:
        save_checkpoint(policy, args.checkpoint)
    emit("done", version=trainer.version)
    return 0


class VersionCheckpoints:
    """Each version's weights as a model folder (what the engines load), and the exactness check
    of a batch's behaviour log-probs against them: every token's against the version that made it."""

    def __init__(self, folder: str, policy: Any) -> None:
        self.folder = Path(folder)
        self.policy = policy
        self.scratch: Any = None

    def path(self, version: int) -> str:
        return str(self.folder / f"v{version}")

    def save(self, version: int) -> str:
        save_checkpoint(self.policy, self.path(version))
        return self.path(version)

    @torch.no_grad()
    def verify(self, inputs: Any) -> dict[str, float]:
        tokens = inputs.tokens
        known = tokens.has_behaviour & ~tokens.off_policy
        worst, versions = 0.0, sorted({int(v) for v in tokens.versions[known].tolist()})
        for version in versions:
            if self.scratch is None:
                self.scratch = load_policy(self.path(version)).model.eval()
            else:
                self.scratch.load_state_dict(load_file(str(Path(self.path(version)) / "model.safetensors")), strict=False)
            logp = batch_logprobs(self.scratch, inputs)
            mine = known & (tokens.versions == version)
            worst = max(worst, float((logp - tokens.behaviour_logp)[mine].abs().max()) if bool(mine.any()) else 0.0)
        sequences = tokens.sequence[known]
        mixed = {int(s) for s in sequences.unique().tolist() if len(set(tokens.versions[known][sequences == s].tolist())) > 1}
        return {
            "behaviour_exact_max": worst,
            "versions_checked": float(len(versions)),
            "partial_steps": float(len(mixed)),
        }


def _trajectories(batch: Any) -> list[dict[str, Any]]:
    if batch.data is None:
        return []
    return [t for g in batch.data["groups"] for t in g["trajectories"]]


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (StepwiseError, TimeoutError, OSError, ValueError) as error:
        emit("error", message=f"{type(error).__name__}: {error}")
        sys.exit(1)
