"""Baseline placement policies (DESIGN §6) behind the same seam as RollMux.

- Solo-D: every job gets its own group (standard disaggregation).
- Random: a uniformly random group with room (size, residency, training nodes),
  no SLO check; isolated when none has room.
- Greedy (most-idle): the group with the largest idle share of its bottleneck
  (1 - T_load / T_cycle), no SLO check; isolated when none has room.
Random and Greedy pin to the least-loaded rollout nodes and add rollout nodes
only when the group has too few that fit (the paper's simulation baselines).
"""

from __future__ import annotations

import numpy as np

from rollmux.core.group import Group
from rollmux.core.inter_group import isolated_plan, joined_plan, pin_into, rollout_node_loads
from rollmux.core.intra_group import IntraConfig, plan_group
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.spec import JobSpec


class SoloPlacement(PlacementPolicy):
    """Solo-D: dedicated rollout and training nodes per job."""

    name = "solo-d"

    def __init__(self, cfg: IntraConfig | None = None) -> None:
        self.cfg = cfg or IntraConfig()

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


class _RoomPolicy(PlacementPolicy):
    """Shared body of Random and Greedy: choose among groups with room, else isolate."""

    def __init__(self, cfg: IntraConfig | None = None) -> None:
        self.cfg = cfg or IntraConfig()

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """Join a chosen group with room, else a new group."""
        fits = []
        for g in view.groups:
            if g.size >= view.max_group_size:
                continue
            found = _fit(g, job, view, self.cfg.plan_quantile)
            if found is not None:
                fits.append((g, *found))
        if not fits:
            return isolated_plan(job, view, self.cfg)
        g, cand, new_nodes = self.choose(fits)
        return joined_plan(g, plan_group(cand, self.cfg), new_nodes, job, view)

    def choose(self, fits: list[tuple[Group, Group, int]]) -> tuple[Group, Group, int]:
        """Pick one of the (group, candidate, new nodes) options."""
        raise NotImplementedError


class RandomPlacement(_RoomPolicy):
    """Uniformly random group with room."""

    name = "random"

    def __init__(self, rng: np.random.Generator, cfg: IntraConfig | None = None) -> None:
        super().__init__(cfg)
        self.rng = rng

    def choose(self, fits: list[tuple[Group, Group, int]]) -> tuple[Group, Group, int]:
        """A uniform draw from the seeded generator."""
        return fits[int(self.rng.integers(len(fits)))]


class GreedyPlacement(_RoomPolicy):
    """Most-idle group with room."""

    name = "greedy"

    def choose(self, fits: list[tuple[Group, Group, int]]) -> tuple[Group, Group, int]:
        """The group whose bottleneck idles the most (ties: first)."""
        def idle(opt: tuple[Group, Group, int]) -> float:
            s = opt[0].shape
            return 0.0 if s is None or s.t_cycle_s <= 0 else 1.0 - s.t_load_s / s.t_cycle_s
        return max(fits, key=idle)
