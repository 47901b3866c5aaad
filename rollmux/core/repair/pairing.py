"""Co-located pairing, the mover side (beyond the paper, DESIGN §5a): a co-located job moves into a new group.

When an arrival B would run co-located, the executor (core/state/) asks
`pair_decision` whether B should found a group of its own instead with a running co-located
job A pulled in. The arrival side, B's seed group, the view A's move is planned in, the
candidates and the pair's prices, is core/placement/options/paired.py. This side plans and
charges A's move by the departure-time regrouping's own rules (core/repair/regroup.py
`dissolve_decision`: A's SLO budget owes the wait and the migration, which is priced) and
takes the pairing when it saves more than `margin` times the migration's cost: among the
candidates, the one that saves most; a candidate whose `saving_bound` cannot beat the best
found is not planned. Evidence: docs/decisions/colocation-pair.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.placement.costs import group_cost_per_period, iteration_cost
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.options.paired import (
    least_busy,
    least_cycle,
    pair_candidates,
    pair_room,
    pair_saving,
    paired_seed,
)
from rollmux.core.repair.moves import Regroup, migration_seconds, migration_usd, slice_rate
from rollmux.core.repair.regroup import dissolve_decision
from rollmux.core.spec import ClusterSpec, JobSpec


@dataclass(frozen=True)
class Pairing:
    """An arrival's group founded with a co-located job: `plan` places the arrival in a new
    group (`Case.PAIRED`); `regroup` moves the co-located job into it (its slot reserved)."""

    plan: PlacementPlan
    regroup: Regroup
    saving_usd: float


def saving_bound(a: JobSpec, left_a: int, colo_a: float, b: JobSpec, b_least: tuple[float, float, float],
                 colo_b: float, alone_b: PlacementPlan, cfg: IntraConfig, cluster: ClusterSpec, scale: float,
                 margin: float, fold: bool = False) -> float:
    """An upper bound on the pairing's saving without planning the pair (`b_least`: B's planned
    training, `least_cycle` and `least_busy`). Per period the pair's group costs at least both
    members' `least_busy`, and holds at least B's nodes for a period at least both trainings
    (they share its training node) and each member's least cycle; A alone holds its nominal
    nodes for at least its planned cycle per iteration; A's migration holds its slice of both
    pools for its migration time, as `dissolve_decision` prices it. With `fold` the outliving
    member may fold back (`pair_saving`): a lower after-cost, still a bound."""
    pt = job_planning_times(a, cfg)
    period = max(pt.train + b_least[0], least_cycle(a, cfg), b_least[1])
    rate_a = slice_rate(a, cluster)
    costs = {"colo_a": colo_a, "colo_b": colo_b, "alone_b": iteration_cost(alone_b),
             "alone_a": rate_a * (pt.rollout + pt.train + pt.sync) / 3600,
             "pair": max(alone_b.group.cost_per_hour(cluster) * period / 3600,
                         least_busy(a, cfg, cluster) + b_least[2]),
             "move_a": migration_usd(a, cluster, scale), "move_b": migration_usd(b, cluster, scale)}
    return (pair_saving(a, b, left_a, costs, margin if fold else None)
            - margin * migration_seconds(a, cluster, scale) * rate_a / 3600)


def pair_decision(job: JobSpec, colo: PlacementPlan, view: ClusterView, colocated: Sequence[Group],
                  policy: PlacementPolicy, scale: float, margin: float, fold: bool = False) -> Pairing | None:
    """The best pairing of the arrival `job` (whose plan is the co-located `colo`) with one of
    the running co-located jobs `colocated` (none moving), or None when none pays for itself
    `margin` times over (module docstring). `scale` stretches migrations (SchedulerConfig);
    `fold`: a member left alone may fold back to co-location (core/repair/fold.py).

    Of the candidates (core/placement/options/paired.py `pair_candidates`), only those whose
    `saving_bound` could beat the best pairing found (or 0) are planned (a placement search
    each), best bound first."""
    cfg, cluster, progress = policy.cfg, view.cluster, view.progress
    own = isolated_plan(job, view, cfg)
    if own is None or not colocated:
        return None
    b_least = (job_planning_times(job, cfg).train, least_cycle(job, cfg), least_busy(job, cfg, cluster))
    colo_b = iteration_cost(colo)
    seed = paired_seed(own)
    room = pair_room(view, seed)
    tries = pair_candidates(seed, room, colocated, policy.join_matrix, progress, cluster)
    bounds = [saving_bound(g.members[0].job, left_a, colo_a, job, b_least, colo_b, own, cfg, cluster, scale, margin,
                           fold)
              for g, left_a, colo_a in tries]
    best: Pairing | None = None
    for (g, left_a, colo_a), bound in sorted(zip(tries, bounds), key=lambda c: -c[1]):
        if bound <= (0.0 if best is None else best.saving_usd):
            break
        d = dissolve_decision(g, room, policy, scale, margin, fold)
        alone_a = None if d is None else isolated_plan(g.members[0].job, view, cfg)
        if alone_a is None:
            continue
        costs = {"colo_a": colo_a, "colo_b": colo_b, "alone_a": iteration_cost(alone_a),
                 "alone_b": iteration_cost(own), "pair": group_cost_per_period(d.moves[0].plan.group, cluster),
                 "move_a": migration_usd(g.members[0].job, cluster, scale), "move_b": migration_usd(job, cluster, scale)}
        saving = pair_saving(g.members[0].job, job, left_a, costs, margin if fold else None) - margin * d.cost_usd
        if saving > 0 and (best is None or saving > best.saving_usd):
            best = Pairing(seed, d, saving)
    return best
