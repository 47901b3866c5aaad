"""Trying one option (DESIGN §3, §5): its plan if it is valid, else the refusal noted for `why`.

A joined option is valid when residency holds on every node and, under the planning estimate,
the planned group meets every member's SLO: cheap closed-form checks first (the newcomer's own
cycle, the least-loaded rollout node it would share, max(T_cycle, T_load) of the pinned group),
then the exact planned schedule and SLO admission (placement/admission.py). An option of a
group of the job's own goes to placement/options/isolated.py.
"""

from __future__ import annotations

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import group_planning_times, plan_group, t_cycle, t_load
from rollmux.core.placement.admission import admits_planned
from rollmux.core.placement.index import MARGIN
from rollmux.core.placement.model import ClusterView, PlacementPlan
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import ISOLATED
from rollmux.core.placement.options.isolated import fewer_node_plan
from rollmux.core.placement.pinning import joined_plan, pin_shape, rollout_node_loads
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.why import Refusal
from rollmux.core.spec import JobSpec


class Trial:
    """Tries the options of one search: `trial(option)` is the option's plan, or None when it
    is not valid (a joined option's refusal is noted in `why`). `tries[0]` counts the exact
    SLO checks run; without `exact`, an option that passes every cheaper check is noted
    `untried` instead of checked (the bounded search, placement/pricing.py)."""

    __slots__ = ("nc", "view", "cfg", "why", "cands")

    def __init__(self, nc: Newcomer, view: ClusterView, cfg: IntraConfig, why: Refusals | None,
                 cands: list[tuple[Group, float, float]]) -> None:
        self.nc, self.view, self.cfg, self.why, self.cands = nc, view, cfg, why, cands

    def __call__(self, option: tuple, tries: list[int] | None = None, exact: bool = True) -> PlacementPlan | None:
        _, new_t, _, _, new_r, pos, k = option
        nc, why = self.nc, self.why
        if pos == ISOLATED:
            return fewer_node_plan(nc.job, self.view, self.cfg, k, tries, exact)
        g, slack, rollout_min = self.cands[pos]
        if nc.own_cycle[k] > slack:
            if why is not None:
                why.exact[g.group_id] = (None, g)
            return None  # the newcomer alone on this shape already breaks someone's SLO
        if new_r < k and rollout_min + nc.own.rollout * nc.factor[k] > slack * (1 + 1e-9) * (1 + MARGIN):
            if why is not None:
                why.exact[g.group_id] = (None, g)
            return None  # an existing rollout node takes it: already over budget there
        return try_join(self.cfg, g, nc.job, self.view, k, nc.factor[k], new_r, new_t, slack, why, tries, exact)


def try_join(cfg: IntraConfig, g: Group, job: JobSpec, view: ClusterView, k: int, factor: float, new_r: int,
             new_t: int, slack: float, why: Refusals | None = None, tries: list[int] | None = None,
             exact: bool = True) -> PlacementPlan | None:
    """`job` in `g` on `k` rollout nodes at rollout `factor` (`new_r` of them and `new_t`
    training nodes added), if every member's SLO holds within `slack` (the tightest period
    budget there) under the exact planned schedule; a refusal is noted in `why` (`tries`,
    `exact`: as for `Trial`)."""
    loads = rollout_node_loads(g, cfg.plan_quantile)
    order = sorted(range(g.n_rollout), key=lambda n: (loads[n], n))
    cand = pin_shape(g, job, view.cluster, k, factor, new_r, new_t, order)
    if cand is None:
        if why is not None:
            why.exact[g.group_id] = (Refusal.RESIDENCY, g)
        return None
    times = group_planning_times(cand.members, cfg)
    # Closed-form lower bound first: the exact schedule can only be slower.
    bound = max(t_cycle(cand.members, times),
                t_load(cand.members, cand.n_rollout, cand.n_train, times, cfg.warm_switch_s))
    if bound > slack * (1 + 1e-9):
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None
    if not exact:
        if why is not None:
            why.exact[g.group_id] = (Refusal.UNTRIED, g)
        return None
    if tries is not None:
        tries[0] += 1
    cand = plan_group(cand, cfg)
    if cand.shape.period_s > slack * (1 + 1e-9) or not admits_planned(cand, view, cfg):
        if why is not None:
            why.exact[g.group_id] = (None, g)
        return None
    return joined_plan(g, cand, new_r, job, view, new_t)
