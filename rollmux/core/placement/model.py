"""The placement seam (DESIGN §5): immutable cluster views in, placement plans out.

A placement policy is pure: it gets a frozen `ClusterView` and returns a `PlacementPlan`
(or None to make the job wait). The executor (simulator or live service) applies a plan
only after `validate_plan` (placement/validate.py) has checked it against the written
invariants, whatever policy produced it. Optional capabilities of a policy are Protocols,
found by type once, when the executor is built (core/state/).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from rollmux.core.config import IntraConfig, ShapesConfig
from rollmux.core.group import Group
from rollmux.core.placement.index import IndexSnapshot, rows_by_entry
from rollmux.core.placement.why import PlacementWhy
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Case


@dataclass(frozen=True)
class ClusterView:
    """What a policy sees: groups (frozen), node headroom per pool, and limits."""

    cluster: ClusterSpec
    groups: tuple[Group, ...]
    free_rollout_nodes: int | None   # None = uncapped
    free_train_nodes: int | None
    max_group_size: int
    next_group_id: int
    # job_id -> (iterations done, seconds since it started); jobs absent have not started.
    progress: Mapping[str, tuple[int, float]] = field(default_factory=dict)
    # The group index as of `groups` (placement/index.py), if the executor keeps one: a
    # policy may use it to skip groups that cannot take a job; it never changes what is valid.
    index: IndexSnapshot | None = field(default=None, compare=False, repr=False)
    # group id -> seconds of migration stall its members still owe (moves reserved into it,
    # migrants not yet through their first iteration there: core/state/). The
    # executor charges them to its members' `progress`; a policy charges a newcomer the
    # group's own when it plans the newcomer into it (it waits for them too).
    owed_s: Mapping[int, float] = field(default_factory=dict, compare=False, repr=False)
    # The job placed is a migrant whose slot is reserved now (repair/moves.py `plan_moves`):
    # it moves between groups only (the co-located mode takes arrivals, options/colocated.py).
    moving: bool = field(default=False, compare=False)

    def group(self, group_id: int) -> Group | None:
        """The group with this id, if any."""
        snap = self.index
        if snap is not None and snap.groups is self.groups and snap.current:
            return snap.find(group_id)  # a dict look-up, not a scan of every group
        return next((g for g in self.groups if g.group_id == group_id), None)


@dataclass(frozen=True)
class PlacementPlan:
    """A policy's decision for one job: the group as it will be after placement."""

    job_id: str
    case: Case
    group: Group
    added_rollout_nodes: int
    added_train_nodes: int
    delta_cost_per_hour: float
    # An isolated plan of a policy that explains itself: why no existing group took the job
    # (placement/why.py). None for other cases and for policies that do not say.
    why: PlacementWhy | None = None


class ProgressView(Mapping):
    """A lazy, read-only progress mapping (job_id -> (iterations done, seconds since start)).

    Decisions look up a few jobs out of all running ones, so the views compute entries on
    demand. Subclasses define `get` directly (Mapping.get's try/except, on the placement
    index's hottest path, cost more than the look-up itself); indexing goes through it."""

    __slots__ = ()

    @abstractmethod
    def get(self, job_id: str, default=None):
        """The job's progress, or `default` when it has none."""

    def rows(self, job_ids: Sequence[str]) -> np.ndarray:
        """(done, elapsed) per job id as an (n, 2) array, NaN rows for jobs without progress.
        Views override it to read a whole scan's members without a call per look-up."""
        return rows_by_entry(self, job_ids)

    def uncharged(self) -> ProgressView | None:
        """This view less any charges that only add elapsed time (so only lower budgets);
        None when there is no such view."""
        return self

    def snapshot_key(self) -> object | None:
        """Identifies the instant this view reads: views with the same key (the same object)
        give the same entries, so what is computed from one may be reused for another; None
        when nothing can be reused (a mapping that may change in place)."""
        return self

    def __getitem__(self, job_id: str) -> tuple[int, float]:
        got = self.get(job_id)
        if got is None:
            raise KeyError(job_id)
        return got


class PlacementPolicy(ABC):
    """Decides where an arriving job goes."""

    name: str = "policy"

    @abstractmethod
    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """A plan for `job`, or None when it cannot be placed now (it waits)."""


# Optional capabilities of a policy, found by type (never by probing attributes). The
# executor asks for each once, when it is built (core/state/).

@runtime_checkable
class Regrouping(Protocol):
    """Admits by SLO with its own planner view (`cfg`, which must then be the scheduler's) and
    can place a job into existing groups only, so departure-time re-placement is safe. The
    baselines plan groups but admit without SLOs: they never regroup or repair."""

    cfg: IntraConfig

    def place_joined(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The cheapest valid placement of `job` into an existing group; None if there is none."""


@runtime_checkable
class JoinBounds(Protocol):
    """Has a cheap necessary test of whether jobs could join groups (the departure pass uses it
    to skip groups no departure can affect)."""

    def join_matrix(self, targets: Sequence[Group], jobs: Sequence[JobSpec], view: ClusterView) -> np.ndarray:
        """False where no plan of this policy puts `jobs[i]` into `targets[k]`."""


@runtime_checkable
class Explaining(Protocol):
    """Its isolated plans say why no group took the job (`PlacementPlan.why`, placement/why.py)."""

    explains: bool


@runtime_checkable
class Colocating(Protocol):
    """May place a job co-located on training nodes (placement/options/colocated.py) when `colocate`."""

    colocate: bool


@runtime_checkable
class Shaped(Protocol):
    """Places jobs on flexible shapes (placement/options/); elastic rollout lets groups compact."""

    shapes: ShapesConfig


def _position(view: ClusterView, group_id: int) -> int | None:
    """Where the group sits in `view.groups` (None: absent). A tentative view keeps the base
    view's groups at their positions (new groups go last), so the index finds it without a scan."""
    groups, snap = view.groups, view.index
    if snap is not None and snap.current and len(groups) >= len(snap.groups):
        pos = snap.position(group_id)
        if pos is not None and groups[pos].group_id == group_id:
            return pos
    return next((i for i, g in enumerate(groups) if g.group_id == group_id), None)


def with_plan(view: ClusterView, plan: PlacementPlan) -> ClusterView:
    """The view after a plan is applied (for tentative, sequential placements: the repair
    side's moves, a pairing's new group)."""
    groups, gid = view.groups, plan.group.group_id
    pos = _position(view, gid)
    groups = groups + (plan.group,) if pos is None else groups[:pos] + (plan.group,) + groups[pos + 1:]
    free_r = None if view.free_rollout_nodes is None else view.free_rollout_nodes - plan.added_rollout_nodes
    free_t = None if view.free_train_nodes is None else view.free_train_nodes - plan.added_train_nodes
    return replace(view, groups=groups, free_rollout_nodes=free_r, free_train_nodes=free_t,
                   next_group_id=max(view.next_group_id, plan.group.group_id + 1))
