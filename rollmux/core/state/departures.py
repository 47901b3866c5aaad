"""Departure-time repairs of a `ClusterState`: dissolve and consolidate (DESIGN §5, §5a).

When a job leaves, what is left of its group may fit elsewhere for less than it costs on
its own nodes; and the room it freed may let small groups elsewhere (co-located jobs too,
with `colo_regroup`) join others. Each move is priced against its migration (core/repair/regroup.py,
docs/decisions/regroup.md) and made only when it pays, with hysteresis: a group still waiting
for a migrant is not moved again.

Each decision is a `Movers` record (core/records.py) handed to `commit` before the next one
is made, so later decisions see earlier reservations; the movers go at their next iteration
boundary (`MoveOut`).
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable

import numpy as np

from rollmux.core.group import Group
from rollmux.core.placement.index import IndexedGroups
from rollmux.core.records import Movers
from rollmux.core.repair.fold import fold_decision
from rollmux.core.repair.regroup import colocated_stake, dissolve_decision
from rollmux.core.state.shared import Held, Progress
from rollmux.core.vocabulary import Mode

# Co-located jobs a departure's consolidation pass tries to move into groups, at most.
COLO_TRIES = 4

Commit = Callable[[Movers], object]  # carries out one decision (default: `ClusterState.apply`)


class Departures:
    """The departure-time repairs of one `ClusterState`."""

    def __init__(self, state: Held) -> None:
        self.state = state
        self._pass_targets: set[int] | None = None  # the groups a consolidation pass found new room in

    def after(self, rest: Group | None, progress: Progress, commit: Commit) -> list[str]:
        """Dissolve `rest` (what is left of the departed job's group; None: it is gone) if its
        members fit elsewhere for less, then consolidate; the jobs that migrate."""
        st = self.state
        if not (st.cfg.regroup.enabled and st.regroups):
            return []
        t0 = time.perf_counter()
        movers = self._dissolve(rest, progress, commit) if rest is not None else []
        if rest is not None and not movers and st.fold_terms is not None:
            movers = self._fold(rest, progress, commit)
        for g in self.candidates(rest, progress):
            # The departure freed room: small groups elsewhere may now fit into others.
            # An earlier move of this pass may have reserved a slot in it: take it as it is now.
            now = st.groups.get(g.group_id) or st.colocated.get(g.group_id)
            if now is not None and now.size <= st.cfg.regroup.consolidate:
                # A co-located job was placed against the groups of its arrival: only those
                # with new room can take it now, so its (full) placement search looks there.
                within = self._pass_targets if g.group_id in st.colocated else None
                movers += self._dissolve(now, progress, commit, within)
        st.decision_ms["departure"].append((time.perf_counter() - t0) * 1e3)
        return movers

    def candidates(self, rest: Group | None = None, progress: Progress | None = None) -> list[Group]:
        """The small groups a departure may have made movable, smallest first (stable order).

        Small: at most `consolidate` members, not dissolving, none that cannot be moved
        (`JobSpec.cannot`). Room appears only in a group that lost a member (`rest`, what is
        left of the departed job's group; None: it is gone) or is new, and, under node caps, as
        freed nodes. So without caps a small group is revisited only when one of its members
        could join such a group: `rest` or one that appeared or lost a member since the last
        pass (`IndexedGroups.roomier`, taken and cleared here), by the policy's cheap necessary
        check `could_join` (as `join_matrix`); with caps, or with a policy without that check,
        every small group is. `rest` itself was just tried: left out. The pass adds and removes
        no group, so the list is taken once."""
        st = self.state
        groups = st.groups
        self._pass_targets = None  # (set below when the pass knows which groups have new room)
        indexed = isinstance(groups, IndexedGroups)
        roomier = set(groups.roomier) if indexed else set()
        if indexed:
            groups.roomier.clear()
        k = st.cfg.regroup.consolidate
        if not k:
            return []
        small = (groups.index.small(k) if indexed else [g for g in groups.values() if len(g.members) <= k])
        skip = st.dissolving if rest is None else st.dissolving | {rest.group_id}
        if st.cfg.colocation.regroup:  # a co-located job is a group of one (on its own training nodes)
            small = list(small) + list(st.colocated.values())
        small = [g for g in small if g.group_id not in skip and all(m.job.can(Mode.MOVE) for m in g.members)]
        pools = st.cluster.pools
        join_matrix = None if st.join_bounds is None else st.join_bounds.join_matrix
        if indexed and join_matrix is not None and pools.rollout.max_nodes is None and pools.train.max_nodes is None:
            if rest is not None:
                roomier.add(rest.group_id)
            small = self._could_join(small, roomier, join_matrix, progress)
            if small is None:
                return []  # no room was freed anywhere
        small = self._fewer_colocated(small, progress if progress is not None else {})
        return sorted(small, key=lambda g: g.size)

    def _could_join(self, small: list[Group], roomier: set[int], join_matrix, progress: Progress | None
                    ) -> list[Group] | None:
        """The small groups one of whose members could join a group with new room (`roomier`),
        by the policy's cheap necessary check; None when no group has new room."""
        st = self.state
        groups = st.groups
        targets = [groups[i] for i in sorted(roomier) if i in groups and i not in st.dissolving]
        if not targets:
            return None
        self._pass_targets = {t.group_id for t in targets}
        view = st.view(progress if progress is not None else {})
        small = [g for g in small if g.members]  # (an empty segment would break reduceat)
        sizes = [len(g.members) for g in small]
        can = join_matrix(targets, [m.job for g in small for m in g.members], view)
        own = np.repeat([g.group_id for g in small], sizes)
        can &= own[:, None] != np.array([t.group_id for t in targets])[None, :]  # not its own group
        hit = np.logical_or.reduceat(can.any(axis=1), np.cumsum([0] + sizes[:-1])).tolist() if sizes else []
        return [g for g, h in zip(small, hit) if h]

    def _fewer_colocated(self, small: list[Group], progress: Progress) -> list[Group]:
        """At most COLO_TRIES co-located candidates, those whose own nodes would cost most over
        their remaining iterations first: each try is a full placement search, and co-located
        jobs outnumber the room a departure frees (docs/decisions/colocation-regroup.md)."""
        colocated = self.state.colocated
        colo = [g for g in small if g.group_id in colocated]
        if len(colo) <= COLO_TRIES:
            return small
        cluster = self.state.cluster
        keep = {g.group_id for g in sorted(colo, key=lambda g: -colocated_stake(g, progress, cluster))[:COLO_TRIES]}
        return [g for g in small if g.group_id not in colocated or g.group_id in keep]

    def _dissolve(self, group: Group, progress: Progress, commit: Commit, within: set[int] | None = None) -> list[str]:
        """Dissolve the group if its members fit elsewhere (in the groups `within`, if given) for
        less than the moves cost; the movers."""
        st = self.state
        gid = group.group_id
        if gid in st.dissolving or any(j in st.arriving for j in group.job_ids()):
            return []  # a group still waiting for a migrant is not moved again (hysteresis)
        st.dissolving.add(gid)  # hides it from the view below
        try:
            view = st.view(progress)
            if within is not None:  # (a few groups: no index needed to search them)
                view = replace(view, groups=tuple(g for g in view.groups if g.group_id in within), index=None)
            decision = dissolve_decision(group, view, st.policy, st.cfg.regroup.migration_scale,
                                         st.cfg.regroup.margin, st.fold_terms)
        finally:
            st.dissolving.discard(gid)
        if decision is None:
            return []
        commit(Movers.of_regroup(decision))
        return list(group.job_ids())

    def _fold(self, group: Group, progress: Progress, commit: Commit) -> list[str]:
        """Move a lone member to co-location when that pays (core/repair/fold.py); the mover."""
        st = self.state
        if len(group.members) != 1 or group.group_id in st.dissolving or group.members[0].job_id in st.arriving:
            return []
        colo = st.cfg.colocation
        decision = fold_decision(group, st.view(progress), st.intra, colo.speed,
                                 colo.narrow and st.cfg.shapes.elastic_rollout, st.fold_terms)
        if decision is None:
            return []
        commit(Movers.of_regroup(decision))
        return list(group.job_ids())
