"""The module veRL imports in every process of a RollMux veRL job (`VERL_USE_EXTERNAL_MODULES`, read when
`verl` is imported, in the driver and in each Ray worker alike).

- TRL compatibility: veRL 0.9.1's FSDP engine imports TRL's `AutoModelForCausalLMWithValueHead` whenever TRL
  is installed (`verl/models/transformers/monkey_patch.py`, only to override its `state_dict`); TRL 1.x
  removed that class (veRL's own `fsdp` extra pins trl 0.27), so an environment with the TRL adapter's trl
  1.16 fails at model build. Where the class is missing, a placeholder module `trl.experimental.ppo` gives
  veRL one that refuses to be built (veRL's value-head fallback then says so).
- With `VERL_PLATFORM=cpu`: the CPU platform, engines and stand-in rollout (`rollmux.adapters.verl.cpu`).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types
from pathlib import Path

CPU_MODULE = "rollmux.adapters.verl.cpu"


class _NoValueHead:
    """Stands in for TRL's removed `AutoModelForCausalLMWithValueHead`; building one is an error."""

    def __init__(self, *args, **kwargs) -> None:
        raise ImportError("TRL >= 1.0 has no AutoModelForCausalLMWithValueHead (veRL's value-head fallback "
                          "needs trl<1); give the critic a token-classification checkpoint")

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        """Refuses, as the constructor does."""
        return cls()


def _has_value_head(trl_dir: Path) -> bool:
    # Read from TRL's files, not imported: every process of a veRL job loads this module, and
    # importing TRL costs seconds there.
    init = trl_dir / "__init__.py"
    return (trl_dir / "experimental" / "ppo").is_dir() or (
        init.is_file() and "AutoModelForCausalLMWithValueHead" in init.read_text(errors="replace"))


def install_trl_compat() -> None:
    """Provide `trl.experimental.ppo.AutoModelForCausalLMWithValueHead` where TRL is installed without it."""
    spec = importlib.util.find_spec("trl")  # (finds, does not import)
    if spec is None or not spec.submodule_search_locations or "trl.experimental.ppo" in sys.modules:
        return
    if _has_value_head(Path(next(iter(spec.submodule_search_locations)))):
        return
    module = types.ModuleType("trl.experimental.ppo")
    module.AutoModelForCausalLMWithValueHead = _NoValueHead
    sys.modules["trl.experimental.ppo"] = module


install_trl_compat()
if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    importlib.import_module(CPU_MODULE)
