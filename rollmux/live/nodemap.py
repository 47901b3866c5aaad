"""Which machine each node of a placement is: the service's node map (DESIGN §8).

A placement names a group's nodes by index per pool (a member pinned to rollout node 1 of
group 7). Two members of one group must agree which machine that is, so the map belongs to
the scheduler, not to the jobs. `NodeMap` keeps the inventory (each live node id and its pool,
as Ray reports it: a node with the custom resource `rollout_pool` or `train_pool`) and the
bindings (group, pool, index) -> node id.

It changes only through `join`, `lose`, `bind` and `unbind`, each the effect of a journal
record, so a restarted service rebuilds the same map. `plan` says what a group's bindings
must become when its node counts change: every index that survives keeps its machine (a
shrink renumbers the indices still pinned 0..n-1, `remap`: old -> new), indices beyond the
new count free theirs, and new indices take the pool's free nodes, lowest id first (so the
choice is a function of the map, not of timing).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

POOLS = ("rollout", "train")
Key = tuple[int, str, int]  # (group id, pool, index in the group's nodes of that pool)


class NoCapacity(Exception):
    """A group needs more nodes of a pool than the inventory has free."""


@dataclass(frozen=True)
class Binding:
    """One binding to make (`node_id`) or drop (None) for (group, pool, index)."""

    group_id: int
    pool: str
    index: int
    node_id: str | None


@dataclass
class NodeMap:
    """The live inventory and the bindings of groups' node indices to its nodes."""

    pool_of: dict[str, str] = field(default_factory=dict)  # live node id -> its pool
    bound: dict[Key, str] = field(default_factory=dict)    # (group, pool, index) -> node id

    def join(self, node_id: str, pool: str) -> None:
        """A node of `pool` is alive (new, or back)."""
        if pool not in POOLS:
            raise ValueError(f"node {node_id}: pool must be one of {POOLS}, not {pool!r}")
        self.pool_of[node_id] = pool

    def lose(self, node_id: str) -> list[Key]:
        """The node is gone: it leaves the inventory; the bindings it held are dropped and returned."""
        self.pool_of.pop(node_id, None)
        lost = [k for k, n in self.bound.items() if n == node_id]
        for k in lost:
            del self.bound[k]
        return lost

    def capacity(self, pool: str) -> int:
        """Live nodes of the pool."""
        return sum(1 for p in self.pool_of.values() if p == pool)

    def free(self, pool: str) -> list[str]:
        """Live nodes of the pool no group holds, lowest id first."""
        held = set(self.bound.values())
        return sorted(n for n, p in self.pool_of.items() if p == pool and n not in held)

    def nodes(self, group_id: int, pool: str, indices: list[int] | tuple[int, ...]) -> list[str | None]:
        """The node ids of a group's indices of one pool (None where one is not bound)."""
        return [self.bound.get((group_id, pool, i)) for i in indices]

    def plan(self, group_id: int, counts: Mapping[str, int],
             remap: Mapping[str, Mapping[int, int]] | None = None) -> list[Binding]:
        """The bindings that give `group_id` `counts[pool]` nodes of each pool, `remap[pool]`
        renumbering surviving indices (old -> new; an old index absent from it is freed).
        NoCapacity (nothing planned) when a pool has too few free nodes."""
        out: list[Binding] = []
        for pool in POOLS:
            mine = {i: n for (g, p, i), n in self.bound.items() if g == group_id and p == pool}
            moves = remap.get(pool) if remap else None
            after = dict(mine) if moves is None else {moves[i]: n for i, n in mine.items() if i in moves}
            want = counts.get(pool, 0)
            after = {i: n for i, n in after.items() if i < want}
            missing = [i for i in range(want) if i not in after]
            free = self.free(pool)
            if len(missing) > len(free):
                raise NoCapacity(f"group {group_id} needs {len(missing)} more {pool} node(s); {len(free)} free")
            after.update(zip(missing, free))
            for i in sorted(set(mine) | set(after)):
                if mine.get(i) != after.get(i):
                    out.append(Binding(group_id, pool, i, after.get(i)))
        return out

    def apply(self, b: Binding) -> None:
        """Make or drop one binding."""
        key = (b.group_id, b.pool, b.index)
        if b.node_id is None:
            self.bound.pop(key, None)
        else:
            self.bound[key] = b.node_id

    def release(self, group_id: int) -> list[Binding]:
        """The bindings that free every node of the group (it is gone)."""
        return [Binding(g, p, i, None) for (g, p, i) in sorted(self.bound) if g == group_id]


def due(nodes: NodeMap, groups: Mapping[int, tuple[int, int]], renumbered: Mapping[int, Mapping[int, int]]
        ) -> list[int]:
    """The groups whose bindings no longer match their placement: gone (bound, not in `groups`),
    renumbered, or holding another count of nodes of a pool (`groups`: id -> (rollout, train)
    node counts), in id order."""
    held: dict[int, dict[str, int]] = {}
    for g, p, _ in nodes.bound:
        held.setdefault(g, {}).setdefault(p, 0)
        held[g][p] += 1
    out = set(held) - set(groups) | set(renumbered)
    for g, (r, t) in groups.items():
        if held.get(g, {}).get("rollout", 0) != r or held.get(g, {}).get("train", 0) != t:
            out.add(g)
    return sorted(out)
