"""Supervised warm-up: next-token loss on response tokens only (ClawGym's recipe before RL).

Examples are (prompt ids, response ids) pairs, e.g. the chat rows of `stepwise export sft` rendered
with the model's chat template (`examples_from_messages`).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from .models import Policy
from .trainer import backbone_and_head, target_logprobs

Example = tuple[list[int], list[int]]


def examples_from_messages(
    policy: Policy, rows: Sequence[dict[str, Any]], chat_template_kwargs: dict[str, Any] | None = None
) -> list[Example]:
    """Each assistant turn of each conversation becomes one example: its prompt is everything before.

    `rows` are `{"messages": [...], "tools": [...]}` objects (the `sft` export's chat rows). The
    assistant turn is rendered exactly as the template renders history, and ends with `<|im_end|>`,
    so the model learns to stop. Pass the `chat_template_kwargs` the agent sends (e.g.
    `{"enable_thinking": False}`) so the prompts are the ones the engine will see.
    """
    kwargs = chat_template_kwargs or {}
    tok = policy.tokenizer
    out: list[Example] = []
    for row in rows:
        # A tool-call turn's content may be null; the template wants text (vLLM renders it empty too).
        messages = [{**m, "content": m.get("content") or ""} for m in row["messages"]]
        tools = row.get("tools") or None
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            prompt_text = tok.apply_chat_template(messages[:i], tools=tools, add_generation_prompt=True, tokenize=False, **kwargs)
            full_text = tok.apply_chat_template(messages[: i + 1], tools=tools, tokenize=False, **kwargs)
            if not full_text.startswith(prompt_text):
                raise ValueError(f"conversation {len(out)}: the template renders turn {i} differently in history")
            response_text = full_text[len(prompt_text) :]
            # The template closes the turn with "<|im_end|>\n"; the model generates up to <|im_end|>.
            end = response_text.rfind("<|im_end|>")
            response_text = response_text[: end + len("<|im_end|>")] if end >= 0 else response_text
            out.append(
                (tok.encode(prompt_text, add_special_tokens=False), tok.encode(response_text, add_special_tokens=False))
            )
    return out


def read_sft_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of an `sft` export (`.jsonl`), or of a folder holding one."""
    path = Path(path)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if not files:
            raise FileNotFoundError(f"no .jsonl file in {path}")
        path = files[0]
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sft(
    policy: Policy,
    examples: Sequence[Example],
    *,
    steps: int,
    lr: float = 3e-3,
    batch_size: int = 8,
    seed: int = 0,
    schedule: str = "cosine",
    on_step: Callable[[int, float], None] | None = None,
) -> list[float]:
    """`steps` AdamW steps of response-token cross-entropy on random mini-batches; the losses.

    `schedule` "cosine" decays the rate from `lr` to 0 over the steps: at a constant high rate the
    loss of a tiny model spikes late and the protocol it learned breaks down again.
    """
    if schedule not in ("cosine", "constant"):
        raise ValueError(f"schedule: must be 'cosine' or 'constant', not {schedule!r}")
    if not examples:
        raise ValueError("sft: no examples")
    model = policy.model
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rate = (lambda step: 0.5 * (1 + math.cos(math.pi * step / steps))) if schedule == "cosine" else (lambda step: 1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, rate)
    rng = random.Random(seed)
    pad = policy.tokenizer.pad_token_id or 0
    losses = []
    backbone, head = backbone_and_head(model)
    model.train()
    for step in range(steps):
        chosen = [examples[rng.randrange(len(examples))] for _ in range(batch_size)]
        width = max(len(p) + len(r) for p, r in chosen)
        ids = torch.full((len(chosen), width), pad, dtype=torch.long)
        mask = torch.zeros((len(chosen), width), dtype=torch.long)
        rows, cols, targets = [], [], []
        for b, (p, r) in enumerate(chosen):
            seq = p + r
            ids[b, : len(seq)] = torch.tensor(seq)
            mask[b, : len(seq)] = 1
            rows += [b] * len(r)
            cols += range(len(p) - 1, len(seq) - 1)  # the output before each response token predicts it
            targets += r
        hidden = backbone(input_ids=ids.to(device), attention_mask=mask.to(device), use_cache=False).last_hidden_state
        h = hidden[torch.tensor(rows, device=device), torch.tensor(cols, device=device)]
        # Only response positions reach the LM head: 151k-wide logits for every prompt token would dominate.
        loss = -target_logprobs(head, h, torch.tensor(targets, device=device)).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    model.eval()
    return losses
