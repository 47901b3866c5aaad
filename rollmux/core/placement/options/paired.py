"""The paired option (beyond the paper, DESIGN §5a): an arrival founds a group with a co-located job that moves in.

With narrowed co-location most arrivals run co-located (placement/options/colocated.py):
alone, each job's own H800 nodes cost less per iteration than a group of its own. But two
co-located jobs whose phases interleave cost less together in one group (an H20 set and an
H800 set, each job rolling out while the other trains) than on two H800 sets. A group never
forms that way: an arrival that goes co-located seeds no group, and a co-located job moves
only into a group that exists (`colocation.regroup`, core/repair/regroup.py).

So when an arrival B would run co-located (with folding, also when it would found a group of
its own: colo(B) below is then that group's cost), its placement also prices founding a group of its
own with a running co-located job A pulled in: B gets a new group now (`Case.PAIRED`, its
`paired_seed`) and A migrates into it at its next iteration boundary. This module is the
arrival side: the seed, the view in which only B's group is offered (`pair_room`), the
co-located jobs worth pricing (`pair_candidates`) and the pair's prices. The mover side, A's
priced migration and the decision, is core/repair/pairing.py. Per iteration at the planning
estimate, with A's and B's remaining iterations a and b, n = min(a, b) of them shared:

    before = a x colo(A) + b x colo(B)
    after  = n x pair + (a - n) x alone(A) + (b - n) x alone(B)

where pair is the two-member group's cost per period and alone(X) the cost per iteration of
X in a group of its own: whoever outlives the other is assumed alone for the rest of its
run (conservative: later arrivals and regrouping may fill the group), or, with
`colocation.fold`, back in co-location for its colo(X) and one more migration when that
pays (core/repair/fold.py).
Evidence: docs/decisions/colocation-pair.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Callable

import numpy as np

from rollmux.core.config import IntraConfig
from rollmux.core.elastic import least_share, nonscaling_share
from rollmux.core.group import Group
from rollmux.core.intra_group import job_planning_times
from rollmux.core.placement.costs import FoldTerms, after_partners, fold_terms_for, group_cost_per_period
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan, with_plan
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode

# Co-located jobs an arrival prices a pairing with, at most (each a placement search).
PAIR_TRIES = 8


def pair_saving(a: JobSpec, b: JobSpec, left_a: int, costs: Mapping[str, float],
                fold: FoldTerms | None = None) -> float:
    """$ the pairing saves over both jobs' remaining iterations (module docstring); `costs`:
    per iteration, "colo_a", "colo_b", "alone_a", "alone_b", and "pair" per shared period.
    With `fold` (`colocation.fold`), whoever outlives the other folds back to co-location when
    that pays (core/repair/fold.py), for its move's price ("move_a", "move_b"), unless it cannot
    run co-located or be moved (`fold_terms_for`)."""
    left_b = b.iterations
    n = min(left_a, left_b)
    before = left_a * costs["colo_a"] + left_b * costs["colo_b"]
    after = n * costs["pair"]
    for x, job, left in (("a", a, left_a - n), ("b", b, left_b - n)):
        after += after_partners(left, costs[f"alone_{x}"], costs[f"colo_{x}"], costs.get(f"move_{x}", 0.0),
                                fold_terms_for(job, fold))
    return before - after


def least_busy(job: JobSpec, cfg: IntraConfig, cluster: ClusterSpec) -> float:
    """A lower bound on the $ one iteration of the job keeps its nodes busy in any group: its
    nominal training nodes for its planned training, and its rollout's node-seconds on any
    count of rollout nodes (elastic: `nodes` x rollout x (c + (1 - c) x nominal / nodes) >=
    (1 - c) x nominal x rollout, core/elastic.py; nominal x rollout for a job that cannot take
    elastic rollout)."""
    pt, pools = job_planning_times(job, cfg), cluster.pools
    share = 1 - nonscaling_share(job) if job.can(Mode.ELASTIC_ROLLOUT) else 1.0
    rollout = share * pools.rollout.nodes_for(job.rollout_gpus) * pt.rollout
    return (rollout * pools.rollout.node_price_per_hour
            + pt.train * pools.train.nodes_for(job.train_gpus) * pools.train.node_price_per_hour) / 3600


def least_cycle(job: JobSpec, cfg: IntraConfig) -> float:
    """A lower bound on the job's planned cycle in any group: its rollout on as many engines as
    elastic rollout could give it (only its non-scaling share left, core/elastic.py; all of it
    for a job that cannot take elastic rollout), then its training and sync."""
    pt = job_planning_times(job, cfg)
    return least_share(job) * pt.rollout + pt.train + pt.sync


def paired_seed(own: PlacementPlan) -> PlacementPlan:
    """The arrival's plan when it pairs: its own nominal group (`own`, its isolated plan), as
    `Case.PAIRED`."""
    return PlacementPlan(own.job_id, Case.PAIRED, own.group, own.added_rollout_nodes, own.added_train_nodes,
                         own.delta_cost_per_hour)


def pair_room(view: ClusterView, seed: PlacementPlan) -> ClusterView:
    """The view a co-located job's move is planned in: after the seed, with only the seed's
    new group offered (A moves there or nowhere)."""
    return replace(with_plan(view, seed), groups=(seed.group,), index=None)


def pair_candidates(seed: PlacementPlan, room: ClusterView, colocated: Sequence[Group],
                    join_matrix: Callable[..., np.ndarray], progress: Mapping[str, tuple[int, float]],
                    cluster: ClusterSpec) -> list[tuple[Group, int, float]]:
    """The co-located placements worth pricing a pairing with, as (placement, A's remaining
    iterations, its cost per co-located iteration): of those that can be moved (`JobSpec.cannot`)
    and that the policy's cheap check (`join_matrix`, placement/joinable.py) says could join the
    seed's group, the PAIR_TRIES whose own nodes would cost most over their remaining iterations."""
    colocated = [g for g in colocated if g.members[0].job.can(Mode.MOVE)]  # (a job that cannot move stays)
    can = join_matrix((seed.group,), [g.members[0].job for g in colocated], room)[:, 0]
    tries = []
    for g in (g for g, ok in zip(colocated, can) if ok):
        a = g.members[0].job
        left_a = max(a.iterations - progress.get(a.job_id, (0, 0.0))[0], 0)
        tries.append((g, left_a, group_cost_per_period(g, cluster)))
    return sorted(tries, key=lambda c: -c[1] * c[2])[:PAIR_TRIES]
