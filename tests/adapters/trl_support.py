"""What the TRL adapter's tests share: examples/trl_grpo.py (its model folder, data, reward and config),
a trainer built from it, and a permit client that grants at once."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from factories import GrantAtOnce
from transformers import AutoTokenizer

from rollmux.adapters.trl import GRPOTrainer
from rollmux.core.group_controller import Grant

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_PATH = ROOT / "examples" / "trl_grpo.py"
ITERATIONS = 4


def load_example():
    """examples/trl_grpo.py as a module."""
    spec = importlib.util.spec_from_file_location("trl_grpo_example", EXAMPLE_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


EXAMPLE = load_example()


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The example's model and tokenizer, saved once."""
    return EXAMPLE.save_tiny_model(tmp_path_factory.mktemp("trl") / "model", seed=0)


def trainer(folder: Path, cls=GRPOTrainer, steps: int = ITERATIONS, seed: int = 0, callbacks=(),
            config: dict | None = None, **rollmux):
    """The example's trainer on `folder` (`config`: GRPOConfig changes; `rollmux`: the adapter's keywords)."""
    torch.set_num_threads(1)
    return cls(model=str(folder), reward_funcs=EXAMPLE.share_of_a,
               args=EXAMPLE.grpo_config(folder.parent / "run", steps, seed, **(config or {})),
               train_dataset=EXAMPLE.prompts(seed), processing_class=AutoTokenizer.from_pretrained(folder),
               callbacks=list(callbacks), **rollmux)


def weights(t) -> dict:
    """A trainer's model's weights, copied."""
    return {k: v.detach().clone() for k, v in t.model.state_dict().items()}


def logged(t, key: str) -> list[float]:
    """A metric TRL logged at every step."""
    return [h[key] for h in t.state.log_history if key in h and "train_runtime" not in h]


def same(w1: dict, w2: dict) -> bool:
    """Bit-identical weights."""
    return set(w1) == set(w2) and all(torch.equal(w1[k], w2[k]) for k in w1)


class Granting(GrantAtOnce):
    """Every phase at once, with `units` worker slots per rollout node; records what was asked and released."""

    def __init__(self, units: int = 2, nodes: tuple[int, ...] = (0,)) -> None:
        super().__init__()
        self.units, self.nodes, self.acquired = units, nodes, []

    def acquire(self, job_id, phase):
        """The phase's permit, at once."""
        self.acquired.append(phase)
        return Grant(0, job_id, phase, "rollout" if phase == "rollout" else "train", self.nodes, 0.0, 0.0, 0.0,
                     units=self.units)
