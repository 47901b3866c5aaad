"""Small but real GRPO job (PyTorch, CPU) with scheduler-drivable phases."""

from .job import PRESETS, GRPOConfig, GRPOJob, RolloutBatch, make_config, run_solo

__all__ = ["PRESETS", "GRPOConfig", "GRPOJob", "RolloutBatch", "make_config", "run_solo"]
