"""The search's rules (DESIGN §5), decided once from the configuration when the policy is built.

Algorithm 1 (the `paper` profile: nominal shapes and Δ pricing) is the search with fewer
options: no elastic, training-scaling or fewer-node isolated ones. Three of its rules the
flexible search (any shape beyond the nominal one, or stretch pricing) does not keep, and
each is decided here, where the two are told apart:

* `best_fit` (`placement.best_fit`): Algorithm 1's tie-break among equal-Δ options; the
  flexible search keeps the first (Δ) or the cheapest (stretch) valid option instead.
* `loosest_budget`: under the SLO order (core/slo_order.py) Algorithm 1 bounds the period by
  the loosest member budget (some member runs once per meta-iteration; the exact per-member
  test decides), the flexible search by the tightest (docs/decisions/slo-order.md).
* `cut_at_isolated`: the flexible search drops joined options whose Δ reaches that of the
  job's own nominal group; Algorithm 1 tries every rollout-scaling option (they differ only
  where the training pool is free of charge).
"""

from __future__ import annotations

from dataclasses import dataclass

from rollmux.core.config import IntraConfig, SchedulerConfig, ShapesConfig
from rollmux.core.placement.pricing import Pricing, pricing_rule


@dataclass(frozen=True)
class SearchRules:
    """What one search of a policy follows: its planner view, shapes, pricing and pruning."""

    cfg: IntraConfig             # the group planner's view (admission, planning estimate)
    shapes: ShapesConfig         # elastic rollout and training scaling
    pricing: Pricing             # Δ (first valid) or stretch (cheapest, bounded)
    prune_saturated: bool        # the paper's pruning of saturated and full groups
    best_fit: str = ""           # "", "util" or "slo" (module docstring)
    loosest_budget: bool = False
    cut_at_isolated: bool = True
    algorithm1: bool = False     # nominal shapes and Δ pricing: the search's fast path (placement/search.py)

    @classmethod
    def of(cls, intra: IntraConfig, config: SchedulerConfig) -> "SearchRules":
        """The rules `config` sets, planning with `intra` (module docstring)."""
        search = config.placement
        nominal = not config.shapes.on and search.pricing == "delta"
        return cls(intra, config.shapes, pricing_rule(search.pricing), search.prune_saturated,
                   best_fit=search.best_fit if nominal else "", loosest_budget=nominal and intra.order == "slo",
                   cut_at_isolated=not nominal, algorithm1=nominal)
