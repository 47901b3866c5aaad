"""Rollout compaction (DESIGN §5a): a group gives back a rollout node, its members there narrowed.

A group's members bank time: admission plans them conservatively (the mean plan's confidence
bound, worst-case switches), so most run ahead of their SLO budget, and a departure leaves the
rest more room than they were admitted with. Elastic rollout parallelism (core/elastic.py) turns
that slack into node-hours: a member pinned on several rollout nodes may roll out on fewer,
its rollout slower by the elastic model's factor. Compaction drops one rollout node of a group
when every member pinned on it can narrow onto the others it already holds, and the narrowed
group still passes the policy's own SLO admission test (core/placement/admission.py
`group_fits`) with the members' progress so far, and when it costs less per planned
meta-iteration (rate x period, as stretch pricing prices a join, core/placement/costs.py):
a narrowed rollout can stretch the period, and the whole group, its training node included,
then holds its nodes longer for the same work. It repeats while a node can go.
Evidence: docs/decisions/compaction.md.

A narrowed member's state is already resident on the nodes it keeps (no cold start, no
migration); its cost is its longer rollout, which the plan and the admission test include.

Re-pinning (`repin`): a member whose only rollout node is the one dropped is pinned instead to
the group's other rollout node with the fewest members (lowest index first), at its factor: e.g.
two 1+1 jobs left on two rollout nodes and one training node when a third member departed share
one rollout node again. Its rollout state is not resident there: its next rollout cold-starts
(`moves.repin_seconds`: remote load plus its rollout state over the migration link). The stall is
charged to every member's SLO budget in the admission test (the round robin waits on it), and
the re-pin is made only when the saving per period over the members' remaining periods (the
fewest any member has left) pays at least `margin` times what the group costs during the stall
(the regroup hysteresis).

A member that cannot take elastic rollout is never narrowed (no node it holds is dropped), and
one that cannot be moved is never re-pinned (`JobSpec.cannot`).

A node is dropped only while idle (no phase, no migrated tail, no init waiting on it),
so no running rollout loses a node; a member pinned on it then is not rolling out, and its next
rollout permit covers the nodes it keeps. The controller renumbers the rest (as after `shrink`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass

from rollmux.core.config import IntraConfig
from rollmux.core.elastic import allowed_factor
from rollmux.core.group import Group, Member, residency_ok
from rollmux.core.intra_group import group_planning_times, node_loads, plan_group, t_cycle, t_load
from rollmux.core.placement.admission import group_fits, period_budget
from rollmux.core.placement.costs import group_cost_per_period
from rollmux.core.repair.moves import repin_seconds
from rollmux.core.spec import ClusterSpec
from rollmux.core.vocabulary import Mode


@dataclass(frozen=True)
class Repin:
    """Re-pinning allowed: a re-pin must pay `margin` times its stall's cost; `scale` stretches
    the stall (as it does every migration). Both come from the configuration's `regroup`
    section (`regroup.margin`, `regroup.migration_scale`), which owns their defaults."""

    margin: float
    scale: float


def narrowed(group: Group, drop: int, cluster: ClusterSpec, repin: bool = False) -> Group | None:
    """`group` without rollout node `drop` (the rest renumbered), each member pinned there
    narrowed onto its other nodes at the elastic factor of its new count, or (`repin`) a
    member holding that node alone re-pinned (module docstring); None when such a member may
    not be re-pinned (or cannot be moved) or a count leaves the elastic range (or the member
    cannot take elastic rollout: `allowed_factor`) (unplanned)."""
    rest = [n for n in range(group.n_rollout) if n != drop]
    remap = {old: new for new, old in enumerate(rest)}
    pinned = Counter(n for m in group.members for n in m.rollout_nodes if n != drop)
    members = []
    for m in group.members:
        nodes = m.rollout_nodes
        factor = m.rollout_factor
        if drop in nodes:
            nodes = tuple(n for n in nodes if n != drop)
            if nodes:
                factor = allowed_factor(m.job, cluster, len(nodes))
            elif repin and rest and m.job.can(Mode.MOVE):
                target = min(rest, key=lambda n: (pinned[n], n))
                pinned[target] += 1
                nodes = (target,)
            else:
                factor = None
            if factor is None:
                return None
        members.append(Member(m.job, tuple(remap[n] for n in nodes), m.train_nodes, factor))
    return Group(group.group_id, group.n_rollout - 1, group.n_train, tuple(members))


def repinned(group: Group, drop: int) -> list[str]:
    """The members of `group` a compaction dropping `drop` re-pins: those holding only it."""
    return [m.job_id for m in group.members if m.rollout_nodes == (drop,)]


def drop_order(group: Group, cfg: IntraConfig, idle: Container[int]) -> list[int]:
    """The idle rollout nodes a compaction may drop, least planned load first (the narrowing
    that slows its members least is tried first)."""
    times = group_planning_times(group.members, cfg)
    loads = node_loads(group.members, group.n_rollout, group.n_train, times)[0]
    return sorted((n for n in range(group.n_rollout) if n in idle), key=lambda n: (loads[n], n))


def compact(group: Group, cluster: ClusterSpec, cfg: IntraConfig, progress: Mapping[str, tuple[int, float]],
            idle: Container[int], repin: Repin | None = None) -> tuple[Group, int] | None:
    """The planned group with one idle rollout node fewer that still meets every member's SLO
    budget, and the node it drops (an index of `group`); None if no node can go."""
    if group.n_rollout < 2:
        return None
    before = group_cost_per_period(group, cluster)
    for drop in drop_order(group, cfg, idle):
        cand = narrowed(group, drop, cluster, repin is not None)
        if cand is None or not residency_ok(cand, cluster):
            continue
        stalls = _stalls(group, drop, cluster, repin)
        charged = _charged(progress, stalls) if stalls else progress
        least_budget = min(period_budget(m.job, charged) for m in group.members)
        if not _may_pay(cand, cluster, cfg, before, least_budget):
            continue
        cand = plan_group(cand, cfg, reorder=False)  # (the turn order stays: no transient)
        after = group_cost_per_period(cand, cluster)
        if after < before and _repays(group, cand, before - after, stalls, progress, cluster, repin) \
                and group_fits(cand, charged, cfg):
            return cand, drop
    return None


def _stalls(group: Group, drop: int, cluster: ClusterSpec, repin: Repin | None) -> dict[str, float]:
    """What each member owes the cold starts of the members a compaction dropping `drop`
    re-pins: all of them, to every member (a cold start holds its new node, and the round
    robin waits on it)."""
    if repin is None:
        return {}
    moved = set(repinned(group, drop))
    stall = sum(repin_seconds(m.job, cluster, repin.scale) for m in group.members if m.job_id in moved)
    return {m.job_id: stall for m in group.members} if stall > 0 else {}


def _charged(progress: Mapping[str, tuple[int, float]], stalls: Mapping[str, float]) -> dict[str, tuple[int, float]]:
    """The members' progress with their stalls added to the time they have spent."""
    return {j: (progress.get(j, (0, 0.0))[0], progress.get(j, (0, 0.0))[1] + s) for j, s in stalls.items()}


def _repays(group: Group, cand: Group, saving: float, stalls: Mapping[str, float],
            progress: Mapping[str, tuple[int, float]], cluster: ClusterSpec, repin: Repin | None) -> bool:
    """No re-pin, or its saving per period over the fewest periods a member has left pays
    `margin` times the group's cost over the longest stall."""
    if not stalls or repin is None:
        return True
    periods = min(max(m.job.iterations - progress.get(m.job_id, (0, 0.0))[0], 0) for m in group.members)
    return saving * periods >= repin.margin * cand.cost_per_hour(cluster) * max(stalls.values()) / 3600


def _may_pay(cand: Group, cluster: ClusterSpec, cfg: IntraConfig, before: float, least_budget: float) -> bool:
    """A closed-form necessary check before the planned one (a sampled schedule under the mean
    plan): the period is at least max(T_cycle, T_load) at the planning times (the schedule is
    monotone and convex in its durations, so its sampled mean is too), so that bound must cost
    less per period than the group now and, in round robin, fit the tightest member's budget."""
    times = group_planning_times(cand.members, cfg)
    bound = max(t_cycle(cand.members, times), t_load(cand.members, cand.n_rollout, cand.n_train, times,
                                                      cfg.warm_switch_s))
    if cand.cost_per_hour(cluster) * bound / 3600 >= before:
        return False
    return cfg.order != "rr" or bound <= least_budget * (1 + 1e-9)


def compactions(group: Group, cluster: ClusterSpec, cfg: IntraConfig, progress: Mapping[str, tuple[int, float]],
                idle: set[int], repin: Repin | None = None) -> Iterator[tuple[Group, int]]:
    """Successive compactions of `group` (each from the previous one's group), while a node
    can go: (group after, dropped node as an index of the group before)."""
    while True:
        step = compact(group, cluster, cfg, progress, idle, repin)
        if step is None:
            return
        group, drop = step
        idle = {n - (n > drop) for n in idle if n != drop}
        yield step
