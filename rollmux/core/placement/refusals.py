"""The refusals one placement makes, for the isolated plan's `why` (DESIGN §5, placement/why.py).

The search notes each refused group as it refuses it (`Refusals.exact`, by group id: a later,
more scaled try of the same group overwrites it), and the group index leaves its bulk
exclusions here (`Refusals.pruned`). Both become reasons only if the job ends up alone.
`explain` completes them where a bounded search stopped early.
"""

from __future__ import annotations

from typing import Callable, Iterable, Mapping

import numpy as np

from rollmux.core.group import Group
from rollmux.core.placement.admission import period_budget
from rollmux.core.placement.model import PlacementPlan
from rollmux.core.placement.options import ISOLATED
from rollmux.core.placement.why import CODE, REFUSALS, PlacementWhy, Refusal

_SLO = CODE[Refusal.NEWCOMER_SLO]  # an SLO refusal before it is told whose budget binds


class Refusals:
    """The refusals one `place` call makes, for the isolated plan's `why`.

    The exact checks note each refused group by id with its reason (None: an SLO, whose is
    settled at the end); a later, more scaled try of the same group overwrites it. The index's
    bulk exclusion leaves its arrays here. Both become reasons only if the job ends up isolated."""

    __slots__ = ("slack_new", "progress", "exact", "pruned")

    def __init__(self, slack_new: float, progress: Mapping[str, tuple[int, float]]) -> None:
        self.slack_new, self.progress = slack_new, progress
        self.exact: dict[int, tuple[Refusal | None, Group]] = {}
        # (index, the index's refusal codes per view position, view slots, positions failing
        # the budget pass and whether a member's budget bound is under the newcomer's there,
        # view positions checked exactly instead); None: no index was used.
        self.pruned: tuple | None = None

    def result(self) -> PlacementWhy:
        """Groups refused per reason, the index's exclusions included. An SLO refusal is a
        member's when some member's period budget is tighter than the newcomer's, else the
        newcomer's (the same budgets, so the same answer, with or without the index)."""
        counts = [0] * len(REFUSALS)
        slack_new, progress = self.slack_new, self.progress
        for reason, g in self.exact.values():
            if reason is None:
                tight = any(period_budget(m.job, progress) < slack_new for m in g.members)
                reason = Refusal.MEMBER_SLO if tight else Refusal.NEWCOMER_SLO
            counts[CODE[reason]] += 1
        by_index = 0
        if self.pruned is not None:
            idx, codes, slots, fail_pos, fail_tight, exact_pos = self.pruned  # codes: per view position
            codes = codes.copy()  # (result() may be asked twice)
            slo = np.flatnonzero(codes == _SLO)  # the index's own period bounds broke a budget
            if len(slo):
                tight = idx.budget_bounds(slots[slo], progress) < slack_new
                codes[slo[tight]] = CODE[Refusal.MEMBER_SLO]
            # Passed the index's bounds, not the members' budgets (their bounds, in hand).
            codes[fail_pos] = np.where(fail_tight, CODE[Refusal.MEMBER_SLO], _SLO)
            if exact_pos:
                codes[exact_pos] = -1  # tentatively changed groups: the exact checks noted them
            pruned = np.bincount(codes.astype(np.intp) + 1, minlength=len(REFUSALS) + 1)[1:]
            by_index = int(pruned.sum())
            counts = [c + p for c, p in zip(counts, pruned.tolist())]
        return PlacementWhy(tuple(counts), by_index)


def explain(why: Refusals, options: Iterable[tuple], cands: list, attempt: Callable[..., PlacementPlan | None],
            dearer: dict[int, Group], seen: Mapping[tuple, object] | None) -> None:
    """Every group's reason for a job left alone by a search that stopped early (stretch
    pricing's bounded search, placement/pricing.py `Cheapest`). The `options` it passed over
    are tried too (as Δ pricing tries every option of an isolated job); a valid one was
    costlier (`dearer`: the groups a valid option would have taken). With `seen` (the headroom
    order), every option is gone through again in Δ order, so a group keeps its most-scaled
    try's reason as in Δ order: what the search saw is replayed, and an option it never
    checked exactly gets every cheaper check and then `untried`."""
    for option in options:
        pos = option[5]
        if pos == ISOLATED:
            continue
        g = cands[pos][0]
        if seen is not None and option in seen:
            got = seen[option]
            if isinstance(got, PlacementPlan):
                dearer[g.group_id] = g
            elif got is not None:
                why.exact[g.group_id] = got
        elif attempt(option, exact=seen is None) is not None:
            dearer[g.group_id] = g
    for gid, g in dearer.items():  # the most-scaled try of each was costlier, not refused
        why.exact[gid] = (Refusal.COSTLIER, g)
