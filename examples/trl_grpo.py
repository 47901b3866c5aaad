"""A TRL GRPO job as a user writes it, with RollMux's drop-in trainer (CPU only, seconds).

It builds its own model the way a user brings one: a tokenizer trained here with the `tokenizers`
library and a tiny random Qwen2, both saved with `save_pretrained` to a local folder and loaded
from there by path. Its dataset is prompts of random letters, its reward the share of the letter
"a" in a completion, and it trains with TRL's GRPO. The one RollMux line is the import below:
with `from trl import GRPOTrainer` instead, the same script trains with TRL alone.

    rollmux run examples/trl_grpo.yaml --local -- python examples/trl_grpo.py --out trained/

Under `rollmux run` the trainer reads the service's address, the job id and its token file from
the environment and runs TRL's loop in RollMux's phases (docs/adapters.md); outside it, it is TRL.
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig

from rollmux.adapters.trl import GRPOTrainer  # outside RollMux: from trl import GRPOTrainer

LETTERS = "abcdefghij"
SPECIALS = ["<pad>", "<eos>", "<unk>"]


def letter_text(rng: random.Random, n: int, length: int) -> list[str]:
    """`n` lines of `length` space-separated random letters."""
    return [" ".join(rng.choice(LETTERS) for _ in range(length)) for _ in range(n)]


def save_tiny_model(folder: Path, seed: int = 0) -> Path:
    """Train a tokenizer on letter text and build a tiny random Qwen2 for it; save both to `folder`."""
    rng = random.Random(seed)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(letter_text(rng, 200, 8), trainers.WordLevelTrainer(special_tokens=SPECIALS))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                         bos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def share_of_a(completions: list[str], **kwargs) -> list[float]:
    """The reward: the share of a completion's letters that are "a"."""
    letters = [c.replace(" ", "") for c in completions]
    return [s.count("a") / max(len(s), 1) for s in letters]


def prompts(seed: int) -> Dataset:
    """The dataset: 64 prompts of four random letters."""
    return Dataset.from_dict({"prompt": letter_text(random.Random(seed), 64, 4)})


def grpo_config(output_dir: Path, steps: int, seed: int, **changes) -> GRPOConfig:
    """GRPO on CPU: 4 prompts of 4 completions per step, 6 tokens each, no checkpoints, no reports."""
    settings = dict(output_dir=str(output_dir), max_steps=steps, seed=seed, use_cpu=True,
                    per_device_train_batch_size=16, num_generations=4, max_completion_length=6, learning_rate=1e-2,
                    logging_steps=1, save_strategy="no", report_to="none", disable_tqdm=True)
    return GRPOConfig(**{**settings, **changes})


def main(argv: list[str] | None = None) -> int:
    """Build the model folder, then train on it with GRPO and save the trained model to --out."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--out", type=Path, default=Path("trl-grpo-out"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)  # a tiny model runs fastest on one thread; a fixed count keeps runs bit-comparable
    with tempfile.TemporaryDirectory(prefix="trl-grpo-") as tmp:
        model_dir = save_tiny_model(Path(tmp) / "model", args.seed)
        trainer = GRPOTrainer(model=str(model_dir), reward_funcs=share_of_a,
                              args=grpo_config(Path(tmp) / "run", args.steps, args.seed),
                              train_dataset=prompts(args.seed),
                              processing_class=AutoTokenizer.from_pretrained(model_dir))
        trainer.train()
        trainer.save_model(str(args.out))
    rewards = [round(h["reward"], 3) for h in trainer.state.log_history if "reward" in h]
    print(f"trl-grpo: {args.steps} steps, seed {args.seed}, rewards {rewards}; saved to {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
