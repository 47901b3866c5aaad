"""The one policy builder (DESIGN §10): the simulator, the study, the benchmarks and the
service all build RollMux's placement from a `SchedulerConfig` here."""

from __future__ import annotations

from rollmux.core.config import SchedulerConfig
from rollmux.core.placement.policy import RollMuxPlacement
from rollmux.core.spec import ClusterSpec


def build_policy(config: SchedulerConfig, cluster: ClusterSpec) -> RollMuxPlacement:
    """RollMux's placement as `config` sets it, planning with `cluster`'s switch costs."""
    return RollMuxPlacement(config.intra_for(cluster), config)
