"""Co-execution groups (DESIGN §3): members pinned to a group's nodes.

Groups and members are frozen: policies receive them as immutable snapshots,
so a policy can never mutate the cluster state it is reasoning about.
Node indices here are local to the group (0..n_rollout-1, 0..n_train-1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from rollmux.core.spec import ClusterSpec, JobSpec


@dataclass(frozen=True)
class Member:
    """A job pinned to some of its group's rollout nodes and its first training nodes."""

    job: JobSpec
    rollout_nodes: tuple[int, ...]
    train_nodes: tuple[int, ...]
    # Its rollout time over the profile's (core/elastic.py): 1.0 on its nominal rollout nodes;
    # elastic rollout parallelism pins it to fewer (> 1) or more (< 1) nodes.
    rollout_factor: float = 1.0

    @property
    def job_id(self) -> str:
        """The member's job id."""
        return self.job.job_id


@dataclass(frozen=True)
class GroupShape:
    """Planning summary of a group, recomputed whenever its members change."""

    period_s: float          # planned co-execution iteration time of every member
    t_cycle_s: float         # slowest member alone (planning durations)
    t_load_s: float          # busiest node's total work per meta-iteration
    # Under the SLO order (core/slo_order.py): one meta-iteration's sequence of member
    # indices, a member appearing once per iteration it runs there; () = each member once
    # in cyclic order (round robin). period_s is then the meta-iteration's.
    slots: tuple[int, ...] = ()

    def member_period(self, i: int) -> float:
        """Planned long-run iteration time of the `i`-th member (cyclic order)."""
        return self.period_s / self.slots.count(i) if self.slots else self.period_s

    @property
    def status(self) -> str:
        """unsaturated / full / saturated per DESIGN §4."""
        if abs(self.t_load_s - self.t_cycle_s) <= 1e-9 * max(1.0, self.t_cycle_s):
            return "full"
        return "unsaturated" if self.t_load_s < self.t_cycle_s else "saturated"


@dataclass(frozen=True)
class Group:
    """A co-execution group: its node counts and its members in cyclic order."""

    group_id: int
    n_rollout: int
    n_train: int
    members: tuple[Member, ...] = ()
    shape: GroupShape | None = field(default=None, compare=False)

    @property
    def size(self) -> int:
        """Number of members."""
        return len(self.members)

    def job_ids(self) -> tuple[str, ...]:
        """Member job ids in cyclic order."""
        return tuple(m.job_id for m in self.members)

    def member(self, job_id: str) -> Member:
        """The member with this job id."""
        for m in self.members:
            if m.job_id == job_id:
                return m
        raise KeyError(job_id)

    def host_gb_used(self, pool: str) -> list[float]:
        """Host DRAM used on each node of `pool` ("rollout" or "train") by the members pinned there."""
        used = [0.0] * (self.n_rollout if pool == "rollout" else self.n_train)
        for m in self.members:
            for n in (m.rollout_nodes if pool == "rollout" else m.train_nodes):
                used[n] += getattr(m.job.host_gb, pool)
        return used

    def rollout_host_gb(self) -> list[float]:
        """Host DRAM used on each rollout node."""
        return self.host_gb_used("rollout")

    def train_host_gb(self) -> list[float]:
        """Host DRAM used on each training node."""
        return list(self.train_gb)

    @cached_property
    def train_gb(self) -> tuple[float, ...]:
        """Host DRAM used on each training node, computed once (the group is frozen)."""
        return tuple(self.host_gb_used("train"))

    def cost_per_hour(self, cluster: ClusterSpec) -> float:
        """Provisioning cost rate of the group's nodes ($/h)."""
        return (self.n_rollout * cluster.pools.rollout.node_price_per_hour
                + self.n_train * cluster.pools.train.node_price_per_hour)


def residency_ok(group: Group, cluster: ClusterSpec) -> bool:
    """True when every node's pinned members fit in its host DRAM."""
    r_cap = cluster.pools.rollout.host_gb_per_node
    t_cap = cluster.pools.train.host_gb_per_node
    eps = 1e-9
    return (all(u <= r_cap + eps for u in group.rollout_host_gb())
            and all(u <= t_cap + eps for u in group.train_host_gb()))


def isolated_group(group_id: int, job: JobSpec, cluster: ClusterSpec) -> Group:
    """A new group sized for `job` alone (isolated provisioning)."""
    nr = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    nt = cluster.pools.train.nodes_for(job.train_gpus)
    member = Member(job, tuple(range(nr)), tuple(range(nt)))
    return Group(group_id, nr, nt, (member,))
