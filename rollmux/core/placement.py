"""The placement seam: immutable cluster views in, validated placement plans out.

A placement policy is pure: it gets a frozen `ClusterView` and returns a
`PlacementPlan` (or None to make the job wait). The executor (simulator or
live service) applies a plan only after `validate_plan` has checked it
against the invariants written below, whatever policy produced it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from rollmux.core.colo_model import colocated_gpus, gpu_options
from rollmux.core.config import IntraConfig, ShapesConfig
from rollmux.core.elastic import allowed_factor
from rollmux.core.group import Group, residency_ok
from rollmux.core.group_index import IndexSnapshot, rows_by_entry
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Case
from rollmux.core.why import PlacementWhy


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
    # The group index as of `groups` (core/group_index.py), if the executor keeps one: a
    # policy may use it to skip groups that cannot take a job; it never changes what is valid.
    index: IndexSnapshot | None = field(default=None, compare=False, repr=False)
    # group id -> seconds of migration stall its members still owe (moves reserved into it,
    # migrants not yet through their first iteration there: core/cluster_state.py). The
    # executor charges them to its members' `progress`; a policy charges a newcomer the
    # group's own when it plans the newcomer into it (it waits for them too).
    owed_s: Mapping[int, float] = field(default_factory=dict, compare=False, repr=False)
    # The job placed is a migrant whose slot is reserved now (core/regroup.py `plan_moves`):
    # it moves between groups only (the co-located mode takes arrivals, core/colocate.py).
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
    # (core/why.py). None for other cases and for policies that do not say.
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
# executor asks for each once, when it is built (core/cluster_state.py).

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
    """Its isolated plans say why no group took the job (`PlacementPlan.why`, core/why.py)."""

    explains: bool


@runtime_checkable
class Colocating(Protocol):
    """May place a job co-located on training nodes (core/colocate.py) when `colocate`."""

    colocate: bool


@runtime_checkable
class Shaped(Protocol):
    """Places jobs on flexible shapes (core/shapes.py); elastic rollout lets groups compact."""

    shapes: ShapesConfig


class PlanInvalid(ValueError):
    """A plan broke one of the written invariants."""


def validate_plan(plan: PlacementPlan, job: JobSpec, view: ClusterView) -> None:
    """Check a plan's invariants; raise PlanInvalid naming the one broken.

    Invariants:
      I1 the job is a member exactly once; no other member was added, removed or re-pinned;
      I2 an existing group keeps its nodes and gains only those the plan adds: rollout nodes,
         and training nodes only up to what the job needs (training scaling);
      I3 the job is pinned to as many distinct rollout nodes as it needs (or an elastic count
         with the rollout factor core/elastic.py gives it), to the group's first training
         nodes, and all pins name real nodes;
      I4 residency: every node's pinned members fit in its host DRAM;
      I5 the group has at most max_group_size members;
      I6 added nodes fit in the pools' node caps;
      I7 the recorded Δ equals the price of the added nodes.
    """
    if plan.case == Case.COLOCATED:
        _check_colocated(plan, job, view)
        return
    g, cluster = plan.group, view.cluster
    old = view.group(g.group_id)
    ids = [m.job_id for m in g.members]
    if ids.count(job.job_id) != 1 or plan.job_id != job.job_id:
        raise PlanInvalid(f"I1: job {job.job_id} must appear exactly once in group {g.group_id}")
    others = {m.job_id: m for m in g.members if m.job_id != job.job_id}
    before = {m.job_id: m for m in old.members} if old else {}
    if others != before:
        raise PlanInvalid(f"I1: plan changes other members of group {g.group_id}")
    if old is not None and (g.n_train != old.n_train + plan.added_train_nodes
                            or g.n_rollout != old.n_rollout + plan.added_rollout_nodes
                            or (plan.added_train_nodes and g.n_train != cluster.pools.train.nodes_for(job.train_gpus))):
        raise PlanInvalid(f"I2: group {g.group_id} node counts changed inconsistently")
    if old is None and (g.n_rollout != plan.added_rollout_nodes or g.n_train != plan.added_train_nodes):
        raise PlanInvalid(f"I2: new group {g.group_id} must be provisioned by the plan")
    _check_pins(g, job, cluster)
    if not residency_ok(g, cluster):
        raise PlanInvalid(f"I4: residency exceeded in group {g.group_id}")
    if g.size > view.max_group_size:
        raise PlanInvalid(f"I5: group {g.group_id} has {g.size} > {view.max_group_size} members")
    for free, added, pool in ((view.free_rollout_nodes, plan.added_rollout_nodes, "rollout"),
                              (view.free_train_nodes, plan.added_train_nodes, "train")):
        if free is not None and added > free:
            raise PlanInvalid(f"I6: {added} new {pool} nodes exceed the {free} left")
    delta = (plan.added_rollout_nodes * cluster.pools.rollout.node_price_per_hour
             + plan.added_train_nodes * cluster.pools.train.node_price_per_hour)
    if abs(delta - plan.delta_cost_per_hour) > 1e-6 * max(1.0, delta):
        raise PlanInvalid(f"I7: Δ {plan.delta_cost_per_hour} != price of added nodes {delta}")


def _check_colocated(plan: PlacementPlan, job: JobSpec, view: ClusterView) -> None:
    """A co-located plan's invariants (core/colocate.py): C1 the job alone, in a new group;
    C2 no rollout nodes, the job's G (or narrowed G') GPUs' worth of new training nodes, all pinned;
    C3 its rollout and training host state fit one training node; C4 node cap; C5 Δ = their price."""
    g, pool = plan.group, view.cluster.pools.train
    if plan.job_id != job.job_id or g.job_ids() != (job.job_id,) or view.group(g.group_id) is not None:
        raise PlanInvalid(f"C1: co-located job {job.job_id} must be alone in a new group")
    allowed = {pool.nodes_for(n) for n in gpu_options(job, view.cluster)}  # (G, or a narrowed G')
    nt = g.n_train if g.n_train in allowed else pool.nodes_for(colocated_gpus(job))
    m = g.members[0]
    if (g.n_rollout or plan.added_rollout_nodes or g.n_train != nt or plan.added_train_nodes != nt
            or m.rollout_nodes or m.train_nodes != tuple(range(nt))):
        raise PlanInvalid(f"C2: co-located job {job.job_id} must hold exactly its {nt} training nodes")
    if job.host_gb.rollout + job.host_gb.train > pool.host_gb_per_node + 1e-9:
        raise PlanInvalid(f"C3: co-located job {job.job_id}'s host state exceeds a training node")
    if view.free_train_nodes is not None and nt > view.free_train_nodes:
        raise PlanInvalid(f"C4: {nt} new train nodes exceed the {view.free_train_nodes} left")
    if abs(nt * pool.node_price_per_hour - plan.delta_cost_per_hour) > 1e-6 * max(1.0, plan.delta_cost_per_hour):
        raise PlanInvalid(f"C5: Δ {plan.delta_cost_per_hour} != price of {nt} training nodes")


def _check_pins(g: Group, job: JobSpec, cluster: ClusterSpec) -> None:
    m = g.member(job.job_id)
    need_r = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    need_t = cluster.pools.train.nodes_for(job.train_gpus)
    k = len(m.rollout_nodes)  # elastic rollout (core/elastic.py): another count, at its model's factor
    want = 1.0 if k == need_r else allowed_factor(job, cluster, k)
    if len(set(m.rollout_nodes)) != k or want is None or abs(m.rollout_factor - want) > 1e-9:
        raise PlanInvalid(f"I3: {job.job_id} needs {need_r} distinct rollout nodes (or an elastic count at "
                          f"its rollout factor), got {m.rollout_nodes} at factor {m.rollout_factor:g}")
    if not all(0 <= n < g.n_rollout for n in m.rollout_nodes):
        raise PlanInvalid(f"I3: {job.job_id} pinned to a rollout node the group lacks")
    if m.train_nodes != tuple(range(need_t)) or need_t > g.n_train:
        raise PlanInvalid(f"I3: {job.job_id} must use the group's first {need_t} training nodes")
