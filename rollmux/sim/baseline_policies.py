"""Baseline placement policies (DESIGN §6) behind the same seam as RollMux.

- Solo-D: every job gets its own group (standard disaggregation).
- Random (the paper's simulation baseline): a uniform draw among the options
  {each existing group with room} ∪ {a new group}, so it spreads jobs over
  new groups as well as packing them. A group has *room* for a job when it has
  fewer than max_group_size members, the job's training nodes fit (the group
  has enough of them and their host DRAM holds the job) and its rollout pins
  fit residency, adding rollout nodes if needed.
- Greedy / Most-Idle (the paper's other simulation baseline): the group with
  room that has the most idle time, a new group only when no group has room.
  Idle time = planned idle seconds per meta-iteration on the group's
  bottleneck (busiest) node: `period_s - t_load_s` of its planning shape, i.e.
  the seconds per cycle in which the node everyone waits on does nothing.
Neither checks SLOs: that is what the baselines measure. Both pin a joining job
to the least-loaded rollout nodes and add rollout nodes only when the group has
too few that fit.
- FixedPartition: replays a given partition (e.g. the offline optimum) as
  static groups, so a partition found offline can be run in the simulator.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

import numpy as np

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, Member
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.pinning import joined_plan, pin_into, rollout_node_loads
from rollmux.core.spec import JobSpec

Option = tuple[Group, Group, int]  # (group as it is, group with the job pinned in, rollout nodes added)


class SoloPlacement(PlacementPolicy):
    """Solo-D: dedicated rollout and training nodes per job."""

    name = "solo-d"

    def __init__(self, cfg: IntraConfig) -> None:
        self.cfg = cfg

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """Always a new group."""
        return isolated_plan(job, view, self.cfg)


def _fit(g: Group, job: JobSpec, view: ClusterView, q: float) -> tuple[Group, int] | None:
    """Pin `job` into `g` on least-loaded nodes, adding as few rollout nodes as needed."""
    loads = rollout_node_loads(g, q)
    order = sorted(range(g.n_rollout), key=lambda n: (loads[n], n))
    k = view.cluster.pools.rollout.nodes_for(job.rollout_gpus)
    for new_nodes in range(0, k + 1):
        if view.free_rollout_nodes is not None and new_nodes > view.free_rollout_nodes:
            return None
        cand = pin_into(g, job, view.cluster, new_nodes, order)
        if cand is not None:
            return cand, new_nodes
    return None


def groups_with_room(job: JobSpec, view: ClusterView, cfg: IntraConfig) -> list[Option]:
    """Every group `job` could join without an SLO check (size, training nodes, residency)."""
    out = []
    for g in view.groups:
        if g.size >= view.max_group_size:
            continue
        found = _fit(g, job, view, cfg.plan_quantile)
        if found is not None:
            out.append((g, *found))
    return out


def idle_s(g: Group) -> float:
    """Planned idle seconds per meta-iteration on the group's busiest node (period - load)."""
    s = g.shape
    return 0.0 if s is None else max(0.0, s.period_s - s.t_load_s)


class RandomPlacement(PlacementPolicy):
    """Uniform among the groups with room and a new group (the paper's Random)."""

    name = "random"

    def __init__(self, rng: np.random.Generator, cfg: IntraConfig) -> None:
        self.cfg = cfg
        self.rng = rng

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """A uniform draw from the seeded generator over the options; None if there are none."""
        fits: list[Option | None] = list(groups_with_room(job, view, self.cfg))
        new = isolated_plan(job, view, self.cfg)
        if new is not None:  # under node caps a new group may not be possible
            fits.append(None)
        if not fits:
            return None
        pick = fits[int(self.rng.integers(len(fits)))]
        if pick is None:
            return new
        g, cand, new_nodes = pick
        return joined_plan(g, plan_group(cand, self.cfg), new_nodes, job, view)


class GreedyPlacement(PlacementPolicy):
    """Most-Idle: the group with room whose bottleneck idles longest; a new group when none has room."""

    name = "greedy"

    def __init__(self, cfg: IntraConfig) -> None:
        self.cfg = cfg

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """Join the most idle group with room (ties: the first), else a new group."""
        fits = groups_with_room(job, view, self.cfg)
        if not fits:
            return isolated_plan(job, view, self.cfg)
        g, cand, new_nodes = max(fits, key=lambda opt: idle_s(opt[0]))  # max keeps the first of ties
        return joined_plan(g, plan_group(cand, self.cfg), new_nodes, job, view)


class FixedPartition(PlacementPolicy):
    """Places each job into its group of a given partition (node counts and pins as given).

    A group is provisioned whole (all its nodes) when its first member arrives and every
    later member joins with its given pins, so once all members are in, the group is the
    given one. Unknown jobs get a group of their own. No SLO check: the partition's maker
    is responsible for it."""

    name = "fixed-partition"

    def __init__(self, groups: Sequence[Group], cfg: IntraConfig) -> None:
        self.cfg = cfg
        self.groups = {g.group_id: g for g in groups}
        self.where = {m.job_id: (g.group_id, m) for g in groups for m in g.members}
        # Fresh ids for unknown jobs never collide with the partition's own.
        self._next_id = 1 + max(self.groups, default=-1)

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The job's group of the partition, grown by the job."""
        if job.job_id not in self.where:
            view = replace(view, next_group_id=max(view.next_group_id, self._next_id))
            plan = isolated_plan(job, view, self.cfg)
            if plan is not None:
                self._next_id = plan.group.group_id + 1
            return plan
        gid, given = self.where[job.job_id]
        member = Member(job, given.rollout_nodes, given.train_nodes)
        target, now = self.groups[gid], view.group(gid)
        if now is None:
            g = plan_group(Group(gid, target.n_rollout, target.n_train, (member,)), self.cfg)
            for free, need in ((view.free_rollout_nodes, g.n_rollout), (view.free_train_nodes, g.n_train)):
                if free is not None and need > free:
                    return None
            return PlacementPlan(job.job_id, Case.ISOLATED, g, g.n_rollout, g.n_train,
                                 g.cost_per_hour(view.cluster))
        cand = Group(gid, now.n_rollout, now.n_train, now.members + (member,))
        return joined_plan(now, plan_group(cand, self.cfg), 0, job, view)
