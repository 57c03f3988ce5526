"""A reference policy-gradient trainer over Stepwise batches (torch + transformers, the `train` extra).

    trainer = Trainer(policy, StepwiseClient(url), engines=["http://127.0.0.1:8300"])
    while ...:
        metrics = trainer.train_step(batch_size=4, n_rollouts=8)   # lease → loss → step → ack
        trainer.publish()                                          # weights to engines, then version

The loss is token-level PPO over the served response tokens with the advantages the pool computed
(`grpo | drgrpo | rloo`), decoupled from the behaviour policy:

    r_t = π_θ(y_t) / π_prox(y_t)                 clipped to [1 - ε_low, 1 + ε_high]
    w_t = min(π_prox(y_t) / μ(y_t), C)           truncated importance weight, detached
    loss = -Σ_t w_t · min(r_t A, clip(r_t) A) / normaliser

μ is the engine's `rollout_log_probs` (the behaviour policy: an older version for stale groups, the
hinted prompt for ActGuide's guided rows); π_prox is the trainer's policy before this update. Rows
without rollout log-probs (`recompute_log_probs`) take μ = π_prox, so w = 1. With one update per
lease, π_θ = π_prox at the step, so r = 1 and its gradient is the plain policy gradient. w_t is
`LossConfig`'s rollout correction (`stepwise_client.rollout_corr`: token or sequence IS, and
token, sequence or geometric rejection masks); `Trainer.report_mismatch` sends the pool how far
π_prox is from μ per step.
"""

from __future__ import annotations

import json
import time
import urllib.request
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from safetensors.torch import save as save_safetensors

from .client import Batch, StepwiseClient
from .errors import StepwiseError
from .flex_mask import tree_block_mask
from .mismatch import row_steps, step_mismatch, summarize
from .models import Policy
from .rollout_corr import Correction, RolloutIS, RolloutRS, rollout_correction, rs_bounds, rs_level
from .tensors import PackedInputs, PaddedInputs, ResponseTokens, packed_inputs, padded_inputs

LossAggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]

# Rows of the LM head computed at once: logits for 151k ids are 0.6 MB per token in fp32.
LOGIT_CHUNK = 512


def _chunk_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = head(hidden).float()
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


class _HeadLogprobs(torch.autograd.Function):
    """`_chunk_logprobs` through a bias-free linear head, its backward written out: bit for bit
    autograd's gradients, but made in place in the chunk's logits (autograd's logsumexp and gather
    backwards allocate and fill several more chunk-sized tensors). `keep`: keep the logits for
    backward instead of recomputing them from the hidden states."""

    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, keep: bool) -> torch.Tensor:
        logits = torch.nn.functional.linear(hidden, weight).float()
        lse = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.logits = logits if keep else None
        return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - lse

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        logits, ctx.logits = ctx.logits, None  # a second backward (retain_graph) recomputes them
        if logits is None:
            logits = torch.nn.functional.linear(hidden, weight).float()
        # d/dlogits (logits[target] - logsumexp) = onehot(target) - softmax, in autograd's order of operations.
        grad = logits.sub_(lse.unsqueeze(-1)).exp_().mul_((-grad_out).unsqueeze(-1))
        grad = grad.scatter_add_(-1, targets.unsqueeze(-1), grad_out.unsqueeze(-1)).to(hidden.dtype)
        grad_hidden = grad.mm(weight) if ctx.needs_input_grad[0] else None
        grad_weight = grad.t().mm(hidden) if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight, None, None


def target_logprobs(head: torch.nn.Module, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log p(target) for each hidden state, in chunks recomputed on backward (never N×V logits at once).

    Recomputing saves memory only across chunks (one chunk's logits exist at once either way), so a
    batch of one chunk keeps them: a fourth pass over the LM head less (every warm-up step). A head
    that is not a bias-free `nn.Linear` goes through autograd (checkpointed when in several chunks).
    """
    grad = torch.is_grad_enabled() and (hidden.requires_grad or any(p.requires_grad for p in head.parameters()))
    linear = isinstance(head, torch.nn.Linear) and head.bias is None
    keep = hidden.shape[0] <= LOGIT_CHUNK
    out = []
    for start in range(0, hidden.shape[0], LOGIT_CHUNK):
        h, y = hidden[start : start + LOGIT_CHUNK], targets[start : start + LOGIT_CHUNK]
        if grad and linear:
            out.append(_HeadLogprobs.apply(h, head.weight, y, keep))
        elif grad and h.requires_grad and not keep:
            out.append(torch.utils.checkpoint.checkpoint(_chunk_logprobs, head, h, y, use_reentrant=False))
        else:
            out.append(_chunk_logprobs(head, h, y))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


def backbone_and_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.nn.Module]:
    backbone = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if backbone is None or head is None:
        raise TypeError("the model must be a causal LM with .model (the transformer) and .lm_head")
    return backbone, head


def padded_logprobs(model: torch.nn.Module, inputs: PaddedInputs) -> torch.Tensor:
    """(N,) log-probs of the response tokens, in `inputs.tokens` order, from one padded forward."""
    backbone, head = backbone_and_head(model)
    device = next(model.parameters()).device
    hidden = backbone(
        input_ids=inputs.input_ids.to(device),
        attention_mask=inputs.attention_mask.to(device),
        position_ids=inputs.position_ids.to(device),
        use_cache=False,
    ).last_hidden_state
    P = inputs.prompt_width
    rows = inputs.response_mask.nonzero(as_tuple=False).to(device)
    # The output at position P + k - 1 predicts response token k.
    h = hidden[rows[:, 0], P + rows[:, 1] - 1]
    return target_logprobs(head, h, inputs.tokens.targets.to(device))


def tree_mask(inputs: PackedInputs, device: torch.device | str = "cpu", start: int = 0, end: int | None = None) -> torch.Tensor:
    """The dense (1, 1, T, T) boolean tree mask of tokens [start, end): j sees i iff i is j or an ancestor."""
    node = inputs.node_of[start:end].to(device)
    idx = torch.arange(node.numel(), device=device)
    ancestor = inputs.node_ancestor.to(device)[node.unsqueeze(1), node.unsqueeze(0)]
    same = node.unsqueeze(1) == node.unsqueeze(0)
    allowed = ancestor & (~same | (idx.unsqueeze(0) <= idx.unsqueeze(1)))
    return allowed.unsqueeze(0).unsqueeze(0)


def flex_block_mask(inputs: PackedInputs, device: torch.device | str = "cpu") -> Any:
    """The same mask as a FlexAttention BlockMask, built blockwise from the packing's node intervals:
    its memory grows with the blocks, never with T² (`flex_mask.tree_block_mask`)."""
    return tree_block_mask(inputs, device)


def packed_logprobs(model: torch.nn.Module, inputs: PackedInputs, *, attention: str | None = None) -> torch.Tensor:
    """(N,) log-probs of the response tokens from forwards over the packed tree.

    FlexAttention takes the whole batch in one pass (its block mask skips what no token sees). A
    dense mask is T×T, so there each group is its own forward: no attention crosses groups, and the
    mask shrinks by the number of groups squared.
    """
    backbone, head = backbone_and_head(model)
    device = next(model.parameters()).device
    impl = attention or model.config._attn_implementation
    dtype = next(model.parameters()).dtype

    def forward(start: int, end: int, mask: Any) -> torch.Tensor:
        return backbone(
            input_ids=inputs.input_ids[start:end].unsqueeze(0).to(device),
            position_ids=inputs.position_ids[start:end].unsqueeze(0).to(device),
            attention_mask=mask,
            use_cache=False,
        ).last_hidden_state[0]

    if impl == "flex_attention":
        hidden = forward(0, inputs.input_ids.numel(), flex_block_mask(inputs, device))
    else:
        bounds = inputs.group_bounds or [0, inputs.input_ids.numel()]
        parts = []
        for start, end in zip(bounds, bounds[1:]):
            if end == start:
                continue
            mask = tree_mask(inputs, device, start, end)
            if impl == "eager":
                mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, torch.finfo(dtype).min)
            parts.append(forward(start, end, mask))
        hidden = torch.cat(parts) if parts else torch.zeros((0, model.config.hidden_size), dtype=dtype, device=device)
    h = hidden[inputs.predictor.to(device)]
    return target_logprobs(head, h, inputs.tokens.targets.to(device))


@dataclass(frozen=True)
class LossConfig:
    clip_low: float = 0.2
    clip_high: float = 0.2
    #: Dual-clip bound c for negative advantages (verl's `clip_ratio_c`); None turns it off.
    dual_clip: float | None = 3.0
    #: C in w = min(π_prox / μ, C): bounds the weight of stale tokens (`rollout_is_threshold`, when
    #: that is left at None).
    is_cap: float = 2.0
    aggregation: LossAggregation = "token-mean"
    #: Dr.GRPO's constant normaliser for `seq-mean-token-sum-norm` (tokens per sequence).
    norm_length: int = 1024
    #: Rollout correction with verl's names (`stepwise_client.rollout_corr`): the importance weight
    #: per `token` (truncated IS, the default) or per `sequence`, or none.
    rollout_is: RolloutIS | None = "token"
    #: The IS weight's upper bound; None: `is_cap`.
    rollout_is_threshold: float | None = None
    #: Rejection mask: `token` (IcePop; `icepop`), `sequence` (MIS) or `geometric`; None: no mask.
    rollout_rs: RolloutRS | None = None
    #: The mask keeps ratios in [rollout_rs_threshold_lower, rollout_rs_threshold]; lower defaults to 1 / upper.
    rollout_rs_threshold: float | None = None
    rollout_rs_threshold_lower: float | None = None

    def __post_init__(self) -> None:
        if self.rollout_is not in ("token", "sequence", None):
            raise ValueError(f"rollout_is must be 'token', 'sequence' or None, got {self.rollout_is!r}")
        if self.rollout_rs is not None:
            rs_level(self.rollout_rs)
            rs_bounds(self.rollout_rs_threshold, self.rollout_rs_threshold_lower)


def rollout_correction_of(prox_logp: torch.Tensor, tokens: ResponseTokens, config: LossConfig) -> Correction:
    """The weights and mask `config` puts on the batch's tokens, from π_prox and the served μ.

    Rows without rollout log-probs take μ = π_prox (ratio 1); guided rows are exempt (weight 1, kept).
    """
    device = prox_logp.device
    prox = prox_logp.detach()
    has = tokens.has_behaviour.to(device)
    behaviour = torch.where(has, tokens.behaviour_logp.to(device), prox)
    return rollout_correction(
        prox,
        behaviour,
        tokens.off_policy.to(device) & has,
        tokens.sequence,
        tokens.rows,
        rollout_is=config.rollout_is,
        rollout_is_threshold=config.is_cap if config.rollout_is_threshold is None else config.rollout_is_threshold,
        rollout_rs=config.rollout_rs,
        rollout_rs_threshold=config.rollout_rs_threshold,
        rollout_rs_threshold_lower=config.rollout_rs_threshold_lower,
    )


def policy_loss(
    logp: torch.Tensor, prox_logp: torch.Tensor, tokens: ResponseTokens, config: LossConfig = LossConfig()
) -> tuple[torch.Tensor, dict[str, float]]:
    """The decoupled, clipped token-level policy-gradient loss over a batch's response tokens.

    Guided rows (ActGuide-RL, `off_policy` with rollout log-probs) follow the paper's objective
    instead: the ratio π_θ(y | hint-free prompt) / μ(y | hinted prompt), PPO-clipped, weight 1.
    Tokens the rollout correction masks leave the loss and its token counts.
    """
    device = logp.device
    prox = prox_logp.detach().to(device)
    has = tokens.has_behaviour.to(device)
    behaviour = torch.where(has, tokens.behaviour_logp.to(device), prox)
    guided = tokens.off_policy.to(device) & has
    adv = tokens.advantages.to(device)
    anchor = torch.where(guided, behaviour, prox)
    ratio = torch.exp((logp - anchor).clamp(-20.0, 20.0))
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high)
    per_token = torch.maximum(-adv * ratio, -adv * clipped)
    if config.dual_clip is not None:
        per_token = torch.where(adv < 0, torch.minimum(per_token, -adv * config.dual_clip), per_token)
    correction = rollout_correction_of(prox, tokens, config)
    keep = correction.mask
    per_token = torch.where(keep, per_token * correction.weights, torch.zeros_like(per_token))
    seq = tokens.sequence.to(device)
    n_seq = max(tokens.rows, 1)
    if config.aggregation == "token-mean":
        loss = per_token.sum() / max(int(keep.sum()), 1)
    else:
        sums = torch.zeros(n_seq, device=device, dtype=per_token.dtype).index_add(0, seq, per_token)
        if config.aggregation == "seq-mean-token-mean":
            counts = torch.zeros(n_seq, device=device).index_add(0, seq, keep.float())
            loss = (sums / counts.clamp(min=1)).sum() / max(int((counts > 0).sum()), 1)
        else:
            loss = sums.sum() / (n_seq * config.norm_length)
    with torch.no_grad():
        n = max(per_token.numel(), 1)
        stats = {
            "tokens": float(per_token.numel()),
            "clip_fraction": float(((ratio - clipped).abs() > 0).float().sum()) / n,
            **correction.stats,
            "behaviour_abs_diff_max": float((prox - behaviour)[~guided].abs().max()) if bool((~guided).any()) else 0.0,
            "guided_tokens": float(guided.sum()),
        }
    return loss, stats


def batch_logprobs(model: torch.nn.Module, inputs: PaddedInputs | PackedInputs) -> torch.Tensor:
    return packed_logprobs(model, inputs) if isinstance(inputs, PackedInputs) else padded_logprobs(model, inputs)


@dataclass
class Trainer:
    """Lease → tensors → loss → optimizer step → ack, and weights out to the engines."""

    policy: Policy
    client: StepwiseClient
    engines: list[str] = field(default_factory=list)
    lr: float = 1e-4
    #: AdamW's eps. Adam scales each weight's step to about `lr` whatever its gradient, so with the
    #: default 1e-8 every row of a tied 151k-id LM head moves a full step on the softmax's ~1e-7
    #: gradients; a tiny model at a high rate loses what it knew. 1e-5 leaves those rows nearly still.
    adam_eps: float = 1e-8
    pack: bool = True
    advantage: str = "grpo"
    loss: LossConfig = field(default_factory=LossConfig)
    channel: str = "train"
    max_grad_norm: float = 1.0
    #: Optimizer steps per leased batch (PPO epochs). The first is on-policy (r = 1); later ones are
    #: clipped against π_prox, the weights the batch was leased under.
    epochs: int = 1
    #: The policy version this trainer's weights are; None: the pool's current one.
    version: int | None = None
    optimizer: torch.optim.Optimizer | None = None

    def __post_init__(self) -> None:
        if self.version is None:
            self.version = self.client.policy_version()
        if self.optimizer is None:
            self.optimizer = torch.optim.AdamW(self.policy.model.parameters(), lr=self.lr, eps=self.adam_eps, weight_decay=0.0)

    def lease(self, batch_size: int, **options: Any) -> Batch | None:
        if self.pack:
            return self.client.lease(batch_size, channel=self.channel, format="json", pack="prefix_tree", advantage=self.advantage, **options)
        return self.client.lease(batch_size, channel=self.channel, format="padded", advantage=self.advantage, **options)

    def inputs(self, batch: Batch) -> PaddedInputs | PackedInputs:
        return packed_inputs(batch) if batch.format == "json" else padded_inputs(batch)

    def update(
        self, batch: Batch, inputs: PaddedInputs | PackedInputs | None = None, *, report_mismatch: bool = False
    ) -> dict[str, float]:
        """`epochs` optimizer steps on a leased batch (its tensors, when already built); the caller settles it.

        `report_mismatch`: right after the first (proximal) pass, before any step, post the batch's
        mismatch to the pool (`report_mismatch`); its summary joins the metrics.
        """
        model = self.policy.model
        inputs = inputs if inputs is not None else self.inputs(batch)
        if inputs.tokens.targets.numel() == 0:
            return {"tokens": 0.0}
        model.train()
        started = time.perf_counter()
        assert self.optimizer is not None
        prox: torch.Tensor | None = None
        reported: dict[str, float] = {}
        for _ in range(max(1, self.epochs)):
            logp = batch_logprobs(model, inputs)
            if prox is None:
                prox = logp.detach()
                if report_mismatch:
                    reported = self.report_mismatch(batch, inputs, prox)
            loss, stats = policy_loss(logp, prox, inputs.tokens, self.loss)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.max_grad_norm)
            if not torch.isfinite(grad_norm):
                self.optimizer.zero_grad(set_to_none=True)
                model.eval()
                raise FloatingPointError(f"non-finite gradient norm {float(grad_norm)}: batch {batch.lease_id} is nacked")
            self.optimizer.step()
        model.eval()
        return {
            **stats,
            **reported,
            "loss": loss.item(),
            "grad_norm": float(grad_norm),
            "update_s": time.perf_counter() - started,
        }

    def mismatch(
        self, batch: Batch, inputs: PaddedInputs | PackedInputs, prox_logp: torch.Tensor
    ) -> list[dict[str, Any]]:
        """Each step's mismatch between the served behaviour log-probs and `prox_logp` (this trainer's
        log-probs of `inputs.tokens` before the update), with the fraction of its tokens that this
        trainer's rollout correction (`loss`) masks: `StepwiseClient.report_mismatch`'s steps."""
        correction = rollout_correction_of(prox_logp, inputs.tokens, self.loss)
        return step_mismatch(inputs.tokens, prox_logp, row_steps(batch), masked=~correction.mask)

    def report_mismatch(
        self, batch: Batch, inputs: PaddedInputs | PackedInputs, prox_logp: torch.Tensor | None = None
    ) -> dict[str, float]:
        """Posts the batch's mismatch to the pool and returns its summary (`mismatch_k3`, ...).

        `prox_logp`: the proximal pass's log-probs; None runs one (no gradients). Telemetry never
        fails an update: an error of the post is warned about and `mismatch_reported` is 0.
        """
        if prox_logp is None:
            with torch.no_grad():
                prox_logp = batch_logprobs(self.policy.model, inputs)
        steps = self.mismatch(batch, inputs, prox_logp)
        summary = summarize(steps)
        try:
            if steps:
                self.client.report_mismatch(batch.lease_id, steps)
        except StepwiseError as error:
            warnings.warn(f"mismatch of lease {batch.lease_id} not reported: {error}", stacklevel=2)
            return {**summary, "mismatch_reported": 0.0}
        return {**summary, "mismatch_reported": 1.0}

    def train_step(self, batch_size: int, *, report_mismatch: bool = False, **lease_options: Any) -> dict[str, Any] | None:
        """Leases, updates and acks (nacks when the update raises); None when nothing was ready.
        `report_mismatch`: as `update`'s."""
        batch = self.lease(batch_size, **lease_options)
        if batch is None:
            return None
        with batch:
            metrics = self.update(batch, report_mismatch=report_mismatch)
        rewards = _trajectory_rewards(batch)
        return {**metrics, "lease_id": batch.lease_id, "rows": batch.rows, "rewards": rewards}

    def push_weights(self, version: int) -> None:
        """Sends the policy's weights to every engine (`/update_weights_from_tensor`, safetensors)."""
        state = {k: v.detach().to("cpu").contiguous() for k, v in self.policy.model.state_dict().items()}
        if getattr(self.policy.model.config, "tie_word_embeddings", False):
            state.pop("lm_head.weight", None)  # shared with the embedding: sent once
        body = save_safetensors(state)
        for url in self.engines:
            request = urllib.request.Request(
                f"{url.rstrip('/')}/update_weights_from_tensor?version={version}",
                data=body,
                method="POST",
                headers={"content-type": "application/octet-stream"},
            )
            with urllib.request.urlopen(request, timeout=600) as answer:
                json.load(answer)

    def publish(self, drain: bool = True) -> dict[str, Any]:
        """Weights to the engines first, then the pool's version (with drain).

        In between, a generation may start on the new weights while the old version is in force: its
        steps look one version staler than they are, never fresher, so `max_staleness` stays a bound.
        """
        assert self.version is not None
        self.version += 1
        self.push_weights(self.version)
        return self.client.set_policy_version(self.version, drain=drain)


def _trajectory_rewards(batch: Batch) -> list[float]:
    if batch.data is not None:
        return [float(t.get("reward") or 0.0) for g in batch.data["groups"] for t in g["trajectories"]]
    if batch.arrays:
        index = batch["trajectory_index"].tolist()
        rewards = batch["trajectory_rewards"].tolist()
        seen: dict[int, float] = {}
        for i, r in zip(index, rewards):
            seen.setdefault(i, float(r))
        return list(seen.values())
    return []


def save_checkpoint(policy: Policy, folder: str) -> None:
    """A model folder the reference engine (`--model DIR`) and vLLM load: weights, config, tokenizer."""
    policy.model.save_pretrained(folder, safe_serialization=True)
    policy.tokenizer.save_pretrained(folder)


__all__ = [
    "Correction",
    "LossConfig",
    "Trainer",
    "batch_logprobs",
    "packed_logprobs",
    "padded_logprobs",
    "policy_loss",
    "rollout_correction_of",
    "save_checkpoint",
    "target_logprobs",
    "tree_mask",
]

