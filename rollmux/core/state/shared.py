"""What the parts of a `ClusterState` share: the state they act on, and the measured-progress view.

`Held` is what the repairs (`Departures`, `DriftRepair`) read and change of the `ClusterState`
that holds them: a Protocol, so they need not import it (no import cycle).

A job planned with a measured profile (core/estimates.py) owes its past iterations at their
measured solo times, not at the measured profile's; `MeasuredProgress` adds that charge to
its elapsed time (`PhaseEstimate.elapsed_charge`), so `period_budget` computed with the
measured profile gives the job's true SLO budget (DESIGN §5a, uncertainty).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from rollmux.core.accounting import Ledger
from rollmux.core.colo_controller import ColocatedController
from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.env import Environment
from rollmux.core.estimates import PhaseEstimate
from rollmux.core.group import Group
from rollmux.core.group_controller import GroupController
from rollmux.core.placement import ClusterView, JoinBounds, PlacementPolicy, ProgressView
from rollmux.core.placement.costs import FoldTerms
from rollmux.core.placement.index import progress_rows
from rollmux.core.repair.moves import Move
from rollmux.core.spec import ClusterSpec, JobSpec

Progress = Mapping[str, tuple[int, float]]  # job_id -> (iterations done, seconds since start)


class Held(Protocol):
    """The `ClusterState` a repair belongs to, as the repair sees it (core/state/cluster.py)."""

    env: Environment
    cluster: ClusterSpec
    policy: PlacementPolicy
    cfg: SchedulerConfig
    intra: IntraConfig
    regroups: bool
    compacts: bool
    fold_terms: FoldTerms | None
    folded: int
    join_bounds: JoinBounds | None
    ledger: Ledger
    groups: dict[int, Group]
    colocated: dict[int, Group]
    controllers: dict[int, GroupController | ColocatedController]
    group_of: dict[str, int]
    dissolving: set[int]
    arriving: dict[str, Move]
    settling: dict[str, Move]
    estimates: dict[str, PhaseEstimate]
    planned: dict[str, JobSpec]
    decision_ms: dict[str, list[float]]
    compacted: int
    repinned: int

    def view(self, progress: Progress) -> ClusterView: ...

    def renumber(self, group_id: int, remap: Mapping[int, int]) -> None: ...


def measured(progress: Progress, estimates: Mapping[str, PhaseEstimate], planned: Mapping[str, JobSpec]) -> Progress:
    """`progress` as the planner reads it: through `MeasuredProgress` when some job is planned
    with a measured profile, else unchanged."""
    return MeasuredProgress(progress, estimates, planned) if planned else progress


class MeasuredProgress(ProgressView):
    """Progress as the planner must read it for jobs planned with measured profiles; other jobs
    read through unchanged. Lazy: a copy of every job's progress per decision would cost
    O(all jobs)."""

    def __init__(self, base: Progress, estimates: Mapping[str, PhaseEstimate],
                 planned: Mapping[str, JobSpec]) -> None:
        self.base, self.estimates, self.planned = base, estimates, planned

    def get(self, job_id: str, default=None):
        """The job's progress as the planner reads it, or `default`."""
        got = self.base.get(job_id)
        if got is None:
            return default
        spec = self.planned.get(job_id)
        return got if spec is None else (got[0], got[1] + self.estimates[job_id].elapsed_charge(got[0], spec))

    def snapshot_key(self) -> object:
        """The base's: estimates and plans change only with events, each of which reads a
        new base, so views built on one base in one decision read the same entries."""
        base = self.base
        return base.snapshot_key() if isinstance(base, ProgressView) else None

    def rows(self, job_ids: Sequence[str]) -> np.ndarray:
        """(done, elapsed) as the planner reads them, NaN rows for jobs without progress."""
        out = progress_rows(self.base, job_ids)
        planned = self.planned
        if planned:
            for i, j in enumerate(job_ids):
                spec = planned.get(j)
                if spec is not None and not np.isnan(out[i, 0]):
                    out[i, 1] += self.estimates[j].elapsed_charge(int(out[i, 0]), spec)
        return out

    def __iter__(self):
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)
