"""An index of the groups for the placement search (DESIGN §5: Algorithm 1 at scale).

Algorithm 1 tries every group for every arrival; at 10,000 active jobs a Python
loop over thousands of groups, each tried with the exact candidate check,
costs tens of milliseconds per decision. The index keeps, for every group, a
few planning aggregates in flat numpy arrays: member count, training-node
count, training host DRAM and training load per node prefix, and closed-form
lower bounds of the period the group would have with one more member. One
vectorized pass then excludes every group that can never take a given job, and
only the few survivors go through the search's exact checks (placement/candidates.py).

Every aggregate is a *lower bound* of what the exact check computes (adding a
member only adds load, switches and straggler overhead), compared with a small
relative margin, so the index never excludes a group the exact check could
accept: placements are identical with and without it. Member period budgets
change with progress, so they are not indexed; the policy computes them for the
survivors. Aggregates depend on the planning configuration (`IntraConfig`):
a policy uses an index only when it was built with its own.

`IndexedGroups` is the `dict[group_id, Group]` the cluster state keeps its
groups in; every write goes through the index, whoever makes it, so the two
never disagree. Slots are never reused until a compaction (which keeps their
order), so slot order is the dict's insertion order: the order of `view.groups`.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from typing import Iterable, Mapping, Sequence

import numpy as np

from rollmux.core.config import IntraConfig
from rollmux.core.group import Group
from rollmux.core.intra_group import group_planning_times, node_loads, t_cycle, t_load
from rollmux.core.placement.why import CODE, Refusal

KT_MAX = 8         # training-node prefixes indexed; jobs needing more are checked on the first KT_MAX
MARGIN = 1e-6      # relative slack on every bound: rounding can never exclude a valid group


def progress_rows(progress: Mapping[str, tuple[int, float]], job_ids: Sequence[str]) -> np.ndarray:
    """(iterations done, seconds elapsed) per job id as an (n, 2) array, NaN where the job has
    no progress. A progress view answers in one `rows` call (a scan reads every member of
    every surviving group, and a method call per look-up through stacked views cost more
    than the rest of the scan); any other mapping is read entry by entry."""
    rows = getattr(progress, "rows", None)
    return rows(job_ids) if rows is not None else rows_by_entry(progress, job_ids)


def rows_by_entry(progress: Mapping[str, tuple[int, float]], job_ids: Sequence[str]) -> np.ndarray:
    """`progress_rows` read one `get` per job id."""
    nan = (np.nan, np.nan)
    return np.array([progress.get(j, nan) for j in job_ids], dtype=float).reshape(-1, 2)


@dataclass(frozen=True)
class GroupBounds:
    """Closed-form planning aggregates of one group (what the index stores per slot)."""

    size: int
    n_train: int
    shaped: bool             # planned (has a shape); an unplanned group is never a candidate
    unsaturated: bool
    t_cycle_s: float         # the shape's natural cycle (inf if unplanned)
    lb_s: float              # max(T_cycle, T_load) of the group itself: a newcomer only adds to it
    train_gb: tuple[float, ...]    # prefix max of host DRAM over the first 1..KT_MAX training nodes
    train_load: tuple[float, ...]  # prefix max of planned training seconds over the same prefixes
    train0_sw: float         # node 0's load plus the switches it would pay with one more member
    rollout_min_sw: float    # least loaded rollout node, switches with one more member included


def group_bounds(g: Group, cfg: IntraConfig) -> GroupBounds:
    """The aggregates of `g` under planning configuration `cfg`."""
    members = g.members
    times = group_planning_times(members, cfg) if members else []
    w = cfg.warm_switch_s
    r_ld, r_cnt, t_ld, t_cnt = node_loads(members, g.n_rollout, g.n_train, times)
    gb = g.train_gb
    pre_gb, pre_ld = [], []
    hi_gb = hi_ld = 0.0
    for n in range(KT_MAX):
        if n < g.n_train:
            hi_gb, hi_ld = max(hi_gb, gb[n]), max(hi_ld, t_ld[n])
        pre_gb.append(hi_gb)
        pre_ld.append(hi_ld)

    def sw(c: int) -> float:  # the switch term of t_load on a node with c members
        return w * c if c > 1 else 0.0

    lb = max(t_cycle(members, times), t_load(members, g.n_rollout, g.n_train, times, w)) if members else 0.0
    shape = g.shape
    return GroupBounds(
        size=len(members), n_train=g.n_train, shaped=shape is not None,
        unsaturated=shape is not None and shape.status == "unsaturated",
        t_cycle_s=shape.t_cycle_s if shape is not None else float("inf"), lb_s=lb,
        train_gb=tuple(pre_gb), train_load=tuple(pre_ld),
        train0_sw=(t_ld[0] + sw(t_cnt[0] + 1)) if g.n_train else 0.0,
        rollout_min_sw=min((ld + sw(c + 1) for ld, c in zip(r_ld, r_cnt)), default=0.0),
    )


@dataclass(frozen=True)
class JobNeeds:
    """What one job asks of a group, for the vectorized exclusion pass."""

    kt: int                 # training nodes it needs
    train_gb: float         # host DRAM per training node
    own_train: float        # planned training seconds
    slack_new: float        # its own period budget
    max_size: int           # groups at this many members are full
    t_cap: float            # host DRAM per training node
    prune: bool             # the paper's pruning of saturated/full groups


class GroupIndex:
    """Per-group aggregates in flat arrays, kept in step with the groups."""

    def __init__(self, intra: IntraConfig) -> None:
        self.intra = intra
        self.version = 0
        self._slot: dict[int, int] = {}      # group id -> slot
        self._groups: list[Group | None] = []
        self._ids: list[tuple[str, ...]] = []  # member job ids per slot, for the budget look-ups
        self._n = 0                          # slots used (live or dead)
        self._bkey: object | None = None  # budget_bounds' cache: the progress key it holds for
        self._bval = np.zeros(0)
        self._alloc(64)

    def _alloc(self, cap: int) -> None:
        self._size = np.zeros(cap, np.int64)
        self._ntrain = np.zeros(cap, np.int64)
        self._ok = np.zeros(cap, bool)       # live and planned
        self._live = np.zeros(cap, bool)
        self._unsat = np.zeros(cap, bool)
        self._tcyc = np.full(cap, np.inf)
        self.lb = np.full(cap, np.inf)
        self._gb = np.zeros((cap, KT_MAX))
        self._tld = np.zeros((cap, KT_MAX))
        self.train0_sw = np.zeros(cap)
        self.rollout_min_sw = np.zeros(cap)
        # Members' SLO budget terms (period_budget): JobSpec.slo_budget_s, and
        # iterations; padding beyond a group's members is never read.
        self._width = getattr(self, "_width", 5)
        self._mS = np.zeros((cap, self._width))
        self._mI = np.zeros((cap, self._width))

    def _arrays(self) -> tuple[str, ...]:
        return ("_size", "_ntrain", "_ok", "_live", "_unsat", "_tcyc", "lb", "_gb", "_tld", "train0_sw",
                "rollout_min_sw", "_mS", "_mI")

    def _grow(self) -> None:
        cap = len(self._size) * 2
        for name in self._arrays():
            a = getattr(self, name)
            b = np.zeros((cap,) + a.shape[1:], a.dtype)
            b[:len(a)] = a
            setattr(self, name, b)

    def __len__(self) -> int:
        return len(self._slot)

    def _widen(self, width: int) -> None:
        for name in ("_mS", "_mI"):
            a = getattr(self, name)
            b = np.zeros((len(a), width))
            b[:, :a.shape[1]] = a
            setattr(self, name, b)
        self._width = width

    def put(self, g: Group) -> None:
        """Add the group, or update it in place (an update keeps its position)."""
        if len(g.members) > self._width:
            self._widen(max(len(g.members), 2 * self._width))
        s = self._slot.get(g.group_id)
        if s is None:
            if self._n == len(self._size):
                self._grow()
            s = self._slot[g.group_id] = self._n
            self._n += 1
            self._groups.append(g)
            self._ids.append(())
        self._groups[s] = g
        self._ids[s] = tuple(m.job.job_id for m in g.members)
        if s < len(self._bval):
            self._bval[s] = np.nan
        b = group_bounds(g, self.intra)
        self._size[s], self._ntrain[s] = b.size, b.n_train
        self._live[s], self._ok[s], self._unsat[s] = True, b.shaped, b.unsaturated
        self._tcyc[s], self.lb[s] = b.t_cycle_s, b.lb_s
        self._gb[s], self._tld[s] = b.train_gb, b.train_load
        self.train0_sw[s], self.rollout_min_sw[s] = b.train0_sw, b.rollout_min_sw
        for i, m in enumerate(g.members):
            j = m.job
            self._mS[s, i] = j.slo_budget_s
            self._mI[s, i] = j.iterations
        self.version += 1

    def discard(self, group_id: int) -> None:
        """Forget the group (if present)."""
        s = self._slot.pop(group_id, None)
        if s is None:
            return
        self._groups[s] = None
        self._live[s] = self._ok[s] = False
        self.version += 1
        if self._n > 1024 and len(self._slot) * 2 < self._n:
            self._compact()

    def clear(self) -> None:
        """Forget every group."""
        self.__init__(self.intra)

    def _compact(self) -> None:
        # Live slots keep their relative order, so slot order stays the insertion order.
        keep = np.flatnonzero(self._live[:self._n])
        for name in self._arrays():
            a = getattr(self, name)
            b = np.zeros_like(a)
            b[:len(keep)] = a[keep]
            setattr(self, name, b)
        self._groups = [self._groups[i] for i in keep]
        self._ids = [self._ids[i] for i in keep]
        self._slot = {g.group_id: i for i, g in enumerate(self._groups)}
        self._n = len(keep)
        self._bkey = None  # slots moved

    def snapshot(self, groups: tuple[Group, ...], hidden: Iterable[int] = ()) -> "IndexSnapshot | None":
        """The index as seen by a view of `groups` (the live groups less `hidden` ids, in order);
        None if they do not match (then the policy scans without it)."""
        live = self._live[:self._n].copy()
        for gid in hidden:
            s = self._slot.get(gid)
            if s is not None:
                live[s] = False
        slots = np.flatnonzero(live)
        if len(slots) != len(groups):
            return None
        return IndexSnapshot(self, self.version, groups, slots, frozenset(hidden))

    def small(self, k: int) -> list[Group]:
        """Live groups of at most `k` members, in slot (insertion) order."""
        sel = np.flatnonzero(self._live[:self._n] & (self._size[:self._n] <= k))
        return [self._groups[s] for s in sel]

    def may_take(self, need: JobNeeds) -> np.ndarray:
        """True for every slot (of all slots in use) whose group might still take the job."""
        n, m = self._n, 1.0 + MARGIN
        thr = need.slack_new * (1 + 1e-9) * m
        mask = self._ok[:n] & (self._size[:n] < need.max_size) & (self._tcyc[:n] <= need.slack_new * m)
        mask &= self.lb[:n] <= thr
        if need.prune:
            mask &= self._unsat[:n]
        if need.kt:
            col = min(need.kt, KT_MAX) - 1
            mask &= self._ntrain[:n] >= need.kt
            mask &= self._gb[:n, col] + need.train_gb <= need.t_cap * m
            mask &= self._tld[:n, col] + need.own_train <= thr
            mask &= self.train0_sw[:n] + need.own_train <= thr
        return mask

    def refusal_codes(self, need: JobNeeds) -> np.ndarray:
        """Per slot in use, the code (index in placement/why.py REFUSALS) of the first check in the
        attribution order that `may_take` fails, -1 where it may take the job. Each bound
        proves its reason: the structural ones are the checks themselves, the period bounds
        are lower bounds of the exact period, so exceeding a budget proves an SLO refusal
        (coded newcomer_slo; whose budget binds, the newcomer's or a member's, is for the
        caller to tell from the members' budgets)."""
        n, m = self._n, 1.0 + MARGIN
        thr = need.slack_new * (1 + 1e-9) * m
        slo = (self._tcyc[:n] > need.slack_new * m) | (self.lb[:n] > thr)
        checks = [(self._size[:n] >= need.max_size, CODE[Refusal.GROUP_SIZE]),
                  (~self._ok[:n], CODE[Refusal.UNPLANNED])]
        if need.prune:
            checks.append((~self._unsat[:n], CODE[Refusal.SATURATED]))
        if need.kt:
            col = min(need.kt, KT_MAX) - 1
            checks += [(self._ntrain[:n] < need.kt, CODE[Refusal.TRAIN_SHAPE]),
                       (self._gb[:n, col] + need.train_gb > need.t_cap * m, CODE[Refusal.RESIDENCY])]
            slo |= (self._tld[:n, col] + need.own_train > thr) | (self.train0_sw[:n] + need.own_train > thr)
        checks.append((slo, CODE[Refusal.NEWCOMER_SLO]))
        codes = np.full(n, -1, np.int8)
        for failed, code in reversed(checks):  # the first failing check in the order is written last
            codes[failed] = code
        return codes

    def budget_bounds(self, slots: np.ndarray, progress: Mapping[str, tuple[int, float]]) -> np.ndarray:
        """At least the least member period budget (admission.period_budget) of each slot's group:
        exact for an uncharged view, an upper bound for a charged one.

        A charged view (a tentative regroup charging migrations) only lowers budgets, so its
        `uncharged()` base bounds it from above, and a filter by these bounds never excludes
        a group the exact check accepts. Every tentative plan of one departure pass reads the
        same base, so the bounds are cached per slot until that slot's group or the base
        changes (`put` forgets the slot's bound)."""
        if not len(slots):
            return np.zeros(0)
        uncharged = getattr(progress, "uncharged", None)
        base = uncharged() if uncharged is not None else None
        key = base.snapshot_key() if base is not None else None
        if key is None:
            return self._min_budgets(slots, progress)
        if self._bkey is not key:
            self._bkey, self._bval = key, np.full(self._n, np.nan)
        elif len(self._bval) < self._n:
            self._bval = np.concatenate((self._bval, np.full(self._n - len(self._bval), np.nan)))
        vals = self._bval[slots]
        miss = np.isnan(vals)
        if miss.any():
            vals[miss] = self._bval[slots[miss]] = self._min_budgets(slots[miss], base)
        return vals

    def _min_budgets(self, slots: np.ndarray, progress: Mapping[str, tuple[int, float]]) -> np.ndarray:
        # Computed as admission.period_budget does, member by member, vectorized; the progress of all
        # the members is read in one `progress_rows` call.
        sizes = self._size[slots]
        cols = np.arange(self._width)[None, :] < sizes[:, None]
        S, iters = self._mS[slots][cols], self._mI[slots][cols]
        if not (type(progress) is dict and not progress):  # (a Mapping's len() may be O(all jobs))
            ids = list(chain.from_iterable(map(self._ids.__getitem__, slots.tolist())))
            dp = np.nan_to_num(progress_rows(progress, ids), nan=0.0)
            budgets = (S - dp[:, 1]) / (np.maximum(iters - dp[:, 0], 0.0) + 1.0)
        else:
            budgets = S / (iters + 1.0)
        starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
        return np.minimum.reduceat(budgets, starts)

    def group_at(self, slot: int) -> Group | None:
        """The group in a slot."""
        return self._groups[slot]


@dataclass(frozen=True, eq=False)
class IndexSnapshot:
    """The index as one view sees it: `slots[i]` holds `groups[i]`."""

    index: GroupIndex
    version: int
    groups: tuple[Group, ...]
    slots: np.ndarray
    hidden: frozenset[int] = frozenset()

    @property
    def current(self) -> bool:
        """Nothing changed since the snapshot was taken."""
        return self.version == self.index.version

    def _slot_of(self, group_id: int) -> int | None:
        return None if group_id in self.hidden else self.index._slot.get(group_id)

    def position(self, group_id: int) -> int | None:
        """Where the group sits in `groups` (None if absent or hidden); valid while current."""
        s = self._slot_of(group_id)
        if s is None:
            return None
        pos = int(np.searchsorted(self.slots, s))
        return pos if pos < len(self.slots) and self.slots[pos] == s else None

    def find(self, group_id: int) -> Group | None:
        """The group with this id among `groups` (None if absent or hidden); valid while current."""
        s = self._slot_of(group_id)
        return None if s is None else self.index._groups[s]


class IndexedGroups(dict):
    """dict[group_id, Group] whose every write also updates a `GroupIndex`."""

    def __init__(self, intra: IntraConfig) -> None:
        super().__init__()
        self.index = GroupIndex(intra)
        # Ids of groups that appeared or lost a member since the consolidation pass last
        # took them (ClusterState.consolidation_candidates): the only ones with new room.
        self.roomier: set[int] = set()
        self._values: tuple[Group, ...] | None = None

    def __setitem__(self, gid: int, g: Group) -> None:
        old = self.get(gid)
        if old is None or len(g.members) < len(old.members):
            self.roomier.add(gid)
        super().__setitem__(gid, g)
        self.index.put(g)
        self._values = None

    def __delitem__(self, gid: int) -> None:
        super().__delitem__(gid)
        self.index.discard(gid)
        self.roomier.discard(gid)
        self._values = None

    def pop(self, gid, *default):
        """dict.pop, index kept in step."""
        out = super().pop(gid, *default)
        self.index.discard(gid)
        self.roomier.discard(gid)
        self._values = None
        return out

    def popitem(self):
        """dict.popitem, index kept in step."""
        gid, g = super().popitem()
        self.index.discard(gid)
        self.roomier.discard(gid)
        self._values = None
        return gid, g

    def setdefault(self, gid, default=None):
        """dict.setdefault, index kept in step."""
        if gid not in self:
            self[gid] = default
        return self[gid]

    def update(self, *args, **kwargs) -> None:
        """dict.update, index kept in step."""
        for gid, g in dict(*args, **kwargs).items():
            self[gid] = g

    def __ior__(self, other):
        self.update(other)
        return self

    def clear(self) -> None:
        """dict.clear, index kept in step."""
        super().clear()
        self.index.clear()
        self.roomier.clear()
        self._values = None

    def values_tuple(self) -> tuple[Group, ...]:
        """tuple(self.values()), cached until the next write."""
        if self._values is None:
            self._values = tuple(self.values())
        return self._values

    def values_without(self, hidden: Iterable[int]) -> tuple[Group, ...]:
        """The values in order, less the groups with these ids; slices of the cached tuple
        (a dissolving group or two are hidden from most views)."""
        full = self.values_tuple()
        live = self.index._live
        cut = sorted(int(np.count_nonzero(live[:self.index._slot[gid]])) for gid in hidden if gid in self)
        if not cut:
            return full
        parts, start = [], 0
        for p in cut:
            parts.append(full[start:p])
            start = p + 1
        parts.append(full[start:])
        return tuple(chain.from_iterable(parts)) if len(parts) > 8 else sum(parts, ())

    def __reduce__(self):
        return (_rebuild, (self.index.intra, list(self.items())))


def _rebuild(intra: IntraConfig, items: list[tuple[int, Group]]) -> IndexedGroups:
    d = IndexedGroups(intra)
    for gid, g in items:
        d[gid] = g
    return d
