"""Small but real GRPO job (PyTorch, CPU) with scheduler-drivable phases."""

from .job import PRESETS, GRPOConfig, GRPOJob, RolloutBatch, make_config, run_solo
from .profiled import make_job  # the `rollmux profile rollmux.jobs.grpo` entry point

__all__ = ["PRESETS", "GRPOConfig", "GRPOJob", "RolloutBatch", "make_config", "make_job", "run_solo"]
