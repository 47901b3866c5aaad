"""veRL's PPO/GRPO loop (`RayPPOTrainer.fit`, veRL 0.9.1) under RollMux's permits (docs/adapters.md).

A user changes one import (`from rollmux.adapters.verl import RayPPOTrainer`) or one command
(`python -m rollmux.adapters.verl.main_ppo` for `python -m verl.trainer.main_ppo`). Modules:

- `trainer`: `RayPPOTrainer` (veRL's, with `init_workers` and `fit` wrapped) and the training side's moves.
- `managers`: veRL's `AgentLoopManager` and `CheckpointEngineManager` through veRL's config hooks.
- `phases`: where veRL's loop is in RollMux's phases, and the shim's hooks (no veRL import).
- `main_ppo`: veRL's Hydra entry point with the RollMux trainer; `build(config)` for scripts.
- `plugin`, `cpu`: loaded by veRL in each process (`VERL_USE_EXTERNAL_MODULES`); the CPU platform and
  the stand-in rollout server that let the real loop run on CPU (`cpu.activate()`).
- `tiny`: a tiny job on disk (model, tokenizer, parquet, reward) and its Hydra overrides.

Names are loaded on first use, so that veRL's processes can import `plugin` while veRL itself imports.
"""

from __future__ import annotations

import importlib
from typing import Any

# (through `trainer`, whose import says in one line which extra is missing)
_LAZY = {"RayPPOTrainer": "trainer", "VeRLPhases": "phases", "AgentLoopManager": "trainer",
         "CheckpointEngineManager": "trainer", "build": "main_ppo"}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    """`RayPPOTrainer` and the rest, imported when first asked for."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
