"""The candidate groups of one search (DESIGN §5): the filter, written once.

Algorithm 1 tries every group that is neither full-size nor (with `prune_saturated`)
saturated. Before any option is tried, a group is dropped when a check that needs no plan
already refuses it: the group index's vectorized bounds (placement/index.py) in bulk, then
per group its structure (size, training nodes, training-node DRAM) and a closed-form lower
bound of its period against the tightest budget the job would have to meet there. Every
refusal is noted for `why` (placement/refusals.py). What survives is a candidate: the group,
its period budget with the job, and a lower bound of its least-loaded rollout node's load.
"""

from __future__ import annotations

import math

import numpy as np

from rollmux.core.group import Group
from rollmux.core.intra_group import PhaseTimes
from rollmux.core.placement.admission import joining_budget, period_budget
from rollmux.core.placement.index import MARGIN, JobNeeds
from rollmux.core.placement.model import ClusterView
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.refusals import Refusals
from rollmux.core.placement.rules import SearchRules
from rollmux.core.placement.why import Refusal
from rollmux.core.spec import JobSpec

NO_BOUND = float("-inf")  # a candidate without index bounds: only the exact checks decide


def first_refusal(g: Group, max_size: int, prune: bool, kt: int, need: float, t_cap: float) -> Refusal | None:
    """The first check of the attribution order (placement/why.py) that `g` fails before any
    SLO check; None (an SLO) when it fails only the natural-cycle check."""
    shape = g.shape
    if len(g.members) >= max_size:
        return Refusal.GROUP_SIZE
    if shape is None:
        return Refusal.UNPLANNED
    if prune and shape.status != "unsaturated":
        return Refusal.SATURATED
    if kt > g.n_train:
        return Refusal.TRAIN_SHAPE
    if kt and any(u + need > t_cap for u in g.train_gb[:kt]):
        return Refusal.RESIDENCY
    return None


def candidates(rules: SearchRules, nc: Newcomer, view: ClusterView,
               why: Refusals | None) -> tuple[list[tuple[Group, float, float]], list[tuple[float, float]]]:
    """The groups `nc.job` may join, in view order, as (group, period budget with the job,
    least-loaded rollout node's load bound less the job's fastest rollout), and per candidate
    the index's bounds (fixed part, rollout part; NO_BOUND where it gave none).

    Pruned: full-size or (with `prune_saturated`) saturated or full groups, groups whose
    slowest member alone breaks the newcomer's budget, and groups whose training nodes are too
    few (unless training scaling adds them) or too full for it; then groups whose bounds
    already exceed the budget. The index is asked with the job's training need taken as one
    node when training scaling may add the rest, and with the job at its fastest shape."""
    job, kt, scaling = nc.job, nc.kt, rules.shapes.train_scaling
    t_cap, need = view.cluster.pools.train.host_gb_per_node + 1e-9, job.host_gb.train
    pool = index_pass(rules, job, view, nc.slack_new, nc.least, 1 if scaling else kt, t_cap, why)
    if pool is None:
        pool = [(g, NO_BOUND, NO_BOUND) for g in view.groups]  # no usable index: every group
    max_size, prune, loosest, slack_new = view.max_group_size, rules.prune_saturated, rules.loosest_budget, nc.slack_new
    progress, least_r, owed = view.progress, nc.least.rollout, view.owed_s  # (owed: stalls still due, if any)
    cands, raw = [], []
    for g, fixed_lb, rollout_lb in pool:
        shape = g.shape
        kt_in = min(kt, g.n_train) if scaling else kt
        if (len(g.members) >= max_size or shape is None or (shape.t_cycle_s > slack_new and not loosest)
                or kt_in > g.n_train or (prune and shape.status != "unsaturated")):
            if why is not None:
                why.exact[g.group_id] = (first_refusal(g, max_size, prune, kt_in, need, t_cap), g)
            continue
        if kt_in and any(u + need > t_cap for u in g.train_gb[:kt_in]):
            if why is not None:
                why.exact[g.group_id] = (Refusal.RESIDENCY, g)
            continue
        # The period budget the plan must meet there: the tightest of the job's (as it joins
        # there, charged what the group owes) and the members'; `loosest` (Algorithm 1 under the
        # SLO order, placement/rules.py): the loosest of the job's and the members', since some
        # member runs once per meta-iteration and each member's own cycle is checked exactly.
        slack = slack_new if loosest or not owed else joining_budget(job, view, g.group_id, slack_new)
        for m in g.members:
            b = period_budget(m.job, progress)
            if (b > slack) if loosest else (b < slack):
                slack = b
        if max(fixed_lb, shape.t_cycle_s if loosest else NO_BOUND) > slack * (1 + 1e-9) * (1 + MARGIN):
            if why is not None:
                why.exact[g.group_id] = (None, g)
            continue  # over budget whatever the plan: the exact checks would refuse it
        cands.append((g, slack, rollout_lb - least_r))
        raw.append((fixed_lb, rollout_lb))
    return cands, raw


def index_pass(rules: SearchRules, job: JobSpec, view: ClusterView, slack_new: float, least: PhaseTimes,
               kt: int, t_cap: float, why: Refusals | None) -> list[tuple[Group, float, float]] | None:
    """The groups the view's index cannot exclude, in view order, each with its bounds (fixed
    part, rollout part); None when the view has no index this policy can use.

    A view derived from the indexed one by tentative plans (the repair side's moves) differs
    in a few groups: those are found by identity and passed on unbounded."""
    snap, cfg = view.index, rules.cfg
    if snap is None or not snap.current or snap.index.intra != cfg:
        return None
    idx, slots = snap.index, snap.slots
    slo = cfg.order == "slo"  # its period bounds compare with the newcomer's budget: not then
    needs = JobNeeds(kt, job.host_gb.train, least.train, math.inf if slo else slack_new, view.max_group_size,
                     t_cap, rules.prune_saturated)
    if why is None:
        may = idx.may_take(needs)
    else:  # one pass gives the filter and, should the job end up alone, the reasons
        codes = idx.refusal_codes(needs)
        may = codes < 0
    pos = np.flatnonzero(may[slots])
    sel = slots[pos]
    fixed = np.maximum(idx.lb[sel], idx.train0_sw[sel] + least.train)
    # The members' budgets (bounded from above), vectorized: the exact loop recomputes
    # them for the few left.
    bb = idx.budget_bounds(sel, view.progress)
    slack = np.minimum(bb, slack_new) * (1 + MARGIN)
    own_cycle = least.rollout + least.train + least.sync
    ok = (own_cycle <= slack) & (fixed <= slack * (1 + 1e-9))
    if slo:  # (`candidates` checks `fixed` against the loosest budget)
        ok = np.full(len(sel), own_cycle <= slack_new * (1 + MARGIN))
    if why is not None:
        bad = ~ok
        why.pruned = (idx, codes[slots], slots, pos[bad], bb[bad] < slack_new, [])
    pos, sel, fixed = pos[ok], sel[ok], fixed[ok].tolist()
    roll = (idx.rollout_min_sw[sel] + least.rollout).tolist()
    return _aligned(view, snap.groups, pos.tolist(), fixed, roll, why)


def _aligned(view: ClusterView, base: tuple[Group, ...], pos: list[int], fixed: list[float], roll: list[float],
             why: Refusals | None) -> list[tuple[Group, float, float]] | None:
    """The index's survivors (positions in `base`, the indexed groups) as groups of `view`:
    a tentative view's changed groups unbounded, its added ones appended; None when the view
    is not such a view (then every group goes through the exact checks)."""
    groups = view.groups
    if groups is base:
        return [(base[p], f, r) for p, f, r in zip(pos, fixed, roll)]
    if len(groups) < len(base):
        if why is not None:
            why.pruned = None  # every group goes through the exact checks
        return None
    changed = [i for i, (a, b) in enumerate(zip(groups, base)) if a is not b]
    if any(groups[i].group_id != base[i].group_id for i in changed):
        if why is not None:
            why.pruned = None
        return None
    if why is not None:
        why.pruned = why.pruned[:-1] + (changed,)
    bounded = {p: (f, r) for p, f, r in zip(pos, fixed, roll)}
    for i in changed:
        bounded[i] = (NO_BOUND, NO_BOUND)  # a tentatively changed group: the exact checks decide
    out = [(groups[p], *bounded[p]) for p in sorted(bounded)]
    return out + [(g, NO_BOUND, NO_BOUND) for g in groups[len(base):]]
