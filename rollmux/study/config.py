"""Sizes of `rollmux study`, shared by every section of the study."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class StudyConfig:
    """Sizes of the study; `quick` shrinks everything to run in under a minute. `group_sizes`: the max
    group sizes part A sweeps at SLO U(1,2); 1 (every job alone) is the group-size figure's reference."""

    small_jobs: int = 8
    instances: int = 3
    group_sizes: tuple[int, ...] = (1, 2, 3, 4, 5)
    philly_jobs: int = 200
    philly_days: float = 14.0
    philly_vc: str = "0e4a51"
    seed: int = 0
    is_quick: bool = False

    @classmethod
    def quick(cls) -> "StudyConfig":
        """Small instances, one of each, short traces."""
        return cls(small_jobs=5, instances=1, group_sizes=(1, 2, 5), philly_jobs=30, philly_days=2.0,
                   is_quick=True)
