"""Co-located pairing, the mover side (beyond the paper, DESIGN §5a): a co-located job moves into a new group.

When an arrival B would run co-located, the executor (core/state/) asks
`pair_decision` whether B should found a group of its own instead with a running co-located
job A pulled in. The arrival side, B's seed group, the view A's move is planned in, the
candidates and the pair's prices, is core/placement/options/paired.py. This side plans and
charges A's move by the departure-time regrouping's own rules (core/repair/regroup.py
`dissolve_decision`: A's SLO budget owes the wait and the migration, which is priced) and
takes the pairing when it saves more than `margin` times the migration's cost: among the
candidates, the one that saves most; a candidate whose `saving_bound` cannot beat the best
found is not planned.

With folding (`colocation.fold`, core/repair/fold.py) an arrival placed in a new group of its
own (isolated) is asked too (colo(B) is then its own group's cost), and each pairing's first
mover may be joined by a second (`trios`): two rollout-heavy jobs may cost more paired than
co-located, and less three to a group. A trio is priced member by member as they leave
(`founding_saving`). Evidence: docs/decisions/colocation-pair.md, colocation-fold.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import job_planning_times, plan_group
from rollmux.core.placement import ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.placement.costs import (
    FoldTerms,
    after_partners,
    fold_terms_for,
    group_cost_per_period,
    iteration_cost,
)
from rollmux.core.placement.model import with_plan
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.options.paired import (
    least_busy,
    least_cycle,
    pair_candidates,
    pair_room,
    pair_saving,
    paired_seed,
)
from rollmux.core.repair.moves import Move, OwedProgress, Regroup, migration_usd, slice_rate
from rollmux.core.repair.regroup import dissolve_decision, shrink
from rollmux.core.spec import ClusterSpec, JobSpec

# With folding, an arrival also prices founding a group with two co-located jobs: the first
# movers of this many pairings, each with the second of this many candidates.
TRIO_FIRSTS = 3
TRIO_SECONDS = 4


@dataclass(frozen=True)
class Pairing:
    """An arrival's group founded with co-located jobs: `plan` places the arrival in a new
    group (`Case.PAIRED`); each of `regroups` moves one co-located job into it (its slot
    reserved), in order."""

    plan: PlacementPlan
    regroups: tuple[Regroup, ...]
    saving_usd: float


def saving_bound(a: JobSpec, left_a: int, colo_a: float, b: JobSpec, b_least: tuple[float, float, float],
                 colo_b: float, alone_b: PlacementPlan, cfg: IntraConfig, cluster: ClusterSpec, scale: float,
                 margin: float, fold: FoldTerms | None = None) -> float:
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
    return pair_saving(a, b, left_a, costs, fold) - margin * costs["move_a"]


def pair_decision(job: JobSpec, colo: PlacementPlan, view: ClusterView, colocated: Sequence[Group],
                  policy: PlacementPolicy, scale: float, margin: float,
                  fold: FoldTerms | None = None) -> Pairing | None:
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
    firsts: list[tuple[Group, int, float, Regroup]] = []  # planned first movers, for a trio
    move_b = migration_usd(job, cluster, scale)
    for (g, left_a, colo_a), bound in sorted(zip(tries, bounds), key=lambda c: -c[1]):
        low = bound <= (0.0 if best is None else best.saving_usd)
        if low and (not fold or len(firsts) >= TRIO_FIRSTS):
            break
        d = dissolve_decision(g, room, policy, scale, margin, fold)
        alone_a = None if d is None else isolated_plan(g.members[0].job, view, cfg)
        if alone_a is None:
            continue
        firsts.append((g, left_a, colo_a, d))
        if low:
            continue  # (planned for a trio only)
        costs = {"colo_a": colo_a, "colo_b": colo_b, "alone_a": iteration_cost(alone_a),
                 "alone_b": iteration_cost(own), "pair": group_cost_per_period(d.moves[0].plan.group, cluster),
                 "move_a": migration_usd(g.members[0].job, cluster, scale), "move_b": move_b}
        saving = pair_saving(g.members[0].job, job, left_a, costs, fold) - margin * d.cost_usd
        if saving > 0 and (best is None or saving > best.saving_usd):
            best = Pairing(seed, (d,), saving)
    if fold is not None:
        for trio in trios(job, colo_b, own, seed, room, firsts[:TRIO_FIRSTS], tries, view, policy, scale, margin,
                          fold):
            if best is None or trio.saving_usd > best.saving_usd:
                best = trio
    return best


def trios(job: JobSpec, colo_b: float, own: PlacementPlan, seed: PlacementPlan, room: ClusterView,
          firsts: Sequence[tuple[Group, int, float, Regroup]], tries: Sequence[tuple[Group, int, float]],
          view: ClusterView, policy: PlacementPolicy, scale: float, margin: float,
          fold: FoldTerms) -> list[Pairing]:
    """The arrival's group founded with two co-located jobs, each pairing's first mover
    (`firsts`, planned into the seed group in `room`) joined by a second from `tries`, where
    that saves more than `margin` times both migrations (`founding_saving`, members folding
    back when left alone). Two jobs whose phases leave a group idle half the time (rollout-heavy
    ones, say) may cost more paired than co-located, and less three to a group."""
    cfg, cluster = policy.cfg, view.cluster
    alone: dict[int, float | None] = {}  # co-located placement -> its job's $ per iteration in a group of its own

    def alone_cost(g: Group) -> float | None:
        if g.group_id not in alone:
            plan = isolated_plan(g.members[0].job, view, cfg)
            alone[g.group_id] = None if plan is None else iteration_cost(plan)
        return alone[g.group_id]

    out = []
    for g1, left_1, colo_1, d1 in firsts:
        mv1 = d1.moves[0]
        room2 = _after_move(room, mv1, g1)
        for g2, left_2, colo_2 in tries[:TRIO_SECONDS + 1]:
            if g2.group_id == g1.group_id:
                continue
            d2 = dissolve_decision(g2, room2, policy, scale, margin, fold)
            if d2 is None or alone_cost(g1) is None or alone_cost(g2) is None:
                continue
            members = [(job, job.iterations, colo_b, iteration_cost(own)),
                       (g1.members[0].job, left_1, colo_1, alone_cost(g1)),
                       (g2.members[0].job, left_2, colo_2, alone_cost(g2))]
            saving = (founding_saving(d2.moves[0].plan.group, members, cluster, cfg, fold)
                      - margin * (d1.cost_usd + d2.cost_usd))
            if saving > 0:
                out.append(Pairing(seed, (d1, d2), saving))
    return out


def _after_move(room: ClusterView, mv: Move, colo: Group) -> ClusterView:
    """`room` with the first mover's slot reserved: the seed group as its plan left it, its
    members owing the mover's migration, and the mover its wait and migration."""
    gid = mv.plan.group.group_id
    owed = {m.job_id: mv.migration_s for m in mv.plan.group.members if m.job_id != mv.job_id}
    owed[mv.job_id] = colo.shape.period_s + mv.migration_s if colo.shape is not None else mv.migration_s
    after = with_plan(room, mv.plan)
    return replace(after, groups=(mv.plan.group,), index=None, progress=OwedProgress(after.progress, owed),
                   owed_s={**after.owed_s, gid: after.owed_s.get(gid, 0.0) + mv.migration_s})


def founding_saving(group: Group, members: Sequence[tuple[JobSpec, int, float, float]], cluster: ClusterSpec,
                    cfg: IntraConfig, fold: FoldTerms) -> float:
    """$ a new group of co-located jobs saves over their remaining iterations: `members` as
    (job, iterations left, $ per co-located iteration, $ per iteration alone in a group).
    Before: each co-located. After: one period of `group` per iteration while all run; as
    each leaves (fewest left first) the group shrinks and is re-planned as the executor does
    (core/state/cluster.py `leave`), and the last one pays `after_partners` (it may fold, unless
    it cannot run co-located or be moved: `fold_terms_for`)."""
    before = sum(left * colo for _, left, colo, _ in members)
    order = sorted(members, key=lambda m: m[1])
    after, done = 0.0, 0
    for i, (j, left, colo, alone) in enumerate(order):
        span = max(left - done, 0)
        if i == len(order) - 1:
            after += after_partners(span, alone, colo, migration_usd(j, cluster, fold.scale), fold_terms_for(j, fold))
            break
        after += span * group_cost_per_period(group, cluster)
        done = max(done, left)
        rest = Group(group.group_id, group.n_rollout, group.n_train,
                     tuple(m for m in group.members if m.job_id != j.job_id))
        group = plan_group(shrink(rest)[0], cfg, reorder=False)
    return before - after
