"""How an option becomes a group (DESIGN §3): the newcomer's pins and the joined plan.

A member is pinned to a subset of its group's rollout nodes and to the group's first
training nodes; host DRAM on every node it shares must hold its resident state. A join
takes the least-loaded existing rollout nodes with room (`rollout_node_loads`), then fresh
ones; the plan records the nodes it adds and their price (Δ).
"""

from __future__ import annotations

from rollmux.core.group import Group, Member
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec


def rollout_node_loads(group: Group, quantile: float) -> list[float]:
    """Planned rollout seconds per meta-iteration on each of the group's rollout nodes."""
    loads = [0.0] * group.n_rollout
    for m in group.members:
        r = m.job.rollout_s.quantile(quantile) * m.rollout_factor
        for n in m.rollout_nodes:
            loads[n] += r
    return loads


def pin_shape(group: Group, job: JobSpec, cluster: ClusterSpec, nodes: int, factor: float, new_r: int,
              new_t: int, node_order: list[int]) -> Group | None:
    """`group` with `job` appended on `nodes` rollout nodes (`new_r` of them fresh, the rest the
    first of `node_order` with room) at rollout `factor`, and its training nodes (`new_t` fresh
    ones appended); None if residency rules it out."""
    kt = cluster.pools.train.nodes_for(job.train_gpus)
    t_used = group.train_gb
    t_cap = cluster.pools.train.host_gb_per_node
    if any(t_used[n] + job.host_gb.train > t_cap + 1e-9 for n in range(min(kt, group.n_train))):
        return None  # (an added training node holds only the newcomer: it always fits)
    r_used = group.rollout_host_gb()
    r_cap = cluster.pools.rollout.host_gb_per_node
    fits = [n for n in node_order if r_used[n] + job.host_gb.rollout <= r_cap + 1e-9]
    if len(fits) < nodes - new_r:
        return None
    pins = tuple(sorted(fits[:nodes - new_r])) + tuple(range(group.n_rollout, group.n_rollout + new_r))
    member = Member(job, pins, tuple(range(kt)), factor)
    return Group(group.group_id, group.n_rollout + new_r, group.n_train + new_t, group.members + (member,))


def pin_into(group: Group, job: JobSpec, cluster: ClusterSpec, new_nodes: int,
             node_order: list[int]) -> Group | None:
    """Algorithm 1's pinning: `group` with `job` appended on its nominal rollout nodes, taken in
    `node_order` plus `new_nodes` fresh ones, and the group's first training nodes; None if
    residency or too few training nodes rule it out."""
    k = cluster.pools.rollout.nodes_for(job.rollout_gpus)
    if new_nodes > k or cluster.pools.train.nodes_for(job.train_gpus) > group.n_train:
        return None
    return pin_shape(group, job, cluster, k, 1.0, new_nodes, 0, node_order)


def joined_plan(group: Group, cand: Group, new_nodes: int, job: JobSpec, view: ClusterView,
                new_t: int = 0) -> PlacementPlan:
    """The plan that turns `group` into `cand` (already planned) by adding `new_nodes` rollout
    and `new_t` training nodes: direct packing, rollout scaling or training scaling."""
    pools = view.cluster.pools
    if new_t:
        delta = new_nodes * pools.rollout.node_price_per_hour + new_t * pools.train.node_price_per_hour
        return PlacementPlan(job.job_id, Case.TRAIN_SCALING, cand, new_nodes, new_t, delta)
    case = Case.DIRECT if new_nodes == 0 else Case.SCALING
    return PlacementPlan(job.job_id, case, cand, new_nodes, 0, new_nodes * pools.rollout.node_price_per_hour)
