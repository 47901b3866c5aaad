"""A tiny veRL job on disk, as a user would have one: a random Llama and a tokenizer trained with the
`tokenizers` library saved to a folder, a parquet dataset in veRL's format, a reward function in a
file, and the Hydra overrides that run veRL's GRPO on them (CPU tests, `--dry-run`, the GPU script).
Nothing is downloaded; every draw is seeded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

LETTERS = "abcdefgh"
TARGET = "a"  # the reward: the share of the response that is this letter

REWARD_SOURCE = f'''"""The tiny job's reward (veRL's custom_reward_function): the share of "{TARGET}" in the response."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    letters = solution_str.split()
    return sum(w == "{TARGET}" for w in letters) / max(len(letters), 1)
'''

CHAT_TEMPLATE = ("{% for m in messages %}{{ m['content'] }} {% endfor %}"
                 "{% if add_generation_prompt %}: {% endif %}")


@dataclass(frozen=True)
class TinyJob:
    """Where the tiny job's files are and how big it is."""

    root: Path
    seed: int = 0
    prompts: int = 8       # dataset rows
    prompt_len: int = 4    # letters per prompt
    hidden: int = 32
    layers: int = 2

    @property
    def model(self) -> Path:
        """The model and tokenizer folder (`save_pretrained`)."""
        return self.root / "model"

    @property
    def data(self) -> Path:
        """The training parquet."""
        return self.root / "train.parquet"

    @property
    def reward(self) -> Path:
        """The reward function's file."""
        return self.root / "reward.py"


def build_tokenizer():
    """A word-level tokenizer trained by the `tokenizers` library on the letters, with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"])
    tok.train_from_iterator([" ".join(LETTERS) + " :"] * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write(job: TinyJob) -> TinyJob:
    """Write the model, tokenizer, dataset and reward file under `job.root`; returns `job`."""
    import pandas as pd
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    job.root.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=job.hidden, intermediate_size=2 * job.hidden,
                         num_hidden_layers=job.layers, num_attention_heads=2, num_key_value_heads=2,
                         max_position_embeddings=64, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=False)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.seed)
        model = LlamaForCausalLM(config)
    model.save_pretrained(job.model)
    tokenizer.save_pretrained(job.model)
    rng = random.Random(job.seed)
    rows = [{"data_source": "tiny", "prompt": [{"role": "user", "content": " ".join(
                rng.choice(LETTERS) for _ in range(job.prompt_len))}],
             "reward_model": {"style": "rule", "ground_truth": TARGET}, "extra_info": {"index": i}}
            for i in range(job.prompts)]
    pd.DataFrame(rows).to_parquet(job.data)
    job.reward.write_text(REWARD_SOURCE)
    return job


def overrides(job: TinyJob, *, steps: int, batch: int = 4, n: int = 2, response_length: int = 6,
              rollout: str = "rollmux_cpu", device: str = "cpu", seed: int = 0) -> list[str]:
    """veRL Hydra overrides for GRPO on the tiny job: `steps` steps of `batch` prompts x `n` responses."""
    return [
        "algorithm.adv_estimator=grpo", "trainer.use_v1=False", f"trainer.device={device}",
        f"data.train_files={job.data}", f"data.val_files={job.data}", f"data.train_batch_size={batch}",
        f"data.max_prompt_length={job.prompt_len * 2 + 2}", f"data.max_response_length={response_length}",
        "data.shuffle=False", "data.dataloader_num_workers=0", "data.filter_overlong_prompts=False",
        f"actor_rollout_ref.model.path={job.model}", "actor_rollout_ref.model.use_remove_padding=False",
        "+actor_rollout_ref.model.override_config.attn_implementation=eager",
        "actor_rollout_ref.actor.strategy=fsdp2", "actor_rollout_ref.ref.strategy=fsdp2", "actor_rollout_ref.actor.fsdp_config.model_dtype=fp32",
        "actor_rollout_ref.actor.fsdp_config.dtype=float32", "actor_rollout_ref.actor.fsdp_config.use_torch_compile=False",
        f"actor_rollout_ref.actor.fsdp_config.seed={seed}",
        "actor_rollout_ref.actor.optim.lr=1e-2", f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2", "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0", "actor_rollout_ref.actor.use_dynamic_bsz=False",
        f"actor_rollout_ref.rollout.name={rollout}", f"actor_rollout_ref.rollout.n={n}",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=1", "actor_rollout_ref.rollout.full_determinism=True",
        f"actor_rollout_ref.rollout.seed={seed}", "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.agent.num_workers=1", "actor_rollout_ref.rollout.temperature=1.0",
        f"actor_rollout_ref.rollout.response_length={response_length}",
        f"reward.custom_reward_function.path={job.reward}", "reward.num_workers=1",
        "trainer.n_gpus_per_node=1", "trainer.nnodes=1", "trainer.logger=[console]", "trainer.val_before_train=False",
        "trainer.test_freq=-1", "trainer.save_freq=-1", f"trainer.total_training_steps={steps}",
        "trainer.total_epochs=100", "trainer.resume_mode=disable", f"trainer.default_local_dir={job.root / 'ckpt'}",
        "trainer.balance_batch=False",
    ]


def config(job: TinyJob, **kwargs):
    """veRL's `ppo_trainer` config with the tiny job's overrides (`overrides` keywords), composed by Hydra."""
    from hydra import compose, initialize_config_dir

    import verl.trainer.config as cfg_pkg

    with initialize_config_dir(config_dir=str(Path(cfg_pkg.__file__).parent), version_base=None):
        return compose(config_name="ppo_trainer", overrides=overrides(job, **kwargs))
