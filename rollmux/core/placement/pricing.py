"""Pricing (DESIGN §5, §5a): what a placement costs, and which valid option the search keeps.

`placement.pricing` picks one of two rules (`pricing_rule`: `DeltaPricing` or `StretchPricing`):

* **delta** (the paper's Algorithm 1): an option costs Δ, the $/h of the nodes it adds
  (direct packing is free). Options are tried in Δ order and the first valid one is kept,
  ties to the first found (`FirstValid`); with `best_fit`, among the valid options of the
  first tier that has one, the tightest. The co-located mode compares per iteration: Δ x
  the job's planned iteration time (`iteration_cost`).
* **stretch**: what the option adds per iteration of its job, the members' stretch included
  (`plan_added_cost`), and the valid option that adds least is kept, a group of the job's
  own included (`Cheapest`, a bounded search). Evidence: docs/decisions/stretch-pricing.md.

The costs themselves are placement/costs.py's.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.placement.costs import iteration_cost, plan_added_cost
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.placement.options import ISOLATED
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.placement.refusals import Refusals, explain
from rollmux.core.spec import JobSpec

# Stretch pricing compares at most this many valid options per placement (`Cheapest`).
STRETCH_TRIES = 8
# Under the mean plan it runs at most this many exact SLO checks (a sampled schedule each),
# the options with the most closed-form headroom first (placement/headroom.py).
EXACT_TRIES = 12
# What a rule says of the next option: try it, pass over it, or end the search.
TRY, SKIP, STOP = 0, 1, 2

Attempt = Callable[..., "PlacementPlan | None"]  # (option, tries=None, exact=True) -> its plan


def fit_score(g: Group, slack: float, how: str) -> float:
    """How tightly a candidate group is packed (higher = tighter): `best_fit`'s measure."""
    if how == "slo":
        return g.shape.period_s / slack
    return g.shape.t_load_s / g.shape.period_s


class FirstValid:
    """Δ pricing's rule: the first valid option; with `best_fit` the tightest valid one of the
    first tier (equal Δ and shape: the options differ only in their group) holding one."""

    headroom = False
    tries = None

    def __init__(self, best_fit: str, cands: list) -> None:
        self.best_fit, self.cands = best_fit, cands
        self.best: PlacementPlan | None = None
        self.fit, self.tier = -1.0, None

    def verdict(self, option: tuple) -> int:
        """TRY until a valid option is found (with `best_fit`: until its tier ends)."""
        if self.best is None or (self.best_fit and option[:5] == self.tier):
            return TRY
        return STOP

    def offer(self, option: tuple, plan: PlacementPlan | None) -> None:
        """Keep a valid option (with `best_fit`: if it is tighter than the kept one)."""
        if plan is None:
            return
        if not self.best_fit:
            self.best = plan  # the paper: ties go to the first candidate found
            return
        fit = fit_score(plan.group, self.cands[option[5]][1], self.best_fit)
        if fit > self.fit + 1e-12:
            self.best, self.fit, self.tier = plan, fit, option[:5]

    def finish(self, rest: Iterable[tuple], attempt: Attempt) -> PlacementPlan | None:
        """The kept plan (the search stops only once it has one, so every refusal is noted)."""
        return self.best


class Cheapest:
    """Stretch pricing's rule: of the valid options, the one that adds least per iteration;
    for an arrival, None when the nominal isolated group adds least.

    Options come in Δ order and an option adds at least Δ x its shortest possible period, so
    the search stops at the first whose Δ alone costs more than the best so far, or once a
    valid one adds nothing (a join into bubbles: nothing is cheaper); it also stops after
    STRETCH_TRIES valid options (a bounded search: a large cluster may have many equal-Δ
    candidates). Only valid options are counted, and the group index excludes only invalid
    ones, so the answer is the same with the index and without it. Groups that would have
    taken the job at a higher cost are refused as `costlier` if the job ends up alone.

    `headroom` (the mean plan, placement/headroom.py): the options come in that order instead;
    those whose Δ alone costs too much are passed over, and at most EXACT_TRIES exact checks
    run. Those checks are the options that pass every closed-form bound, which the index only
    ever shortens the way to (each of its exclusions is such a bound), so this too gives the
    same answer with and without the index."""

    def __init__(self, job: JobSpec, view: ClusterView, cfg: IntraConfig, why: Refusals | None, cands: list,
                 shortest: float, joined_only: bool) -> None:
        self.view, self.why, self.cands, self.shortest = view, why, cands, shortest
        self.headroom = cfg.plan == "mean"
        self.best: PlacementPlan | None = None
        self.best_cost, self.valid, self.tries = math.inf, 0, [0]
        self.dearer: dict[int, Group] = {}  # groups a valid option would have taken, at a higher cost
        self.seen: dict[tuple, object] = {}  # (headroom) option -> its plan, or the refusal it noted
        if not joined_only:
            iso = isolated_plan(job, view, cfg)
            if iso is not None:
                self.best_cost = plan_added_cost(iso, view) * (1 - 1e-9)  # an option must beat it strictly

    def verdict(self, option: tuple) -> int:
        """STOP once the search is spent or nothing can be cheaper; SKIP (headroom order) or
        STOP (Δ order) an option whose Δ alone costs more than the best so far."""
        if self.valid >= STRETCH_TRIES or self.best_cost <= 0 or (self.headroom and self.tries[0] >= EXACT_TRIES):
            return STOP
        if option[0] * self.shortest / 3600 >= self.best_cost:
            return SKIP if self.headroom else STOP  # (in headroom order a later option may cost less)
        return TRY

    def offer(self, option: tuple, plan: PlacementPlan | None) -> None:
        """Count a valid option and keep it if it adds least; note what the option came to."""
        pos = option[5]
        if self.headroom and pos != ISOLATED:
            why = self.why
            self.seen[option] = plan if plan is not None else (
                why.exact.get(self.cands[pos][0].group_id) if why is not None else None)
        if plan is None:
            return
        self.valid += 1
        cost = plan_added_cost(plan, self.view)
        if cost < self.best_cost:
            self.best, self.best_cost = plan, cost
        if pos != ISOLATED:
            self.dearer[plan.group.group_id] = self.cands[pos][0]

    def finish(self, rest: Iterable[tuple], attempt: Attempt) -> PlacementPlan | None:
        """The cheapest plan found; for a job left alone, every group's reason first: `rest`, the
        options the search stopped before (in headroom order: all of them, in Δ order), are gone
        through (placement/refusals.py `explain`)."""
        why, best = self.why, self.best
        if why is not None and (best is None or best.case == Case.ISOLATED):
            explain(why, rest, self.cands, attempt, self.dearer, self.seen if self.headroom else None)
        return best


class DeltaPricing:
    """Δ pricing (the paper): a plan costs Δ x its job's planned iteration time per iteration;
    the search keeps the first valid option (`FirstValid`)."""

    name = "delta"

    def cost(self, plan: PlacementPlan, view: ClusterView) -> float:
        """$ the plan adds per iteration of its job (`iteration_cost`)."""
        return iteration_cost(plan)

    def rule(self, job: JobSpec, view: ClusterView, cfg: IntraConfig, why: Refusals | None, cands: list,
             shortest: float, joined_only: bool, best_fit: str) -> FirstValid:
        """A fresh rule for one search (it keeps the search's state)."""
        return FirstValid(best_fit, cands)


class StretchPricing:
    """Stretch pricing: a plan costs what it adds per iteration, the members' stretch included
    (`plan_added_cost`); the search keeps the cheapest valid option (`Cheapest`)."""

    name = "stretch"

    def cost(self, plan: PlacementPlan, view: ClusterView) -> float:
        """$ the plan adds per iteration of its job (`plan_added_cost`)."""
        return plan_added_cost(plan, view)

    def rule(self, job: JobSpec, view: ClusterView, cfg: IntraConfig, why: Refusals | None, cands: list,
             shortest: float, joined_only: bool, best_fit: str) -> Cheapest:
        """A fresh rule for one search (it keeps the search's state); `best_fit` is Δ pricing's."""
        return Cheapest(job, view, cfg, why, cands, shortest, joined_only)


Pricing = DeltaPricing | StretchPricing
PRICING: dict[str, Pricing] = {"delta": DeltaPricing(), "stretch": StretchPricing()}


def pricing_rule(name: str) -> Pricing:
    """The rule `placement.pricing` names: "delta" or "stretch"."""
    if name not in PRICING:
        raise ValueError(f"placement.pricing: unknown rule {name!r}")
    return PRICING[name]
