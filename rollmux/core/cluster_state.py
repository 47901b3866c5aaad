"""The scheduler's cluster state, shared by every executor (simulator, live service).

`ClusterState` owns the groups, one `GroupController` per group, the node
ledger and the departure-time repairs. It decides placements through a pure
placement policy, validates every plan against the written invariants and
applies it; it never knows whether jobs are simulated or real. Executors feed
it arrivals and departures and tell it each job's progress.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

from rollmux.core.accounting import Ledger
from rollmux.core.env import Environment
from rollmux.core.group import Group
from rollmux.core.group_controller import GroupController
from rollmux.core.intra_group import IntraConfig, plan_group
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy, validate_plan
from rollmux.core.regroup import replacement_saving, shrink
from rollmux.core.spec import ClusterSpec, JobSpec

Progress = Mapping[str, tuple[int, float]]  # job_id -> (iterations done, seconds since start)


@dataclass(frozen=True)
class SchedulerConfig:
    """Knobs of the scheduler, whichever executor runs it."""

    seed: int = 0
    max_group_size: int = 5
    intra: IntraConfig = field(default_factory=IntraConfig)
    shrink: bool = True           # release nodes no remaining member needs (beyond the paper)
    regroup: bool = True          # dissolve a group whose members fit elsewhere for less (beyond the paper)
    migration_stall_s: float = 300.0  # a migrating job's pause: state moved, cold start on new nodes
    batch_order: bool = True      # jobs arriving together are placed shortest cycle first (beyond the paper)
    consolidate: int = 2          # on any departure, also try to dissolve groups of at most this many members


class ClusterState:
    """Groups, controllers and the ledger; placement, departures and regrouping."""

    def __init__(self, env: Environment, cluster: ClusterSpec, policy: PlacementPolicy,
                 cfg: SchedulerConfig) -> None:
        self.env, self.cluster, self.policy, self.cfg = env, cluster, policy, cfg
        self.ledger = Ledger(cluster)
        self.groups: dict[int, Group] = {}
        self.controllers: dict[int, GroupController] = {}
        self.dissolving: set[int] = set()
        self.cases: dict[str, int] = {}
        # Policy time per decision: each arrival (or re-placement), and all the policy
        # calls one departure's repairs make together.
        self.decision_ms: dict[str, list[float]] = {"arrival": [], "departure": []}
        self._next_gid = 0

    def view(self, progress: Progress) -> ClusterView:
        """A frozen snapshot for the policy (groups being dissolved are not offered).

        `progress` is read, not copied (a copy made every decision O(all jobs)): callers
        hand over a mapping they do not change while the decision runs."""
        pools = self.cluster.pools
        free = {p: (None if getattr(pools, p).max_nodes is None
                    else getattr(pools, p).max_nodes - self.ledger.nodes[p]) for p in ("rollout", "train")}
        groups = tuple(g for g in self.groups.values() if g.group_id not in self.dissolving)
        return ClusterView(self.cluster, groups, free["rollout"], free["train"],
                           self.cfg.max_group_size, self._next_gid, progress)

    def place(self, job: JobSpec, progress: Progress, arrival: bool = True) -> PlacementPlan | None:
        """Decide, validate and apply a placement for `job`; None if it must wait."""
        plan = self.decide(job, progress)
        if plan is not None:
            self.apply(plan, arrival)
        return plan

    def decide(self, job: JobSpec, progress: Progress) -> PlacementPlan | None:
        """The policy's validated plan for `job` (not applied); None if it must wait."""
        view = self.view(progress)
        t0 = time.perf_counter()
        plan = self.policy.place(job, view)
        self.decision_ms["arrival"].append((time.perf_counter() - t0) * 1e3)
        if plan is not None:
            validate_plan(plan, job, view)
        return plan

    def apply(self, plan: PlacementPlan, arrival: bool) -> None:
        """Carry out a plan: pay for added nodes, install the group, update its controller."""
        g, now = plan.group, self.env.now()
        self.ledger.provision("rollout", plan.added_rollout_nodes, now)
        self.ledger.provision("train", plan.added_train_nodes, now)
        if arrival:  # a migrating job was counted when it arrived
            self.cases[plan.case.value] = self.cases.get(plan.case.value, 0) + 1
        self.groups[g.group_id] = g
        self._next_gid = max(self._next_gid, g.group_id + 1)
        if g.group_id in self.controllers:
            self.controllers[g.group_id].update_group(g)
        else:
            self.controllers[g.group_id] = GroupController(self.env, g, self.cfg.intra)

    def leave(self, job_id: str, group_id: int) -> Group | None:
        """Remove the job from its group; return what is left (None if the group is gone)."""
        now, old = self.env.now(), self.groups[group_id]
        rest = Group(old.group_id, old.n_rollout, old.n_train,
                     tuple(m for m in old.members if m.job_id != job_id))
        if not rest.members:
            del self.groups[group_id], self.controllers[group_id]
            self.dissolving.discard(group_id)
            self.ledger.release("rollout", rest.n_rollout, now)
            self.ledger.release("train", rest.n_train, now)
            return None
        remap = None
        if self.cfg.shrink:
            rest, remap, freed_r, freed_t = shrink(rest)
            self.ledger.release("rollout", freed_r, now)
            self.ledger.release("train", freed_t, now)
        # Keep the order: a departure can only shorten the period, and a
        # re-ordering would cost the remaining members a transient.
        rest = plan_group(rest, self.cfg.intra, reorder=False)
        self.groups[group_id] = rest
        self.controllers[group_id].update_group(rest, remap)
        return rest

    def after_departure(self, rest: Group | None, progress: Progress) -> list[str]:
        """Departure-time repairs; returns the jobs that should migrate at their next boundary."""
        if not (self.cfg.regroup and getattr(self.policy, "regroups", False)):
            return []
        t0 = time.perf_counter()
        movers = self._dissolve(rest, progress) if rest is not None else []
        for g in self.consolidation_candidates():
            # The departure freed room: small groups elsewhere may now fit into others.
            movers += self._dissolve(g, progress)
        self.decision_ms["departure"].append((time.perf_counter() - t0) * 1e3)
        return movers

    def consolidation_candidates(self) -> list[Group]:
        """Groups the consolidation pass tries to dissolve, smallest first (stable order).

        Only groups of at most `consolidate` members that are not already dissolving:
        the filter runs before the sort, so the pass sorts a few groups, not all. The
        pass adds and removes no group and marks only the group it visits, so the list
        can be taken once before the pass."""
        k = self.cfg.consolidate
        if not k:
            return []
        small = [g for g in self.groups.values() if len(g.members) <= k and g.group_id not in self.dissolving]
        return sorted(small, key=lambda g: g.size)

    def _dissolve(self, group: Group, progress: Progress) -> list[str]:
        """Mark the group dissolving if its members fit elsewhere for less; return them."""
        if group.group_id in self.dissolving:
            return []
        self.dissolving.add(group.group_id)  # hides it from the view below
        saving = replacement_saving(group, self.view(progress), self.policy, self.cfg.migration_stall_s)
        if saving <= 1e-9:
            self.dissolving.discard(group.group_id)
            return []
        return list(group.job_ids())
