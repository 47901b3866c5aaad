"""The one search (DESIGN §5): Algorithm 1 and its extensions, one loop over the job's options.

For one job, in four steps:

1. candidates: the groups no cheap check refuses (placement/candidates.py: the group index
   in bulk, then per group), each with the period budget the job would have to meet there;
2. options: each candidate's options by case (placement/options/: direct packing, rollout
   scaling, elastic rollout, training scaling) and, for an arrival, groups of its own on
   fewer rollout nodes, in the one order (Δ, then shape; under stretch pricing with the mean
   plan by closed-form headroom instead, placement/headroom.py);
3. the loop: each option is tried (placement/trial.py) as the pricing rule says
   (placement/pricing.py): the first valid one (Δ) or the cheapest within a bounded search
   (stretch); every refusal is noted for `why` (placement/refusals.py);
4. the result: a joined plan, a group of the job's own on fewer nodes, or None (the caller
   falls back to the nominal isolated group, placement/options/isolated.py).

Algorithm 1 itself (nominal shapes, Δ pricing) is this search with fewer options: only
direct packing and rollout scaling (placement/rules.py says which of its rules differ).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollmux.core.group import Group
from rollmux.core.placement.candidates import candidates
from rollmux.core.placement.headroom import by_headroom
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import direct, elastic, isolated, rollout_scaling, train_scaling
from rollmux.core.placement.pricing import SKIP, STOP
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.rules import SearchRules
from rollmux.core.placement.trial import Trial
from rollmux.core.spec import JobSpec


@dataclass
class ShapeStats:
    """What the flexible shapes chose, per arrival the search placed (for the benchmarks)."""

    train_scaled: int = 0      # joined a group by adding training nodes
    fewer_nodes: int = 0       # rolled out on fewer rollout nodes than nominal (joined)
    more_nodes: int = 0        # on more (joined)
    isolated_fewer: int = 0    # an isolated group with fewer rollout nodes than nominal

    def count(self, plan: PlacementPlan, k0: int) -> None:
        """Note one arrival's plan."""
        m = plan.group.member(plan.job_id)
        k = len(m.rollout_nodes)
        if plan.case == Case.ISOLATED:
            self.isolated_fewer += k < k0
            return
        self.train_scaled += plan.added_train_nodes > 0
        self.fewer_nodes += k < k0
        self.more_nodes += k > k0


def search(rules: SearchRules, job: JobSpec, view: ClusterView, why: Refusals | None, joined_only: bool,
           stats: ShapeStats | None = None) -> PlacementPlan | None:
    """The plan the rules choose for `job` over its options (module docstring); with
    `joined_only` only plans into existing groups. None: no option was valid (or, under stretch
    pricing, the nominal isolated group adds least). Refusals are noted in `why` when given,
    and a group of the job's own carries their reasons."""
    nc = Newcomer(job, view, rules.cfg, rules.shapes, rules.cut_at_isolated)
    cands, raw = candidates(rules, nc, view, why)
    options = gather(nc, cands, joined_only)
    trial = Trial(nc, view, rules.cfg, why, cands)
    rule = rules.pricing.rule(job, view, rules.cfg, why, cands, nc.shortest, joined_only, rules.best_fit)
    order = by_headroom(options, cands, raw, rules.cfg, nc) if rule.headroom else options
    rest = len(order)
    for i, option in enumerate(order):  # the one loop
        verdict = rule.verdict(option)
        if verdict == STOP:
            rest = i
            break
        if verdict != SKIP:
            rule.offer(option, trial(option, rule.tries))
    plan = rule.finish(options, rest, trial)
    if plan is None:
        return None
    if why is not None and plan.case == Case.ISOLATED:  # a fewer-node group of its own: why
        plan = replace(plan, why=why.result())
    if stats is not None and not joined_only:
        stats.count(plan, nc.k0)
    return plan


def gather(nc: Newcomer, cands: list[tuple[Group, float, float]], joined_only: bool) -> list[tuple]:
    """Every option of the search, in the one order: each candidate's by case (a group with
    fewer training nodes than the job needs only by training scaling), then, for an arrival,
    its own groups on fewer rollout nodes."""
    options: list[tuple] = []
    for pos, (g, _, _) in enumerate(cands):
        if g.n_train < nc.kt:
            options += train_scaling.options(g, pos, nc)
        else:
            options += direct.options(g, pos, nc)
            options += rollout_scaling.options(g, pos, nc)
            options += elastic.options(g, pos, nc)
    if not joined_only:
        options += isolated.fewer_node_options(nc)
    options.sort()
    return options
