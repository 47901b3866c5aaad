"""Folding (beyond the paper, DESIGN §5a): a group's last member moves to co-location.

A group's members leave one by one; its last one then holds a rollout set and a training set
alone, at its solo cost. If running co-located (its phases time-shared on training nodes,
core/placement/options/colocated.py) costs it less per iteration, it moves there at its next
iteration boundary: a migration priced as every other (core/repair/moves.py: its state crosses
the network, then it cold-starts; both pools' slices held meanwhile), taken only when the
saving over its remaining iterations beats `regroup.margin` times that price and co-located
it costs below `colocation.fold_below` times its group (`FoldTerms`). Its SLO is what is left
of its budget after the wait and the migration (`folding_option`).

That the last member can fold is also what makes a co-located job's move into a group
worth pricing for its whole remaining life: whoever outlives its partners need not pay for a
group of its own to the end (`after_partners` in core/placement/costs.py, used by core/repair/pairing.py and
core/repair/regroup.py). Evidence: docs/decisions/colocation-fold.md.
"""

from __future__ import annotations

from dataclasses import replace

from rollmux.core.colo_model import is_colocated
from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.placement import ClusterView
from rollmux.core.placement.costs import FoldTerms, group_cost_per_period, iteration_cost
from rollmux.core.placement.options.colocated import folding_option
from rollmux.core.repair.moves import ChargedProgress, Move, Regroup, migration_seconds, migration_usd
from rollmux.core.vocabulary import Mode


def fold_decision(group: Group, view: ClusterView, cfg: IntraConfig, speed: float, narrow: bool,
                  terms: FoldTerms) -> Regroup | None:
    """Move the one member of `group` to co-location when that pays by `terms` (module
    docstring); None otherwise, or when the group has other members, is co-located already or is
    not planned, or its member cannot be moved or run co-located (`JobSpec.cannot`). `speed` and
    `narrow`: the co-located mode's settings."""
    if len(group.members) != 1 or is_colocated(group) or group.shape is None:
        return None
    if not (group.members[0].job.can(Mode.MOVE) and group.members[0].job.can(Mode.COLOCATE)):
        return None
    job, cluster = group.members[0].job, view.cluster
    mig = migration_seconds(job, cluster, terms.scale)
    charged = ChargedProgress(view.progress, 0.0, {job.job_id: group.shape.period_s + mig})
    plan = folding_option(job, replace(view, progress=charged, moving=True), cfg, speed, narrow)
    if plan is None:
        return None
    left = max(job.iterations - view.progress.get(job.job_id, (0, 0.0))[0], 0)
    alone, colo = group_cost_per_period(group, cluster), iteration_cost(plan)
    price = migration_usd(job, cluster, terms.scale)
    if not terms.folds(left, alone, colo, price):
        return None
    return Regroup(group.group_id, (Move(job.job_id, group.group_id, plan, mig),), True,
                   left * (alone - colo), price)
