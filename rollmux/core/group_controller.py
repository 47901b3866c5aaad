"""Runtime controller of one co-execution group: permits for phases, round-robin per node.

A job asks for a phase (`request`); the controller grants it when it is the
job's turn on every node the phase is pinned to and those nodes are free; the
job later reports its rollout tail-bound (`tail_started`, long-tail migration)
and releases the phase (`release`). The controller never measures time itself
beyond reading the environment's clock, so the same class serves the
simulator (virtual time, simulated jobs) and the live plane (wall clock, real
jobs behind the job shim).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from rollmux.core.env import Environment
from rollmux.core.group import Group
from rollmux.core.intra_group import IntraConfig, tail_share

ROLLOUT, TRAIN = "rollout", "train"


@dataclass(frozen=True)
class Grant:
    """A permit: job `job_id` may run `phase` on `nodes` of `pool` after a `switch_s` load."""

    group_id: int
    job_id: str
    phase: str
    pool: str
    nodes: tuple[int, ...]
    switch_s: float
    granted_at: float
    tail_share: float  # tail fraction the job should migrate (0 = no migration)
    epoch: int = 0     # the job's placement count (live plane): a change means it was moved


class _NodeState:
    __slots__ = ("pinned", "holder", "last", "tails")

    def __init__(self) -> None:
        self.pinned: list[str] = []       # members pinned here
        self.holder: str | None = None    # job running its (head) phase here
        self.last: str | None = None      # job whose state is loaded
        self.tails: dict[str, float] = {}  # migrated tails still running: job -> worker share


class GroupController:
    """Round-robin permit controller of one group (DESIGN §4, §8)."""

    def __init__(self, env: Environment, group: Group, cfg: IntraConfig) -> None:
        self.env = env
        self.cfg = cfg
        self.group = group
        self.nodes = {ROLLOUT: [_NodeState() for _ in range(group.n_rollout)],
                      TRAIN: [_NodeState() for _ in range(group.n_train)]}
        self._pending: dict[tuple[str, str], Callable[[Grant], None]] = {}
        self._migrating: set[str] = set()
        self._meta: dict[str, dict[str, int]] = {ROLLOUT: {}, TRAIN: {}}
        self._pos: dict[str, int] = {}
        self._held: set[str] = set()       # reserved for migrants that have not arrived
        self._cold: dict[str, float] = {}  # arrived migrants: switch time of their first rollout
        # Settled: a dispatch ran to the end since the state last changed, so no pending
        # request can be granted; a new request then needs only its own check.
        self._settled = False
        self._depth = 0                    # dispatches in progress (a grant's callback may re-enter)
        # Called once before the next membership change (the simulator's lone-member fast path
        # brings this controller up to date there; see `advance`).
        self.before_change: Callable[[], None] | None = None
        self.update_group(group)

    # -- membership -----------------------------------------------------------------
    # Turn order: each node serves its members' next phases in increasing key
    # (meta-iteration, position in the cyclic order). In steady state this is
    # round-robin; because one total order is shared by every node and each job's
    # own phases have increasing keys, the smallest pending key can always run,
    # so joins, departures and re-orderings can never deadlock the group.
    def update_group(self, group: Group, rollout_map: dict[int, int] | None = None) -> None:
        """Adopt a new member list/order; newcomers start at the current meta-iteration.

        `rollout_map` (old -> new index of every kept rollout node) renumbers the
        nodes after a shrink; dropped nodes must be idle.
        """
        hook, self.before_change = self.before_change, None
        if hook is not None:
            hook()
        if rollout_map is not None:
            kept = sorted(rollout_map, key=rollout_map.get)
            self.nodes[ROLLOUT] = [self.nodes[ROLLOUT][i] for i in kept]
        for pool, count in ((ROLLOUT, group.n_rollout), (TRAIN, group.n_train)):
            del self.nodes[pool][count:]
            while len(self.nodes[pool]) < count:
                self.nodes[pool].append(_NodeState())
        # A newcomer joins the meta-iteration in progress (the earliest any member
        # has not finished), at its position in the new order.
        meta_t = self._meta[TRAIN]
        current = min((meta_t[j] for j in meta_t if j not in self._held), default=0)
        ids = [m.job_id for m in group.members]
        self._held &= set(ids)
        for pool in (ROLLOUT, TRAIN):
            self._meta[pool] = {j: self._meta[pool].get(j, current) for j in ids}
        self._pos = {j: i for i, j in enumerate(ids)}
        self.group = group
        self._members = {m.job_id: m for m in group.members}  # Group.member scans: this is hot
        for pool in (ROLLOUT, TRAIN):
            for idx, node in enumerate(self.nodes[pool]):
                node.pinned = [m.job_id for m in group.members
                               if idx in self._pins(m, pool) and m.job_id not in self._held]
        self._dispatch()

    def solo_ready(self, job_id: str) -> bool:
        """True when `job_id` is the only member, nothing is pending, held or migrating, no
        cold start waits for it and every node is idle: its next iteration cannot interact
        with anyone until the membership changes."""
        if len(self.group.members) != 1 or self._pending or self._held or self._migrating or self._cold:
            return False
        return all(n.holder is None and not n.tails for ns in self.nodes.values() for n in ns)

    def switch_for(self, job_id: str, pool: str) -> float:
        """The switch a permit of `pool` would carry for `job_id` now (warm if another job's
        state is loaded on one of its nodes)."""
        m = self._members[job_id]
        nodes = self.nodes[pool]
        idxs = m.rollout_nodes if pool == ROLLOUT else m.train_nodes
        return self.cfg.warm_switch_s if any(nodes[i].last not in (None, job_id) for i in idxs) else 0.0

    def advance(self, job_id: str, pool: str, holding: bool) -> None:
        """Record a phase `job_id` ran without asking (a lone member's iteration, played in one
        step by the simulator): its turn moves on and its state is loaded on its nodes; with
        `holding` it still runs the phase there."""
        m = self._members[job_id]
        for i in (m.rollout_nodes if pool == ROLLOUT else m.train_nodes):
            node = self.nodes[pool][i]
            node.last = job_id
            if holding:
                node.holder = job_id
        self._meta[pool][job_id] += 1
        self._settled = False

    def hold(self, job_id: str) -> None:
        """Keep `job_id` out of the turn order (a reserved slot); call before `update_group`."""
        self._settled = False
        self._held.add(job_id)

    def activate(self, job_id: str, switch_s: float) -> None:
        """A held member arrives: it joins the meta-iteration in progress, and its first
        rollout permit carries `switch_s` (its migration: state moved, cold start)."""
        self._held.discard(job_id)
        for pool in (ROLLOUT, TRAIN):
            self._meta[pool].pop(job_id, None)
        if switch_s > 0:
            self._cold[job_id] = switch_s
        self.update_group(self.group)

    @staticmethod
    def _pins(member, pool: str) -> tuple[int, ...]:
        return member.rollout_nodes if pool == ROLLOUT else member.train_nodes

    def _turn(self, pool: str, node: _NodeState) -> str | None:
        if not node.pinned:
            return None
        meta = self._meta[pool]
        return min(node.pinned, key=lambda j: (meta[j], self._pos[j]))

    def whose_turn(self) -> dict[str, list[str | None]]:
        """For each pool, the job whose turn it is on each node (None if no member)."""
        return {p: [self._turn(p, n) for n in ns] for p, ns in self.nodes.items()}

    # -- the permit protocol ----------------------------------------------------------
    def request(self, job_id: str, phase: str, on_grant: Callable[[Grant], None]) -> None:
        """Ask for a permit; `on_grant` is called (maybe at once) when it is granted."""
        self._members[job_id]  # unknown job -> KeyError
        self._pending[(job_id, phase)] = on_grant
        if self._settled and not self._depth and not self._grantable_now(job_id, phase):
            return  # every other request was already blocked and nothing else changed
        self._dispatch()

    def tail_started(self, job_id: str) -> None:
        """The job's rollout is tail-bound: stragglers move to a few workers, nodes free up."""
        share = self.cfg.tail_worker_frac
        for idx in self._members[job_id].rollout_nodes:
            node = self.nodes[ROLLOUT][idx]
            if node.holder == job_id:
                node.holder = None
                node.tails[job_id] = share
        self._migrating.add(job_id)
        self._dispatch()

    def release(self, job_id: str, phase: str) -> None:
        """The job finished `phase`: its nodes (and any tail workers) are free."""
        member = self._members[job_id]
        pool = ROLLOUT if phase == ROLLOUT else TRAIN
        for idx in self._pins(member, pool):
            node = self.nodes[pool][idx]
            node.tails.pop(job_id, None)
            if node.holder == job_id:
                node.holder = None
        self._migrating.discard(job_id)
        self._dispatch()

    def withdraw(self, job_id: str) -> None:
        """Forget the job's pending requests and free every node it holds (a crashed job)."""
        for key in [k for k in self._pending if k[0] == job_id]:
            del self._pending[key]
        for nodes in self.nodes.values():
            for node in nodes:
                node.tails.pop(job_id, None)
                if node.holder == job_id:
                    node.holder = None
        self._migrating.discard(job_id)
        self._dispatch()

    def export_state(self) -> dict:
        """Turn order, holders and tails as JSON-native data (pending requests are not state:
        their callers ask again)."""
        return {"meta": self._meta, "migrating": sorted(self._migrating), "held": sorted(self._held),
                "cold": dict(self._cold),
                "nodes": {p: [{"holder": n.holder, "last": n.last, "tails": n.tails} for n in ns]
                          for p, ns in self.nodes.items()}}

    def import_state(self, d: dict) -> None:
        """Adopt an exported state (of a controller of the same group)."""
        self._settled = False
        self._meta = {p: dict(m) for p, m in d["meta"].items()}
        self._migrating = set(d["migrating"])
        self._held, self._cold = set(d.get("held", ())), dict(d.get("cold", {}))
        for pool, states in d["nodes"].items():
            for node, st in zip(self.nodes[pool], states, strict=True):
                node.holder, node.last, node.tails = st["holder"], st["last"], dict(st["tails"])

    def tails_on(self, idx: int) -> dict[str, float]:
        """Migrated tails still running on rollout node `idx`."""
        return dict(self.nodes[ROLLOUT][idx].tails)

    # -- internals --------------------------------------------------------------------
    def _grantable(self, job_id: str, phase: str, nodes: list[_NodeState]) -> bool:
        for node in nodes:
            if node.holder is not None or self._turn(phase, node) != job_id:
                return False
            if phase == ROLLOUT and sum(node.tails.values()) > 1.0 - self.cfg.start_ratio + 1e-12:
                return False
        return True

    def _grantable_now(self, job_id: str, phase: str) -> bool:
        """`_grantable` for a pending request, inlined (this is the simulator's hottest check)."""
        member = self._members[job_id]
        if phase == ROLLOUT:
            pool, idxs = ROLLOUT, member.rollout_nodes
        else:
            pool, idxs = TRAIN, member.train_nodes
        pool_nodes, meta, pos = self.nodes[pool], self._meta[phase], self._pos
        for i in idxs:
            node = pool_nodes[i]
            pinned = node.pinned
            if node.holder is not None or not pinned:
                return False
            # Its turn: the smallest (meta-iteration, position) pinned here (positions are
            # distinct, so the minimum is unique), as `_turn` computes it.
            if len(pinned) == 1:
                if pinned[0] != job_id:
                    return False
            else:
                mine = (meta[job_id], pos[job_id]) if job_id in meta else None
                if mine is None or job_id not in pinned or any((meta[j], pos[j]) < mine for j in pinned):
                    return False
            if pool == ROLLOUT and node.tails and sum(node.tails.values()) > 1.0 - self.cfg.start_ratio + 1e-12:
                return False
        return True

    def _dispatch(self) -> None:
        # Grants every pending request that can run, in request order, until a pass grants
        # nothing (a grant's callback may ask again).
        pending = self._pending
        self._settled = False
        if not pending:
            self._settled = True
            return
        self._depth += 1
        try:
            progressed = True
            while progressed:
                progressed = False
                for (job_id, phase), cb in list(pending.items()):
                    if not self._grantable_now(job_id, phase):
                        continue
                    member = self._members[job_id]
                    pool = ROLLOUT if phase == ROLLOUT else TRAIN
                    idxs = member.rollout_nodes if pool == ROLLOUT else member.train_nodes
                    nodes = [self.nodes[pool][i] for i in idxs]
                    switch = self.cfg.warm_switch_s if any(n.last not in (None, job_id) for n in nodes) else 0.0
                    if pool == ROLLOUT and job_id in self._cold:
                        switch = self._cold.pop(job_id)
                    shared = pool == ROLLOUT and any(len(n.pinned) > 1 for n in nodes)
                    for n in nodes:
                        n.holder = job_id
                        n.last = job_id
                    self._meta[pool][job_id] += 1
                    del pending[(job_id, phase)]
                    share = tail_share(member.job, shared, self.cfg) if pool == ROLLOUT else 0.0
                    cb(Grant(self.group.group_id, job_id, phase, pool, idxs, switch, self.env.now(), share))
                    progressed = True
        finally:
            self._depth -= 1
        self._settled = not self._depth
