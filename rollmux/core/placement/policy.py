"""RollMux's placement policy (DESIGN §5): the search, the co-located option and the join test, composed.

For each arrival the search (placement/search.py) looks for the placement its pricing rule
keeps over the job's options in the existing groups (and, with elastic rollout, groups of its
own on fewer rollout nodes); isolated provisioning on the job's nominal nodes is the
always-valid fallback (placement/options/isolated.py). With the co-located mode on, the
co-located option is set against that answer (placement/options/colocated.py `choose`).
An isolated plan says why no group took the job (`PlacementPlan.why`, placement/why.py).

The policy is built from the configuration once (`build_policy`, placement/builder.py): its
rules (placement/rules.py) are read at construction, never set afterwards.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.group import Group
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.joinable import JoinTest
from rollmux.core.placement.model import ClusterView, PlacementPlan, PlacementPolicy
from rollmux.core.placement.options.colocated import choose
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.rules import SearchRules
from rollmux.core.placement.search import ShapeStats, search
from rollmux.core.spec import JobSpec


class RollMuxPlacement(PlacementPolicy):
    """Algorithm 1 with SLO admission at the worst case (or a quantile), or by the mean with
    confidence (`IntraConfig.plan`, placement/admission.py); the search, shapes, pricing and
    co-located mode as the configuration sets them."""

    name = "rollmux"
    explains = True  # its isolated plans say why no group took the job (PlacementPlan.why)

    def __init__(self, intra: IntraConfig, config: SchedulerConfig) -> None:
        """`intra`: the group planner's view (`config.intra_for(cluster)`); `config`: the
        search (`placement`), the shapes (`shapes`) and the co-located mode (`colocation`)."""
        self.cfg = intra
        self.rules = SearchRules.of(intra, config)
        self.shapes = config.shapes  # flexible shapes (placement/options/); both off: Algorithm 1
        self.prune_saturated = config.placement.prune_saturated
        self.stretch_pricing = config.placement.pricing == "stretch"
        colo = config.colocation
        # The co-located mode: chosen when cheaper at the SLO by `colo_margin`; narrowed (with
        # elastic rollout) a job may run on fewer training GPUs than its rollout declares.
        self.colocate, self.colo_speed, self.colo_margin = colo.enabled, colo.speed, colo.effective_margin
        self.colo_narrow = colo.narrow and config.shapes.elastic_rollout
        self._join = JoinTest(intra, config.shapes, config.placement.prune_saturated)
        self.shape_stats = ShapeStats()  # what the flexible shapes chose, per placed arrival

    def place(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The cheapest valid placement for `job`; isolated if nothing else fits (the plan
        then says why each group refused it)."""
        why = Refusals(period_budget(job, view.progress), view.progress)
        stats = self.shape_stats if self.shapes.on else None  # (nominal shapes: nothing to count)
        plan = search(self.rules, job, view, why, joined_only=False, stats=stats)
        if self.colocate:  # the co-located mode against the disaggregated answer
            pricing = self.rules.pricing
            return choose(job, view, plan, lambda: isolated_plan(job, view, self.cfg, why.result()),
                          self.cfg, self.colo_speed, self.colo_margin, lambda p: pricing.cost(p, view),
                          narrow=self.colo_narrow)
        return plan if plan is not None else isolated_plan(job, view, self.cfg, why.result())

    def place_joined(self, job: JobSpec, view: ClusterView) -> PlacementPlan | None:
        """The cheapest valid placement of `job` into an existing group; None if there is none.

        Departure-time re-placement only wants these (an isolated plan makes a move
        pointless), so it skips planning the isolated group. A subclass that overrides
        `place` should override this too."""
        return search(self.rules, job, view, None, joined_only=True)

    def could_join(self, job: JobSpec, g: Group, view: ClusterView) -> bool:
        """Cheap necessary condition for `place_joined` to put `job` into `g`: False means no
        plan of this policy puts it there, with `view`'s progress or any later charge to it
        (`join_matrix` for one pair)."""
        return bool(self.join_matrix((g,), (job,), view)[0, 0])

    def join_matrix(self, targets: Sequence[Group], jobs: Sequence[JobSpec], view: ClusterView) -> np.ndarray:
        """`could_join(jobs[i], targets[k], view)` for every pair, as a boolean matrix
        (placement/joinable.py: the departure pass asks it about every member of every small
        group at once)."""
        return self._join.matrix(targets, jobs, view)
