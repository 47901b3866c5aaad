"""The one search (DESIGN §5): Algorithm 1 and its extensions, one loop over the job's options.

For one job, in four steps:

1. candidates: the groups no cheap check refuses (placement/candidates.py: the group index
   in bulk, then per group), each with the period budget the job would have to meet there;
2. options: the job's shapes by case (placement/options/: direct packing, rollout scaling,
   elastic rollout, training scaling) with the candidates that offer each and, for an
   arrival, groups of its own on fewer rollout nodes, in the one order (Δ, then shape, then
   view order: `ordered`, built lazily; under stretch pricing with the mean plan all of them
   by closed-form headroom instead, placement/headroom.py);
3. the loop: each option is tried (placement/trial.py) as the pricing rule says
   (placement/pricing.py): the first valid one (Δ) or the cheapest within a bounded search
   (stretch); every refusal is noted for `why` (placement/refusals.py);
4. the result: a joined plan, a group of the job's own on fewer nodes, or None (the caller
   falls back to the nominal isolated group, placement/options/isolated.py).

Algorithm 1 itself (nominal shapes, Δ pricing) is this search with fewer options: only
direct packing and rollout scaling (placement/rules.py says which of its rules differ). Its
loop is also written out as a fast path (`algorithm1`), kept for a measured cost (see there)
and tested against the general loop.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from itertools import chain

from rollmux.core.group import Group
from rollmux.core.placement.candidates import candidates
from rollmux.core.placement.headroom import by_headroom
from rollmux.core.placement.index import MARGIN
from rollmux.core.placement.model import Case, ClusterView, PlacementPlan
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import direct, elastic, isolated, rollout_scaling, train_scaling
from rollmux.core.placement.pricing import SKIP, STOP, fit_score
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.rules import SearchRules
from rollmux.core.placement.trial import Trial, try_join
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
    if rules.algorithm1:
        return algorithm1(rules, nc, cands, view, why)  # (the same options, order and choice: see there)
    if rules.shapes.train_scaling:
        offers = [(g.n_rollout, train_scaling.added_nodes(g, nc)) for g, _, _ in cands]
    else:  # (every candidate has the job's training nodes: placement/candidates.py)
        offers = [(g.n_rollout, 0) for g, _, _ in cands]
    shapes = tiers(nc, offers, joined_only)
    if not shapes:
        return None  # no option at all (every refusal is noted)
    trial = Trial(nc, view, rules.cfg, why, cands)
    rule = rules.pricing.rule(job, view, rules.cfg, why, cands, nc.shortest, joined_only, rules.best_fit)
    stream = ordered(shapes, offers)
    if rule.headroom:  # every option, by headroom; one the search stops at is explained in Δ order
        options = list(stream)
        order, rest = by_headroom(options, cands, raw, rules.cfg, nc), options
    else:  # lazily, in Δ order: what the search never reaches is never built
        order, rest = stream, ()
    for option in order:  # the one loop
        verdict = rule.verdict(option)
        if verdict == STOP:
            if not rule.headroom:
                rest = chain((option,), stream)
            break
        if verdict != SKIP:
            rule.offer(option, trial(option, rule.tries))
    plan = rule.finish(rest, trial)
    if plan is None:
        return None
    if why is not None and plan.case == Case.ISOLATED:  # a fewer-node group of its own: why
        plan = replace(plan, why=why.result())
    if stats is not None and not joined_only:
        stats.count(plan, nc.k0)
    return plan


def tiers(nc: Newcomer, offers: list[tuple[int, int]], joined_only: bool) -> list[tuple]:
    """The search's tiers in the one order (placement/options/): the joined shapes of each case
    the candidates call for (`offers`: per candidate, its rollout nodes and the training nodes
    the job would add; a group that lacks training nodes offers only training scaling's) and,
    for an arrival, the groups of the job's own on fewer rollout nodes (complete options,
    after the joined ones at equal Δ and shape)."""
    out: list[tuple] = [] if joined_only else isolated.fewer_node_options(nc)
    for new_t in {t for _, t in offers}:
        if new_t:
            out += train_scaling.shapes(nc, new_t)
        else:
            out += direct.shapes(nc) + rollout_scaling.shapes(nc) + elastic.shapes(nc)
    out.sort()
    return out


def ordered(shapes: list[tuple], offers: list[tuple[int, int]]) -> Iterator[tuple]:
    """Every option of the search in the one order, lazily: each tier of `shapes` completed by
    the candidates that offer it, in view order (a group of the job's own is complete)."""
    for tier in shapes:
        if len(tier) > 5:  # a group of the job's own
            yield tier
            continue
        _, new_t, _, neg_k, new_r = tier
        k, need = -neg_k, -neg_k - new_r  # (the existing rollout nodes the shape takes)
        for pos, (n_rollout, added) in enumerate(offers):
            if added == new_t and n_rollout >= need:
                yield tier + (pos, k)


def algorithm1(rules: SearchRules, nc: Newcomer, cands: list[tuple[Group, float, float]], view: ClusterView,
               why: Refusals | None) -> PlacementPlan | None:
    """The search under Algorithm 1's rules (nominal shapes, Δ pricing), written out: the
    options `ordered` gives them (0..k0 fresh rollout nodes, then the candidates that have the
    rest, in view order), tried as `Trial` tries them and kept as `FirstValid` keeps them.

    A fast path, kept because folding it into the loop above was measured to cost: the
    general loop's set-up (the option tiers, the rule and trial objects, two calls per option)
    added ~3.5% of the CPU instructions of a nominal decision at 1,000 active jobs (callgrind,
    the same probes on the same state) and ~4% CPU to `benchmarks/placement_latency.py
    --nominal` (benchmarks/ab_compare.py, 5 runs), where a decision takes ~0.1 ms. The general
    loop stays the definition: tests/core/placement/test_search.py checks that both give the
    same plans and the same reasons on random states."""
    k0, own, cfg, job, free_r, best_fit = nc.k0, nc.own, rules.cfg, nc.job, nc.free_r, rules.best_fit
    own_cycle, factor = nc.own_cycle[k0], nc.factor[k0]
    for new_r in range(k0 + 1):  # Δ order: fewer fresh rollout nodes first
        if free_r is not None and new_r > free_r:
            break
        best, fit = None, -1.0
        for g, slack, rollout_min in cands:
            if g.n_rollout < k0 - new_r:
                continue  # (the shape takes more existing rollout nodes than the group has)
            if own_cycle > slack or (new_r < k0 and rollout_min + own.rollout * factor
                                     > slack * (1 + 1e-9) * (1 + MARGIN)):
                if why is not None:
                    why.exact[g.group_id] = (None, g)
                continue  # as `Trial`: its own cycle, or the least-loaded node it shares, is over budget
            plan = try_join(cfg, g, job, view, k0, factor, new_r, 0, slack, why)
            if plan is None:
                continue
            if not best_fit:
                return plan  # the paper: ties go to the first candidate found
            f = fit_score(plan.group, slack, best_fit)
            if f > fit + 1e-12:
                best, fit = plan, f
        if best is not None:
            return best
    return None
