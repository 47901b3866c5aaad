"""What a placement costs (DESIGN §5, §5a), in $ per iteration of its job, at the planning estimate.

Algorithm 1 prices a join by Δ, the $/h of the nodes it adds: direct packing is free. Per
iteration of the job, a plan at Δ adds Δ x its planned iteration time (`iteration_cost`; a
new group's or a co-located job's Δ is its whole rate). The rules that choose by these costs
are placement/pricing.py's; the repair side prices moves and pairings with them too.

Stretch. A job that joins a group may lengthen its planned period, and every member then
holds the group's nodes longer for the same iterations. While they run together, each
meta-iteration gives one iteration of the newcomer and costs rate x period, so what the join
adds per newcomer iteration is

    rate_after x period_after - rate_before x period_before
      = Δ x period_after + rate_before x (period_after - period_before)

and a new group (or a co-located job) adds its whole rate x its planned period. All at the
same planning estimate, so the options compare like for like. What this does not price:
members leave at different times (the stretch lasts while both run), and a new group may
later host others (its option value).
Evidence: docs/decisions/stretch-pricing.md.
"""

from __future__ import annotations

from dataclasses import dataclass

from rollmux.core.group import Group
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.vocabulary import Mode

# Plans that change an existing group (the rest found a new one).
JOINED = (Case.DIRECT, Case.SCALING, Case.TRAIN_SCALING)


def group_cost_per_period(group: Group, cluster: ClusterSpec) -> float:
    """$ one planned meta-iteration of `group` costs: its rate x its planned period."""
    return group.cost_per_hour(cluster) * group.shape.period_s / 3600


def added_cost(plan: PlacementPlan, before: Group | None, cluster: ClusterSpec) -> float:
    """$ the plan adds per iteration of its job (module docstring); `before`: the group the
    plan changes as it is now (None for a plan that founds a group)."""
    after = group_cost_per_period(plan.group, cluster)
    return after if before is None else after - group_cost_per_period(before, cluster)


def plan_added_cost(plan: PlacementPlan, view: ClusterView) -> float:
    """`added_cost` with the changed group looked up in `view`."""
    before = view.group(plan.group.group_id) if plan.case in JOINED else None
    return added_cost(plan, before, view.cluster)


def iteration_cost(plan: PlacementPlan) -> float:
    """$ the plan adds per iteration of its job at Δ: its Δ ($/h) over the job's planned
    iteration time (the group's period; a new group's or a co-located job's Δ is its whole rate)."""
    return plan.delta_cost_per_hour * plan.group.shape.period_s / 3600


@dataclass(frozen=True)
class FoldTerms:
    """When a group's last member folds into co-location (core/repair/fold.py): the saving over
    its remaining iterations must beat `margin` x its move's price (`regroup.margin`), and
    co-located it must cost below `below` x what it costs alone in its group
    (`colocation.fold_below`: a lone member's group is also room that later arrivals may join
    for nothing, which a per-iteration saving does not price). `scale` stretches migrations."""

    margin: float
    below: float = 1.0
    scale: float = 1.0

    def folds(self, left: int, alone: float, colo: float, move_usd: float) -> bool:
        """Whether a last member with `left` iterations to go, costing `alone` per iteration in
        its group and `colo` co-located, folds for a move of `move_usd`."""
        saving = left * (alone - colo)
        return colo < self.below * alone and saving > 0 and saving > self.margin * move_usd


def fold_terms_for(job: JobSpec, fold: FoldTerms | None) -> FoldTerms | None:
    """`fold` where `job` may fold: a job that cannot run co-located or cannot be moved
    (`JobSpec.cannot`) never does, so its pricing must not assume it (None)."""
    if fold is None or not job.can(Mode.COLOCATE) or not job.can(Mode.MOVE):
        return None
    return fold


def after_partners(left: int, alone: float, colo: float | None, move_usd: float, fold: FoldTerms | None) -> float:
    """$ a job's last `left` iterations cost once its group's other members are gone: alone in
    its group (`alone` per iteration), or, when it would fold (`fold`; `colo` per co-located
    iteration, None: it cannot), co-located plus its move."""
    if fold is not None and colo is not None and fold.folds(left, alone, colo, move_usd):
        return left * colo + move_usd
    return left * alone
