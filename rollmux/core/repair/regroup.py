"""Beyond the paper (DESIGN §5a): shrinking and dissolving groups when members leave.

The paper's groups are static: a group keeps every node until its last member
leaves. On heavy-tailed job lengths that wastes much of the gain, so two
departure-time repairs are offered (both pure functions over frozen groups):

* **shrink** — release rollout nodes no member is pinned to any more, and
  training nodes beyond what the remaining members need;
* **re-placement** — if every remaining member of a group can be placed in
  another existing group (by the same placement policy, its SLO budget charged
  with the wait for its iteration boundary and its migration time,
  core/repair/moves.py) and the saving over the members' expected remaining
  lifetime exceeds `margin` times what the migrations cost in node-hours, the
  group is dissolved (`dissolve_decision`). A co-located job's own placement is
  dissolved the same way (`colocation.regroup`): it moves into a group when that
  saves per iteration (`colocated_saving`).

Evidence: docs/decisions/regroup.md, docs/decisions/colocation-regroup.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from rollmux.core.colo_model import is_colocated
from rollmux.core.config import IntraConfig
from rollmux.core.group import Group, Member
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.placement.costs import (
    FoldTerms,
    after_partners,
    fold_terms_for,
    group_cost_per_period,
    iteration_cost,
    plan_added_cost,
)
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.repair.moves import Regroup, migration_seconds, migration_usd, plan_moves, slice_rate
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode


def shrink(group: Group) -> tuple[Group, dict[int, int], int, int]:
    """Drop unpinned rollout nodes and surplus training nodes.

    Returns the shrunk group (same order, no shape), the map old -> new rollout
    node index of kept nodes, and how many rollout and training nodes were freed.
    """
    used = sorted({n for m in group.members for n in m.rollout_nodes})
    remap = {old: new for new, old in enumerate(used)}
    n_train = max((len(m.train_nodes) for m in group.members), default=0)
    members = tuple(Member(m.job, tuple(remap[n] for n in m.rollout_nodes), m.train_nodes, m.rollout_factor)
                    for m in group.members)
    shrunk = Group(group.group_id, len(used), n_train, members)
    return shrunk, remap, group.n_rollout - len(used), group.n_train - n_train


def remaining_s(job: JobSpec, progress: Mapping[str, tuple[int, float]]) -> float:
    """Expected seconds the job still runs: its remaining iterations at its mean so far, and
    at least at its profile's solo pace (a few iterations measured faster than the profile
    are no forecast; sharing only slows a job down)."""
    done, elapsed = progress.get(job.job_id, (0, 0.0))
    per_iter = max(elapsed / done, job.solo_iter_s) if done > 0 else job.solo_iter_s
    return max(job.iterations - done, 0) * per_iter


def colocated_stake(group: Group, progress: Mapping[str, tuple[int, float]], cluster: ClusterSpec) -> float:
    """$ a co-located job's own nodes cost over its remaining iterations, at its planned
    co-located iteration time: what moving it into a group could save at most."""
    job = group.members[0].job
    left = max(job.iterations - progress.get(job.job_id, (0, 0.0))[0], 0)
    return left * group_cost_per_period(group, cluster)


def colocated_saving(group: Group, plan: PlacementPlan, view: ClusterView, cfg: IntraConfig,
                     fold: FoldTerms | None = None) -> float:
    """$ a co-located job saves over its remaining iterations by running in `plan`'s group
    instead: what its own nodes cost per co-located iteration less what the join adds per
    iteration, the members' stretch included (core/placement/costs.py), while the group's other
    members still run; once the last of them has left (in as many of its iterations as they
    have left), it pays for a group of its own per iteration (its `isolated_plan`; conservative: the
    group may be filled again), or with `fold` (`colocation.fold`, core/repair/fold.py) it folds
    back to co-location when that pays. Its $/h alone would not do: a co-located iteration is
    faster than a shared one, so the job lives longer in a group."""
    job = group.members[0].job
    progress = view.progress
    left = max(job.iterations - progress.get(job.job_id, (0, 0.0))[0], 0)
    life = max((max(m.job.iterations - progress.get(m.job_id, (0, 0.0))[0], 0)
                for m in plan.group.members if m.job_id != job.job_id), default=0)
    shared = min(left, life)
    colo = group_cost_per_period(group, view.cluster)
    saving = left * colo - shared * plan_added_cost(plan, view)
    if shared < left:
        alone = isolated_plan(job, view, cfg)
        if alone is None:
            return -math.inf
        move = 0.0 if fold is None else migration_usd(job, view.cluster, fold.scale)
        saving -= after_partners(left - shared, iteration_cost(alone), colo, move, fold_terms_for(job, fold))
    return saving


def dissolve_decision(group: Group, view: ClusterView, policy: PlacementPolicy, scale: float,
                      margin: float, fold: FoldTerms | None = None) -> Regroup | None:
    """Dissolve `group` (absent from `view`) when re-placing its members saves more than
    `margin` times what their migrations cost; None otherwise.

    Saving: the group's rate minus the rate the moves add, over the time until its first
    member would have left anyway, less the wait for the movers' boundaries and migrations
    (conservative: after that the old group could have shrunk). Cost: each migration holds a
    job-sized slice of both pools for its migration time. `margin` > 1 is the hysteresis
    that keeps groups from churning on small savings. `fold`: a co-located mover left alone
    later may fold back (`colocated_saving`). A group with a member that cannot be moved
    (`JobSpec.cannot`) is never dissolved."""
    if any(not m.job.can(Mode.MOVE) for m in group.members):
        return None
    cluster = view.cluster
    charges = {m.job_id: migration_seconds(m.job, cluster, scale) for m in group.members}
    wait_s = group.shape.period_s if group.shape is not None else 0.0
    horizon = min(remaining_s(m.job, view.progress) for m in group.members)
    horizon -= wait_s + max(charges.values())
    cost = sum(charges[m.job_id] * slice_rate(m.job, cluster) for m in group.members) / 3600
    most = group.cost_per_hour(cluster) * max(horizon, 0.0) / 3600
    if most <= margin * cost or most <= 0:
        return None  # not worth it even if the moves added nothing: no need to plan them
    planned = plan_moves(group.members, group.group_id, view, policy, charges, wait_s)
    if planned is None:
        return None
    moves, added = planned
    saving = (group.cost_per_hour(cluster) - added) * max(horizon, 0.0) / 3600
    if is_colocated(group):  # priced per iteration, as it was placed
        saving = min(saving, colocated_saving(group, moves[0].plan, view, policy.cfg, fold))
    if saving <= margin * cost or saving <= 0:
        return None
    return Regroup(group.group_id, tuple(moves), True, saving, cost)
