"""Beyond the paper: an arrival founds a group with a co-located job (co-located pairing).

With narrowed co-location most arrivals run co-located (core/colocate.py): alone, each job's
own H800 nodes cost less per iteration than a group of its own. But two co-located jobs
whose phases interleave cost less together in one group (an H20 set and an H800 set, each
job rolling out while the other trains) than on two H800 sets. A group never forms that
way: an arrival that goes co-located seeds no group, and a co-located job moves only into a
group that exists (`colo_regroup`, core/regroup.py).

So when an arrival B would run co-located, placement also prices founding a group of its
own with a running co-located job A pulled in: B gets a new group now (`Case.PAIRED`) and A
migrates into it at its next iteration boundary, planned and charged by the departure-time
regrouping's own rules (core/regroup.py `dissolve_decision`: A's SLO budget owes the wait
and the migration, which is priced). Per iteration at the planning estimate, with A's and
B's remaining iterations a and b, n = min(a, b) of them shared:

    before = a x colo(A) + b x colo(B)
    after  = n x pair + (a - n) x alone(A) + (b - n) x alone(B)

where pair is the two-member group's cost per period and alone(X) the cost per iteration of
X in a group of its own: whoever outlives the other is assumed alone for the rest of its
run (conservative: later arrivals and regrouping may fill the group). The pairing is taken
when before - after exceeds `margin` times the migration's cost; among the PAIR_TRIES
co-located jobs that would save most on their own nodes (those the policy's cheap check says
could join B's group), the one that saves most. benchmarks/pairing.py measures it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rollmux.core.colocate import iteration_cost
from rollmux.core.group import Group
from rollmux.core.marginal import group_cost_per_period
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.regroup import Regroup, _with_plan, alone_cost, colocated_stake, dissolve_decision
from rollmux.core.spec import JobSpec

# Co-located jobs an arrival prices a pairing with, at most (each a placement search).
PAIR_TRIES = 8


@dataclass(frozen=True)
class Pairing:
    """An arrival's group founded with a co-located job: `plan` places the arrival in a new
    group (`Case.PAIRED`); `regroup` moves the co-located job into it (its slot reserved)."""

    plan: PlacementPlan
    regroup: Regroup
    saving_usd: float


def pair_saving(a: JobSpec, b: JobSpec, left_a: int, costs: Mapping[str, float]) -> float:
    """$ the pairing saves over both jobs' remaining iterations (module docstring); `costs`:
    per iteration, "colo_a", "colo_b", "alone_a", "alone_b", and "pair" per shared period."""
    left_b = b.iterations
    n = min(left_a, left_b)
    before = left_a * costs["colo_a"] + left_b * costs["colo_b"]
    after = n * costs["pair"] + (left_a - n) * costs["alone_a"] + (left_b - n) * costs["alone_b"]
    return before - after


def pair_decision(job: JobSpec, colo: PlacementPlan, view: ClusterView, colocated: Sequence[Group],
                  policy: PlacementPolicy, scale: float, margin: float) -> Pairing | None:
    """The best pairing of the arrival `job` (whose plan is the co-located `colo`) with one of
    the running co-located jobs `colocated` (none moving), or None when none pays for itself
    `margin` times over (module docstring). `scale` stretches migrations (SchedulerConfig)."""
    cfg = policy.cfg
    own = alone_cost(job, view, cfg)
    if own is None or not colocated:
        return None
    seed = PlacementPlan(job.job_id, Case.PAIRED, own.group, own.added_rollout_nodes, own.added_train_nodes,
                         own.delta_cost_per_hour)
    # Only B's new group is offered: A moves there or nowhere.
    room = replace(_with_plan(view, seed), groups=(seed.group,), index=None)
    can = policy.join_matrix((seed.group,), [g.members[0].job for g in colocated], room)[:, 0]
    fits = sorted((g for g, ok in zip(colocated, can) if ok), key=lambda g: -colocated_stake(g, view.progress, view.cluster))
    best: Pairing | None = None
    for g in fits[:PAIR_TRIES]:
        d = dissolve_decision(g, room, policy, scale, margin)
        if d is None:
            continue
        a = g.members[0].job
        alone_a = alone_cost(a, view, cfg)
        if alone_a is None:
            continue
        left_a = max(a.iterations - view.progress.get(a.job_id, (0, 0.0))[0], 0)
        costs = {"colo_a": group_cost_per_period(g, view.cluster), "colo_b": iteration_cost(colo),
                 "alone_a": iteration_cost(alone_a), "alone_b": iteration_cost(own),
                 "pair": group_cost_per_period(d.moves[0].plan.group, view.cluster)}
        saving = pair_saving(a, job, left_a, costs) - margin * d.cost_usd
        if saving > 0 and (best is None or saving > best.saving_usd):
            best = Pairing(seed, d, saving)
    return best
