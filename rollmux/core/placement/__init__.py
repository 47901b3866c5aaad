"""Placement (DESIGN §5): where an arriving job goes, in the paper's terms and its extensions.

The seam every executor uses (`model`, `validate`): a pure policy gets a frozen `ClusterView`
and returns a `PlacementPlan`, which `validate_plan` checks before it is applied. RollMux's
policy (`policy.RollMuxPlacement`, built by `build_policy` from the configuration) composes:

* `options/`: one generator per case (direct packing, rollout scaling, elastic rollout,
  training scaling, isolated, co-located, paired);
* `admission`: the one SLO admission test (shared with core/repair/);
* `costs`, `pricing`: what a plan costs; Δ (the paper) or stretch, the rule for which valid
  option the search keeps;
* `candidates`, `trial`, `search`: the candidate filter, the check of one option and the one
  search loop; `index`: the group index behind the filter; `why`, `refusals`: the reasons an
  isolated plan gives; `joinable`: the cheap join test the repair side filters with.

Imports run one way, bottom up: why, index, model, validate, admission, costs, newcomer, pinning,
options, refusals, pricing, rules, candidates, trial, headroom, search, joinable, policy,
builder. The repair side (core/repair/) calls this package's public functions; it never
imports the other way.
"""

from rollmux.core.placement.builder import build_policy
from rollmux.core.placement.model import (
    Case,
    ClusterView,
    Colocating,
    Explaining,
    JoinBounds,
    PlacementPlan,
    PlacementPolicy,
    ProgressView,
    Regrouping,
    Shaped,
)
from rollmux.core.placement.policy import RollMuxPlacement
from rollmux.core.placement.validate import PlanInvalid, validate_plan

__all__ = ["Case", "ClusterView", "Colocating", "Explaining", "JoinBounds", "PlacementPlan", "PlacementPolicy",
           "PlanInvalid", "ProgressView", "Regrouping", "RollMuxPlacement", "Shaped", "build_policy",
           "validate_plan"]
