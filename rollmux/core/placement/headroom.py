"""The bounded search's order under the mean plan (DESIGN §5; docs/decisions/stretch-pricing.md).

With stretch pricing under the mean plan an exact check is a sampled schedule
(core/period_sample.py), and at 10,000 active jobs ~80 options a decision pass every
closed-form bound and most fail only that check. So the search goes through the options by
closed-form headroom (`by_headroom`) and runs at most EXACT_TRIES exact checks
(placement/pricing.py); a group it never checked is refused as `untried` (placement/why.py)
if the job ends up alone.
"""

from __future__ import annotations

import math

import numpy as np

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.placement.index import group_bounds
from rollmux.core.placement.newcomer import Newcomer
from rollmux.core.placement.options import ISOLATED


def by_headroom(options: list[tuple], cands: list[tuple[Group, float, float]], raw: list[tuple[float, float]],
                cfg: IntraConfig, nc: Newcomer) -> list[tuple]:
    """The options by closed-form headroom, most first: a lower bound of the period each would
    plan over the budget it must meet (the group index's bounds, or the same ones computed from
    the group where the index gave none, so the order is the same with the index and without).

    The valid options under the mean plan come first in this order, so a bounded number of
    exact checks finds the cheapest (docs/decisions/admission-by-mean.md)."""
    least, own, factor, own_cycle, slack_new = nc.least, nc.own, nc.factor, nc.own_cycle, nc.slack_new
    bounds = []
    for (g, _, _), (fixed, roll) in zip(cands, raw):
        if fixed == -math.inf or roll == -math.inf:  # no index, or a tentatively changed group
            b = group_bounds(g, cfg)
            fixed, roll = max(b.lb_s, b.train0_sw + least.train), b.rollout_min_sw + least.rollout
        bounds.append((fixed, roll - least.rollout))

    # One vectorized pass (a placement at 10,000 jobs weighs ~800 options): the same doubles
    # as the scalar form, in the same lexicographic order.
    col = np.array(options, float).reshape(-1, 7).T  # Δ, new_t, elastic, -k, new_r, pos, k
    iso = col[5] == ISOLATED
    pos = np.where(iso, 0, col[5]).astype(np.intp)
    k = col[6].astype(np.intp)
    fixed, roll_min = (np.array([b[i] for b in bounds], float) for i in (0, 1))
    slack = np.array([c[1] for c in cands], float)
    own_k = np.array([own_cycle.get(int(x), np.inf) for x in range(int(k.max(initial=0)) + 1)])
    fac_k = np.array([factor.get(int(x), np.nan) for x in range(int(k.max(initial=0)) + 1)])
    if len(cands):
        lb = np.maximum(fixed[pos], own_k[k])
        # (one that takes an existing rollout node takes the least loaded at best)
        lb = np.where(col[4] < col[6], np.maximum(lb, roll_min[pos] + own.rollout * fac_k[k]), lb)
        ratio = np.where(iso, own_k[k] / slack_new, lb / slack[pos])
        gid = np.where(iso, np.inf, np.array([c[0].group_id for c in cands], float)[pos])
    else:
        ratio, gid = own_k[k] / slack_new, np.full(len(options), np.inf)
    order = np.lexsort((col[6], gid, col[4], col[3], col[2], col[1], col[0], ratio))
    return [options[i] for i in order.tolist()]


