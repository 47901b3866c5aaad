"""The TRL adapter's tiny job: its config, a random Qwen2 built in-process, a letter tokenizer,
seeded prompts and a reward that moves (nothing is downloaded)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Callable

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

LETTERS = "abcdefghij"            # the prompts' alphabet
SPECIALS = ("<pad>", "<eos>", "<unk>")
TARGET = "a"                       # the reward counts this letter in a completion


@dataclass(frozen=True)
class TRLJobConfig:
    """A tiny GRPO job: the model, the batch, the generator slots."""

    seed: int = 0
    prompts_per_step: int = 4        # distinct prompts per step, each one generation unit
    dataset_size: int = 64           # prompts (fixed, so step k's batch does not depend on the run's length)
    num_generations: int = 8         # completions per prompt (GRPO's group)
    prompt_len: int = 4
    max_completion_length: int = 6
    hidden_size: int = 32
    layers: int = 2
    heads: int = 2
    lr: float = 1e-2
    slots: int = 2                   # generator copies, one per rollout worker slot
    threads: int = 1                 # intra-op threads everywhere (bit-identity needs a fixed count)

    def __post_init__(self) -> None:
        for name in ("prompts_per_step", "dataset_size", "prompt_len", "max_completion_length", "hidden_size", "layers",
                     "heads", "slots", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"TRLJobConfig.{name} must be >= 1, not {getattr(self, name)!r}")
        if self.num_generations < 2:
            raise ValueError(f"TRLJobConfig.num_generations must be >= 2 (GRPO compares a group), "
                             f"not {self.num_generations!r}")



def build_tokenizer() -> PreTrainedTokenizerFast:
    """A word-level tokenizer over single letters (prompts are space-separated letters)."""
    vocab = {t: i for i, t in enumerate((*SPECIALS, *LETTERS))}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")


def build_model(cfg: TRLJobConfig, tokenizer: PreTrainedTokenizerFast) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 of `cfg`'s size, drawn from `cfg.seed` (the global RNG is left as it was)."""
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=cfg.hidden_size,
                         intermediate_size=2 * cfg.hidden_size, num_hidden_layers=cfg.layers,
                         num_attention_heads=cfg.heads, num_key_value_heads=cfg.heads,
                         max_position_embeddings=cfg.prompt_len + cfg.max_completion_length + 8,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None, tie_word_embeddings=False)
    config._attn_implementation = "eager"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)
        return Qwen2ForCausalLM(config)


def build_dataset(cfg: TRLJobConfig, n: int) -> Dataset:
    """`n` prompts of `cfg.prompt_len` random letters, drawn from `cfg.seed`."""
    rng = random.Random(cfg.seed)
    return Dataset.from_dict({"prompt": [" ".join(rng.choice(LETTERS) for _ in range(cfg.prompt_len))
                                         for _ in range(n)]})


def target_reward(target_id: int, length: int) -> Callable[..., list[float]]:
    """TRL reward function: the share of a completion's `length` token budget that is `target_id`."""
    def target_reward(completions: list, completion_ids: list[list[int]], **_: Any) -> list[float]:
        return [sum(t == target_id for t in ids) / length for ids in completion_ids]
    return target_reward

