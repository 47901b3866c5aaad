"""GPU check of the drop-in TRL trainer with vLLM: warm switch times against the model's bytes.

A tiny random Qwen2 (its tokenizer trained here with `tokenizers`) is saved to a temporary folder
and loaded by path; `rollmux.adapters.trl.GRPOTrainer` trains it for a few GRPO steps with TRL's
colocated vLLM engine (`use_vllm=True, vllm_mode="colocate", vllm_enable_sleep_mode=True`), under a
local permit client (`rollmux.shim.LocalPermitClient` on a one-member group controller), so every
phase runs its hooks as under `rollmux serve`:

- train onload/offload: the trainer's model and AdamW state, host (pinned) to device and back;
- rollout onload: `llm.wake_up()` then the weight push from the trainer's host copies into vLLM;
- rollout offload: `llm.sleep(level=2)`.

It prints one JSON object: the parameter and optimizer bytes, each warm switch's median seconds
(iterations after the first; the first train onload has no optimizer state yet) and the implied
host-to-device bandwidth, every measured value, and the versions. Needs a CUDA GPU and vLLM
(benchmarks/gpu/README.md). Run from the repository root:

    python benchmarks/gpu/trl_vllm.py [--steps 6] [--hidden 1024] [--layers 8]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import threading
from pathlib import Path

import torch
from datasets import Dataset
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig

from rollmux.adapters.trl import GRPOTrainer
from rollmux.core.config import SchedulerConfig
from rollmux.core.env import WallClockEnvironment
from rollmux.core.group import isolated_group
from rollmux.core.group_controller import GroupController
from rollmux.core.spec import JobSpec, default_cluster
from rollmux.shim import LocalPermitClient

WORDS = [a + b for a in "abcdefghij" for b in "klmnopqrst"]  # 100 two-letter words


def save_model(folder: Path, hidden: int, layers: int, seed: int = 0) -> Path:
    """A word-level tokenizer trained on random word text and a random bf16 Qwen2 (head size 64)."""
    rng = random.Random(seed)
    text = [" ".join(rng.choice(WORDS) for _ in range(16)) for _ in range(2000)]
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.train_from_iterator(text, trainers.WordLevelTrainer(special_tokens=["<pad>", "<eos>", "<unk>"]))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64, num_key_value_heads=hidden // 64,
                         max_position_embeddings=256, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(seed)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def local_client(job_id: str) -> tuple[WallClockEnvironment, LocalPermitClient]:
    """A running one-member group controller (no switch cost of its own) and a permit client on it."""
    spec = JobSpec(job_id=job_id, arrival_s=0.0, duration_s=1.0, slo=2.0, rollout_gpus=1, train_gpus=1,
                   rollout_s={"median": 1.0, "sigma": 0.0, "max": 1.0}, train_s=1.0, sync_s=0.0,
                   host_gb={"rollout": 0.0, "train": 0.0})
    cluster = default_cluster().model_copy(update={"warm_switch_s": 0.0})
    env = WallClockEnvironment()
    ctl = GroupController(env, isolated_group(0, spec, cluster), SchedulerConfig().intra_for(cluster))
    threading.Thread(target=env.serve, daemon=True).start()
    return env, LocalPermitClient(env, {job_id: ctl})


def reward(completions: list[str], **kwargs) -> list[float]:
    """The share of a completion's words that start with "a"."""
    return [sum(w.startswith("a") for w in c.split()) / max(len(c.split()), 1) for c in completions]


def _median(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def report(trainer: GRPOTrainer) -> dict:
    """What the run measured: bytes, each warm switch (from the second iteration) and every value."""
    side = trainer.rollmux
    params = sum(p.nbytes for p in trainer.model.parameters())
    history = side.shim.history
    by_phase = {ph: [h for h in history if h.phase == ph] for ph in ("rollout", "train")}
    train_on = [h.onload_s for h in by_phase["train"]]
    optim = max(h.host_bytes["train"] for h in by_phase["train"]) - params
    warm = {"train_onload_s": _median(train_on[1:]), "train_offload_s": _median([h.offload_s for h in
                                                                                   by_phase["train"]][1:]),
            "rollout_onload_s": _median([h.onload_s for h in by_phase["rollout"]][1:]),
            "rollout_offload_s": _median([h.offload_s for h in by_phase["rollout"]][1:]),
            **{f"{k}_s": _median(v[1:]) for k, v in side.timings.items()}}
    moved = params + optim
    return {"device": torch.cuda.get_device_name(), "param_bytes": params, "optimizer_bytes": optim,
            "warm_median": warm,
            "train_onload_GBps": moved / warm["train_onload_s"] / 1e9 if warm["train_onload_s"] else None,
            "vllm_push_GBps": params / warm["vllm_push_s"] / 1e9 if warm.get("vllm_push_s") else None,
            "every": {"train_onload_s": train_on, "train_offload_s": [h.offload_s for h in by_phase["train"]],
                      "rollout_onload_s": [h.onload_s for h in by_phase["rollout"]],
                      "rollout_offload_s": [h.offload_s for h in by_phase["rollout"]], **side.timings},
            "rewards": [h["reward"] for h in trainer.state.log_history if "reward" in h],
            "versions": {"torch": torch.__version__, "vllm": __import__("vllm").__version__,
                         "trl": __import__("trl").__version__}}


def main() -> int:
    """Build the model, train it under the adapter with vLLM colocated, print what was measured."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=1024, help="hidden size (a multiple of 64)")
    ap.add_argument("--layers", type=int, default=8)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/gpu/trl_vllm.py: needs a CUDA GPU")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    env, client = local_client("trl-vllm")
    with tempfile.TemporaryDirectory(prefix="rollmux-trl-vllm-") as tmp:
        model_dir = save_model(Path(tmp) / "model", args.hidden, args.layers)
        rng = random.Random(1)
        data = Dataset.from_dict({"prompt": [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(256)]})
        config = GRPOConfig(
            output_dir=str(Path(tmp) / "run"), max_steps=args.steps, seed=0, bf16=True, learning_rate=1e-5,
            per_device_train_batch_size=16, num_generations=4, max_completion_length=32, logging_steps=1,
            save_strategy="no", report_to="none", disable_tqdm=True, use_vllm=True, vllm_mode="colocate",
            vllm_enable_sleep_mode=True, vllm_gpu_memory_utilization=0.3, vllm_max_model_length=128)
        trainer = GRPOTrainer(model=str(model_dir), reward_funcs=reward, args=config, train_dataset=data,
                              processing_class=AutoTokenizer.from_pretrained(model_dir),
                              rollmux_job_id="trl-vllm", rollmux_client=client)
        trainer.train()
        print(json.dumps(report(trainer), indent=2))
    env.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
