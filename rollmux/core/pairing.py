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
co-located jobs that would save most on their own nodes (of those the policy's cheap check
says could join B's group), the one that saves most; a candidate whose `saving_bound` cannot
beat the best found is not planned. benchmarks/pairing.py measures it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from rollmux.core.colocate import iteration_cost
from rollmux.core.elastic import nonscaling_share
from rollmux.core.group import Group
from rollmux.core.inter_group import isolated_plan
from rollmux.core.intra_group import job_planning_times
from rollmux.core.config import IntraConfig
from rollmux.core.marginal import group_cost_per_period
from rollmux.core.placement import Case, ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.regroup import Regroup, _with_plan, dissolve_decision, migration_seconds, slice_rate
from rollmux.core.spec import ClusterSpec, JobSpec

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


def least_busy(job: JobSpec, cfg: IntraConfig, cluster: ClusterSpec) -> float:
    """A lower bound on the $ one iteration of the job keeps its nodes busy in any group: its
    nominal training nodes for its planned training, and its rollout's node-seconds on any
    count of rollout nodes (elastic: `nodes` x rollout x (c + (1 - c) x nominal / nodes) >=
    (1 - c) x nominal x rollout, core/elastic.py)."""
    pt, pools = job_planning_times(job, cfg), cluster.pools
    rollout = (1 - nonscaling_share(job)) * pools.rollout.nodes_for(job.rollout_gpus) * pt.rollout
    return (rollout * pools.rollout.node_price_per_hour
            + pt.train * pools.train.nodes_for(job.train_gpus) * pools.train.node_price_per_hour) / 3600


def least_cycle(job: JobSpec, cfg: IntraConfig) -> float:
    """A lower bound on the job's planned cycle in any group: its rollout on as many engines as
    elastic rollout could give it (only its non-scaling share left, core/elastic.py), then its
    training and sync."""
    pt = job_planning_times(job, cfg)
    return nonscaling_share(job) * pt.rollout + pt.train + pt.sync


def saving_bound(a: JobSpec, left_a: int, colo_a: float, b: JobSpec, b_least: tuple[float, float, float],
                 colo_b: float, alone_b: PlacementPlan, cfg: IntraConfig, cluster: ClusterSpec, scale: float,
                 margin: float) -> float:
    """An upper bound on the pairing's saving without planning the pair (`b_least`: B's planned
    training, `least_cycle` and `least_busy`). Per period the pair's group costs at least both
    members' `least_busy`, and holds at least B's nodes for a period at least both trainings
    (they share its training node) and each member's least cycle; A alone holds its nominal
    nodes for at least its planned cycle per iteration; A's migration holds its slice of both
    pools for its migration time, as `dissolve_decision` prices it."""
    pt = job_planning_times(a, cfg)
    period = max(pt.train + b_least[0], least_cycle(a, cfg), b_least[1])
    rate_a = slice_rate(a, cluster)
    costs = {"colo_a": colo_a, "colo_b": colo_b, "alone_b": iteration_cost(alone_b),
             "alone_a": rate_a * (pt.rollout + pt.train + pt.sync) / 3600,
             "pair": max(alone_b.group.cost_per_hour(cluster) * period / 3600,
                         least_busy(a, cfg, cluster) + b_least[2])}
    return pair_saving(a, b, left_a, costs) - margin * migration_seconds(a, cluster, scale) * rate_a / 3600


def pair_decision(job: JobSpec, colo: PlacementPlan, view: ClusterView, colocated: Sequence[Group],
                  policy: PlacementPolicy, scale: float, margin: float) -> Pairing | None:
    """The best pairing of the arrival `job` (whose plan is the co-located `colo`) with one of
    the running co-located jobs `colocated` (none moving), or None when none pays for itself
    `margin` times over (module docstring). `scale` stretches migrations (SchedulerConfig).

    Of the PAIR_TRIES candidates, only those whose `saving_bound` could beat the best pairing
    found (or 0) are planned (a placement search each), best bound first."""
    cfg, cluster, progress = policy.cfg, view.cluster, view.progress
    own = isolated_plan(job, view, cfg)
    if own is None or not colocated:
        return None
    b_least = (job_planning_times(job, cfg).train, least_cycle(job, cfg), least_busy(job, cfg, cluster))
    colo_b = iteration_cost(colo)
    seed = PlacementPlan(job.job_id, Case.PAIRED, own.group, own.added_rollout_nodes, own.added_train_nodes,
                         own.delta_cost_per_hour)
    # Only B's new group is offered: A moves there or nowhere.
    room = replace(_with_plan(view, seed), groups=(seed.group,), index=None)
    can = policy.join_matrix((seed.group,), [g.members[0].job for g in colocated], room)[:, 0]
    # The PAIR_TRIES that would save most on their own nodes (`colocated_stake`).
    tries = []
    for g in (g for g, ok in zip(colocated, can) if ok):
        a = g.members[0].job
        left_a = max(a.iterations - progress.get(a.job_id, (0, 0.0))[0], 0)
        tries.append((g, left_a, group_cost_per_period(g, cluster)))
    tries = sorted(tries, key=lambda c: -c[1] * c[2])[:PAIR_TRIES]
    bounds = [saving_bound(g.members[0].job, left_a, colo_a, job, b_least, colo_b, own, cfg, cluster, scale, margin)
              for g, left_a, colo_a in tries]
    best: Pairing | None = None
    for (g, left_a, colo_a), bound in sorted(zip(tries, bounds), key=lambda c: -c[1]):
        if bound <= (0.0 if best is None else best.saving_usd):
            break
        d = dissolve_decision(g, room, policy, scale, margin)
        alone_a = None if d is None else isolated_plan(g.members[0].job, view, cfg)
        if alone_a is None:
            continue
        costs = {"colo_a": colo_a, "colo_b": colo_b, "alone_a": iteration_cost(alone_a),
                 "alone_b": iteration_cost(own), "pair": group_cost_per_period(d.moves[0].plan.group, cluster)}
        saving = pair_saving(g.members[0].job, job, left_a, costs) - margin * d.cost_usd
        if saving > 0 and (best is None or saving > best.saving_usd):
            best = Pairing(seed, d, saving)
    return best
