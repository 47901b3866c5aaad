"""Why a job got a group of its own (DESIGN §5): the reasons the search refused each group.

For an arrival that the RollMux policy isolates (a new group), every group in its view was
refused by one check. The checks and the order in which a refusal is attributed, when more
than one would fail (the first failing one in this order wins):

  group_size    the group already has max_group_size members (exact);
  unplanned     the group has no planned shape, so it is never a candidate (not seen in runs);
  saturated     the paper's pruning of saturated groups (only with `prune_saturated`);
  train_shape   the group has fewer training nodes than the job needs;
  residency     host DRAM: a training node the job would share cannot hold its offloaded
                state (rollout nodes never refuse an isolated job: see below);
  newcomer_slo  the group's period with the job would exceed the tightest period budget
                (placement/admission.py `period_budget`) among the newcomer and the members, and that is
                the newcomer's own (no member's budget is tighter);
  member_slo    ... and a member's budget is tighter than the newcomer's: the tightest SLO in
                the group is an existing member's.
  untried       the group passed every check short of the exact SLO check, which the bounded
                search of the mean plan (placement/pricing.py `EXACT_TRIES`) never reached: it
                tries the groups with the most closed-form headroom first, and stopped;
  costlier      the group would take the job, but with stretch pricing (placement/pricing.py)
                joining it adds more per iteration than a group of the job's own: the
                members' stretch (or the nodes added) costs more than new nodes would.

Codes follow the enum, whose members are only ever appended (journal records store counts by
code): `untried`, added last, is attributed before `costlier` all the same (ATTRIBUTION).

Which SLO is named depends only on the budgets, not on how far over it the period is: a
period bound proves that the tightest budget is broken, not by how much, so the same rule
gives the same answer whether the index or the exact checks refused the group.

A group is tried with 0..k new rollout nodes; it is attributed the reason its last (most-scaled)
try failed for, the try that asks least of the group. With k new nodes the job shares no
rollout node, and an isolated group needs k new rollout nodes too, so whenever a job is
isolated that try was made: rollout-node DRAM can change which nodes a job shares, never
isolate it. Groups the group index (placement/index.py) excludes in bulk are attributed the
same way: each of its bounds is a proof of one of these reasons (a structural bound is that
check itself; a period bound is a lower bound of the exact period, so exceeding a budget
proves an SLO refusal), so no "pruned" reason is needed; how many groups the index excluded
is kept apart (`by_index`). The policy notes refusals as it makes them and turns them into
counts only when the job ends up alone (placement/refusals.py).

One placement, one reason (`PlacementWhy.reason`): the nearest miss, i.e. the reason of the
refused group that got furthest through the order above (a job refused by one group for a member's
SLO and by all others for size was kept apart by the SLO: that is what would have to give).
`no_groups`: there was no group at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Refusal(str, Enum):
    """Why a group was refused, or (no_groups) why there was nothing to refuse."""

    NO_GROUPS = "no_groups"
    GROUP_SIZE = "group_size"
    UNPLANNED = "unplanned"
    SATURATED = "saturated"
    TRAIN_SHAPE = "train_shape"
    RESIDENCY = "residency"
    NEWCOMER_SLO = "newcomer_slo"
    MEMBER_SLO = "member_slo"
    COSTLIER = "costlier"
    UNTRIED = "untried"


REFUSALS: tuple[Refusal, ...] = tuple(Refusal)          # codes are indices
# The attribution order (module docstring): the enum's, with `untried` before `costlier`.
ATTRIBUTION: tuple[Refusal, ...] = REFUSALS[:-2] + (Refusal.UNTRIED, Refusal.COSTLIER)
REASON_NAMES: tuple[str, ...] = tuple(r.value for r in REFUSALS)
CODE = {r: i for i, r in enumerate(REFUSALS)}           # Refusal -> its code (index in REFUSALS)


def zero_counts() -> dict[str, int]:
    """Every reason at 0, in attribution order (JSON and status list them all)."""
    return dict.fromkeys(REASON_NAMES, 0)


@dataclass(frozen=True)
class PlacementWhy:
    """Why one job was placed in a new group: how many groups each reason refused."""

    refused: tuple[int, ...]   # groups refused per reason, indexed like REFUSALS
    # Of them, excluded in bulk by the group index's bounds: how the answer was found, not part
    # of it (with or without the index the reasons are the same), so equality ignores it.
    by_index: int = field(default=0, compare=False)

    @property
    def groups(self) -> int:
        """Groups that were refused (every group in the policy's view)."""
        return sum(self.refused)

    @property
    def reason(self) -> Refusal:
        """The placement's one reason: the nearest miss (see the module docstring)."""
        for r in reversed(ATTRIBUTION[1:]):
            if self.refused[CODE[r]]:
                return r
        return Refusal.NO_GROUPS

    def counts(self) -> dict[str, int]:
        """Groups refused per reason name (every reason listed)."""
        return dict(zip(REASON_NAMES, self.refused))

    def to_dict(self) -> dict:
        """JSON-native form (the journal's `place` record carries it)."""
        return {"refused": list(self.refused), "by_index": self.by_index}

    @classmethod
    def from_dict(cls, d: dict) -> "PlacementWhy":
        """Rebuild from `to_dict`'s form. A record written before a reason was added has
        fewer counts (reasons are only ever appended): the missing ones are 0."""
        refused = tuple(int(x) for x in d["refused"])
        if len(refused) > len(REFUSALS):
            raise ValueError(f"why: {len(refused)} counts, expected at most {len(REFUSALS)}")
        return cls(refused + (0,) * (len(REFUSALS) - len(refused)), int(d.get("by_index", 0)))


class WhyTally:
    """Running totals over isolated placements: placements per reason and groups refused per reason."""

    __slots__ = ("placements", "groups")

    def __init__(self) -> None:
        self.placements = [0] * len(REFUSALS)
        self.groups = [0] * len(REFUSALS)

    def add(self, why: PlacementWhy) -> None:
        """Count one isolated placement."""
        self.placements[CODE[why.reason]] += 1
        for i, n in enumerate(why.refused):
            self.groups[i] += n

    @property
    def isolated(self) -> int:
        """Isolated placements counted."""
        return sum(self.placements)

    def to_json(self) -> dict:
        """{"placements": {reason: n}, "groups": {reason: n}} with every reason listed."""
        return {"placements": dict(zip(REASON_NAMES, self.placements)),
                "groups": dict(zip(REASON_NAMES, self.groups))}

    @classmethod
    def from_json(cls, d: dict) -> "WhyTally":
        """Rebuild from `to_json`'s form (reasons it lacks count 0)."""
        t = cls()
        t.placements = [int(d.get("placements", {}).get(n, 0)) for n in REASON_NAMES]
        t.groups = [int(d.get("groups", {}).get(n, 0)) for n in REASON_NAMES]
        return t
