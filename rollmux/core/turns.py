"""Turns no member holds hostage: a group member that does not ask for its turn loses it (a mixin of
`GroupController`).

A member whose turn it is on a free node, while a mate pinned there waits for that node, holds
the mate hostage if it never asks (a deadlocked driver whose heartbeat thread lives on). The
controller says who does so and since when its turn came (`blocking`: the later of the node
becoming free or its turn order changing, and the member's own last release); the executor
owns the clock and the grace (the live plane: live/supervision.py), and journals what it
decides as a `turn` record, carried out here:

- `skip`: the member is absent. It is out of every node's turn order, as a held migrant is,
  so its mates' phases are granted; it keeps its counts.
- `rejoin`: it asked again. It comes back at a fair place: its next rollout and training
  come right after the last ones granted to the members present (at its position in the
  cyclic order, so in steady state the plain round robin resumes), never before them (it
  does not jump the turn order) and never at counts below its own (it gains no turn it
  skipped). Its rollout count keeps its lead of 0 or 1 over its training count
  (update_group's argument: the smallest pending key can always run, so this cannot
  deadlock the group).

A member that holds a node, runs a migrated tail or has a request pending is never blocking;
a member alone on its nodes never blocks anyone.
"""

from __future__ import annotations

from typing import Any, Callable

from rollmux.core.vocabulary import Phase

ROLLOUT, TRAIN = Phase.ROLLOUT.value, Phase.TRAIN.value


class Turns:
    """Who holds a group's turn without asking, and the absent members (a mixin of GroupController)."""

    env: Any
    nodes: dict[str, list[Any]]
    group: Any
    _absent: dict[str, str]      # member -> the pool whose turn it did not ask for
    _free_at: dict[str, float]   # member -> when it last released a phase (env time)
    _pending: dict[tuple[str, str], Callable]
    _meta: dict[str, dict[str, int]]
    _rate: dict[str, int]
    _pos: dict[str, int]
    _slots: dict[str, tuple[int, ...]]
    _weighted: bool
    _held: set[str]
    _members: dict[str, Any]
    _settled: bool

    def _turn(self, pool: str, node: Any) -> str | None: ...
    def _pins(self, member: Any, pool: str) -> tuple[int, ...]: ...
    def _repin(self) -> None: ...
    def _dispatch(self) -> None: ...

    def blocking(self) -> list[tuple[str, str, float]]:
        """(member, pool, since) for each member whose turn it is on a free node a mate waits
        for, that holds nothing here and asks for nothing: `since` (env time) is when that turn came."""
        if not self._pending:
            return []
        busy = {n.holder for ns in self.nodes.values() for n in ns} | {j for n in self.nodes[ROLLOUT] for j in n.tails}
        asking = {j for j, _ in self._pending}
        found: dict[tuple[str, str], float] = {}
        for job_id, pool in self._pending:
            if pool not in (ROLLOUT, TRAIN):
                continue
            for i in self._pins(self._members[job_id], pool):
                node = self.nodes[pool][i]
                turn = self._turn(pool, node) if node.holder is None else None
                if turn is None or turn == job_id or turn in asking or turn in busy:
                    continue
                since = max(node.since, self._free_at.get(turn, node.since))
                found[(turn, pool)] = max(since, found.get((turn, pool), since))
        return [(j, p, s) for (j, p), s in found.items()]

    def absent(self) -> dict[str, str]:
        """The absent members, each with the pool whose turn it did not ask for."""
        return dict(self._absent)

    def skip(self, job_id: str, pool: str) -> None:
        """The member lost its turn: the round robin goes on without it until it `rejoin`s."""
        self._absent[job_id] = pool
        self._changed()

    def rejoin(self, job_id: str) -> None:
        """The absent member asked again: back in the turn order at a fair place (module docstring)."""
        if self._absent.pop(job_id, None) is None:
            return
        meta_t, meta_r = self._meta[TRAIN], self._meta[ROLLOUT]
        present = [j for j in self._pos if j != job_id and j not in self._held and j not in self._absent]
        # The last key granted (or passed over by a newcomer) of each pool among the members present.
        last_r = max((self._key_at(j, meta_r[j] - 1) for j in present if meta_r[j] > 0), default=(-1, -1))
        last_t = max((self._key_at(j, meta_t[j] - 1) for j in present if meta_t[j] > 0), default=(-1, -1))
        lead, count = meta_r[job_id] - meta_t[job_id], meta_t[job_id]
        count = max(count, (last_t[0] - 1) * self._rate[job_id])  # (a long absence: skip to near the end)
        while self._key_at(job_id, count + lead) <= last_r or self._key_at(job_id, count) <= last_t:
            count += 1
        meta_t[job_id], meta_r[job_id] = count, count + lead
        self._changed()

    def _key_at(self, job_id: str, count: int) -> tuple[int, int]:
        """The turn key of a member's `count`-th phase of a pool (GroupController._key)."""
        if not self._weighted:
            return count, self._pos[job_id]
        rate = self._rate[job_id]
        return count // rate, self._slots[job_id][count % rate]

    def _changed(self) -> None:
        """The turn order changed: every node's turn is recomputed and counts as come now."""
        self._settled = False
        self._repin()
        self._dispatch()
