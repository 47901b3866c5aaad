"""Runtime controller of one co-execution group: permits for phases, round-robin per node.

A job asks for a phase (`request`); the controller grants it when it is the
job's turn on every node the phase is pinned to and those nodes are free; the
job later reports its rollout tail-bound (`tail_started`, long-tail migration)
and releases the phase (`release`).

Phases: `rollout` and `train` take turns per node (below). `init` (a job's
start: its state is built on its nodes, then offloaded) holds every node of
the job in both pools: it waits until they are all free and no migrated tail
runs there, and while it waits no other phase starts on them (so it cannot
starve); it does not move the turn order. `sync` (the trainer's weights into
the rollout workers' host-resident copy, over the inter-pool link) holds no
node: it is granted at once and its release frees nothing. The simulator
models sync the same way (a delay after the training release, before the next
rollout request, with no node held) and has no init (an arrival is placed
with its state built).

A permit names the worker slots it covers (core/grant.py). The controller never
measures time itself beyond reading the environment's clock, so the same class
serves the simulator (virtual time, simulated jobs) and the live plane (wall
clock, real jobs behind the job shim).
"""

from __future__ import annotations

from typing import Any, Callable

from rollmux.core.config import IntraConfig
from rollmux.core.env import Environment
from rollmux.core.grant import LINK, Grant, worker_slots
from rollmux.core.group import Group
from rollmux.core.intra_group import tail_share
from rollmux.core.turns import Turns
from rollmux.core.vocabulary import Phase

# (bound once: the permit checks are the simulator's hottest code; a phase's pool has its name)
ROLLOUT, TRAIN, INIT, SYNC = (p.value for p in (Phase.ROLLOUT, Phase.TRAIN, Phase.INIT, Phase.SYNC))  # (vocabulary.py)
CONTROLLED = tuple(p.value for p in Phase)  # phases a controller grants: init, rollout, train, sync


_UNKNOWN: Any = object()  # a node's turn, not computed since the turn order last changed


class _NodeState:
    __slots__ = ("pinned", "holder", "last", "tails", "turn", "slots", "kept", "since")

    def __init__(self) -> None:
        self.pinned: list[str] = []       # members pinned here
        self.turn: str | None = _UNKNOWN  # whose turn it is (cached; see _grantable_now)
        self.holder: str | None = None    # job running its (head) phase here
        self.last: str | None = None      # job whose state is loaded
        self.tails: dict[str, float] = {}  # migrated tails still running: job -> worker share
        self.slots: tuple[int, ...] | None = None  # worker slots of the holder's rollout (None = all)
        self.kept: dict[str, tuple[int, ...]] = {}  # worker slots of each migrated tail
        self.since = 0.0  # (env time) when it was last freed or its turn order changed (core/turns.py)


def _recount(count: int, old_rate: int, new_rate: int) -> int:
    """A member's phase count when its rate changes: the same meta-iteration, the same
    occurrence in it where the new rate has one (else its last)."""
    if old_rate == new_rate:
        return count
    return (count // old_rate) * new_rate + min(count % old_rate, new_rate - 1)


class GroupController(Turns):
    """Round-robin permit controller of one group (DESIGN §4, §8); weighted by the group's
    planned rates under the SLO order (core/slo_order.py); a member that does not ask for its
    turn can be skipped (core/turns.py)."""

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
        self._rate: dict[str, int] = {}    # iterations per meta-iteration (SLO order; 1 = round robin)
        self._slots: dict[str, tuple[int, ...]] = {}  # each member's slots in a meta-iteration
        self._weighted = False             # some rate > 1
        self._held: set[str] = set()       # reserved for migrants that have not arrived
        self._absent: dict[str, str] = {}  # skipped until they ask again (core/turns.py)
        self._free_at: dict[str, float] = {}  # when each member last released a phase
        self._cold: dict[str, float] = {}  # arrived migrants: switch time of their first rollout
        # Settled: a dispatch ran to the end since the state last changed, so no pending
        # request can be granted; a new request then needs only its own check.
        self._settled = False
        self._depth = 0                    # dispatches in progress (a grant's callback may re-enter)
        self._freed = 0                    # releases, tails and withdrawals so far (see _dispatch)
        self._inits: dict[str, set[int]] = {ROLLOUT: set(), TRAIN: set()}  # nodes a pending init waits for
        self.units, self._keep_n = worker_slots(cfg)  # worker slots per node; a tail keeps these
        self._all_kept = tuple(range(self.units))[:self._keep_n]  # what a tail keeps of a whole node
        # Called once before the next membership change (the simulator's lone-member fast path
        # brings this controller up to date there; see `advance`).
        self.before_change: Callable[[], None] | None = None
        self.update_group(group)

    # -- membership -----------------------------------------------------------------
    # Turn order: each node serves its members' next phases in increasing key
    # (meta-iteration, position in the cyclic order). In steady state this is
    # round-robin; because one total order is shared by every node and each job's
    # own phases have increasing keys, the smallest pending key can always run,
    # so joins, departures and re-orderings can never deadlock the group. Under the
    # SLO order a member's c-th phase of a pool has key (c // rate, its (c % rate)-th
    # slot in the planned `GroupShape.slots`), as in `intra_group.schedule`: the same
    # argument holds.
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
        meta_t, old_rate = self._meta[TRAIN], self._rate
        current = min((meta_t[j] // old_rate.get(j, 1) for j in meta_t if j not in self._held
                       and j not in self._absent), default=0)
        ids = [m.job_id for m in group.members]
        self._held &= set(ids)
        self._absent = {j: p for j, p in self._absent.items() if j in ids}
        seq = group.shape.slots if group.shape is not None else ()
        if seq and sorted(set(seq)) != list(range(len(ids))):
            seq = ()  # (slots planned for another member list: round robin)
        rate = {j: seq.count(i) if seq else 1 for i, j in enumerate(ids)}
        # A rate change recounts the training count; the rollout count keeps its lead of 0 or
        # 1 over it (a granted rollout whose training has not been granted), else the job's
        # next training key would precede a rollout it must run first (a deadlock).
        t_old, r_old = self._meta[TRAIN], self._meta[ROLLOUT]
        t_new = {j: _recount(t_old[j], old_rate.get(j, 1), rate[j]) if j in t_old else current * rate[j]
                 for j in ids}
        self._meta = {TRAIN: t_new, ROLLOUT: {j: t_new[j] + (r_old[j] - t_old[j] if j in t_old else 0)
                                              for j in ids}}
        seq = seq or tuple(range(len(ids)))
        self._rate, self._weighted = rate, any(r > 1 for r in rate.values())
        self._slots = {j: tuple(s for s, k in enumerate(seq) if k == i) for i, j in enumerate(ids)}
        self._pos = {j: i for i, j in enumerate(ids)}
        self.group = group
        self._members = {m.job_id: m for m in group.members}  # Group.member scans: this is hot
        self._repin()
        self._dispatch()

    def _repin(self) -> None:
        """Each node's members in the turn order (not held, not absent); its turn counts as come now."""
        now, out = self.env.now(), self._held | self._absent.keys()
        for pool in (ROLLOUT, TRAIN):
            for idx, node in enumerate(self.nodes[pool]):
                node.pinned = [m.job_id for m in self.group.members
                               if idx in self._pins(m, pool) and m.job_id not in out]
                node.turn, node.since = _UNKNOWN, now

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
            node.turn = _UNKNOWN  # its key moves on
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

    def cold_start(self, job_id: str, switch_s: float) -> None:
        """The member's next rollout permit carries `switch_s`: its state is not resident on
        the rollout nodes it is pinned to now (a re-pin, core/repair/compaction.py)."""
        self._cold[job_id] = switch_s
        self._settled = False

    @staticmethod
    def _pins(member, pool: str) -> tuple[int, ...]:
        return member.rollout_nodes if pool == ROLLOUT else member.train_nodes

    def _key(self, meta: dict[str, int]) -> Callable[[str], tuple[int, int]]:
        """A member's turn key on a pool whose phase counts are `meta` (see update_group)."""
        if not self._weighted:
            pos = self._pos
            return lambda j: (meta[j], pos[j])
        rate, slots = self._rate, self._slots
        return lambda j: (meta[j] // rate[j], slots[j][meta[j] % rate[j]])

    def _turn(self, pool: str, node: _NodeState) -> str | None:
        if not node.pinned:
            return None
        return min(node.pinned, key=self._key(self._meta[pool]))

    def whose_turn(self) -> dict[str, list[str | None]]:
        """For each pool, the job whose turn it is on each node (None if no member)."""
        return {p: [self._turn(p, n) for n in ns] for p, ns in self.nodes.items()}

    # -- the permit protocol ----------------------------------------------------------
    def request(self, job_id: str, phase: str, on_grant: Callable[[Grant], None]) -> None:
        """Ask for a permit; `on_grant` is called (maybe at once) when it is granted."""
        member = self._members[job_id]  # unknown job -> KeyError
        if phase not in CONTROLLED:
            raise ValueError(f"unknown phase {phase!r}; use one of {CONTROLLED}")
        if phase == SYNC:  # holds no node (module docstring): granted at once
            on_grant(Grant(self.group.group_id, job_id, SYNC, LINK, (), 0.0, self.env.now(), 0.0))
            return
        if phase == INIT:  # no other phase starts on its nodes until it has run
            self._inits[ROLLOUT].update(member.rollout_nodes)
            self._inits[TRAIN].update(member.train_nodes)
        self._pending[(job_id, phase)] = on_grant
        if self._settled and not self._depth and phase != INIT:
            # Every other request was already blocked and nothing else changed, and a grant
            # never unblocks another request (it only takes nodes): only this one can run.
            if self._grantable_now(job_id, phase):
                # Still settled afterwards unless the callback changed something (every
                # change clears the flag).
                self._depth += 1
                try:
                    self._grant(job_id, phase, on_grant)
                finally:
                    self._depth -= 1
            return
        self._dispatch()

    def tail_started(self, job_id: str) -> None:
        """The job's rollout is tail-bound: stragglers move to a few workers, nodes free up."""
        share = self.cfg.tail_worker_frac
        for idx in self._members[job_id].rollout_nodes:
            node = self.nodes[ROLLOUT][idx]
            if node.holder == job_id:
                node.holder, node.since = None, self.env.now()
                node.tails[job_id] = share
                node.kept[job_id] = self._kept_slots(node.slots)
                node.slots = None
        self._migrating.add(job_id)
        self._freed += 1
        self._dispatch()

    def release(self, job_id: str, phase: str) -> None:
        """The job finished `phase`: its nodes (and any tail workers) are free."""
        member = self._members[job_id]
        self._free_at[job_id] = now = self.env.now()
        if phase == SYNC:
            return  # it held nothing
        pools = (ROLLOUT, TRAIN) if phase == INIT else (ROLLOUT if phase == ROLLOUT else TRAIN,)
        for pool in pools:
            for idx in self._pins(member, pool):
                node = self.nodes[pool][idx]
                node.tails.pop(job_id, None)
                node.kept.pop(job_id, None)
                if node.holder == job_id:
                    node.holder, node.since = None, now
        self._migrating.discard(job_id)
        self._freed += 1
        self._dispatch()

    def withdraw(self, job_id: str) -> None:
        """Forget the job's pending requests and free every node it holds (a crashed job)."""
        for key in [k for k in self._pending if k[0] == job_id]:
            del self._pending[key]
        self._reset_inits()
        for nodes in self.nodes.values():
            for node in nodes:
                node.tails.pop(job_id, None)
                node.kept.pop(job_id, None)
                if node.holder == job_id:
                    node.holder, node.since = None, self.env.now()
        self._migrating.discard(job_id)
        self._freed += 1
        self._dispatch()

    def export_state(self) -> dict:
        """Turn order, holders and tails as JSON-native data (pending requests are not state:
        their callers ask again)."""
        return {"meta": self._meta, "migrating": sorted(self._migrating), "held": sorted(self._held),
                "cold": dict(self._cold), **({"absent": dict(self._absent)} if self._absent else {}),
                "nodes": {p: [{"holder": n.holder, "last": n.last, "tails": n.tails,
                               "slots": None if n.slots is None else list(n.slots),
                               "kept": {j: list(k) for j, k in n.kept.items()}} for n in ns]
                          for p, ns in self.nodes.items()}}

    def import_state(self, d: dict) -> None:
        """Adopt an exported state (of a controller of the same group)."""
        self._settled = False
        self._meta = {p: dict(m) for p, m in d["meta"].items()}
        self._migrating = set(d["migrating"])
        self._held, self._cold = set(d.get("held", ())), dict(d.get("cold", {}))
        self._absent = dict(d.get("absent", {}))  # (older states: none)
        self._repin()
        for pool, states in d["nodes"].items():
            for node, st in zip(self.nodes[pool], states, strict=True):
                node.holder, node.last, node.tails = st["holder"], st["last"], dict(st["tails"])
                node.turn = _UNKNOWN
                slots = st.get("slots")  # absent in states exported before worker slots
                node.slots = None if slots is None else tuple(slots)
                node.kept = {j: tuple(k) for j, k in st.get("kept", {}).items()}

    def idle_rollout_nodes(self) -> set[int]:
        """Rollout nodes no phase holds, no migrated tail runs on and no init waits for; empty
        while a lone member's iteration is played in one step (`before_change`: not known)."""
        if self.before_change is not None:
            return set()
        inits = self._inits[ROLLOUT]
        return {i for i, n in enumerate(self.nodes[ROLLOUT]) if n.holder is None and not n.tails and i not in inits}

    def any_tails(self, idxs: tuple[int, ...]) -> bool:
        """True when a migrated tail still runs on one of these rollout nodes."""
        nodes = self.nodes[ROLLOUT]
        return any(nodes[i].tails for i in idxs)

    def tails_on(self, idx: int) -> dict[str, float]:
        """Migrated tails still running on rollout node `idx`."""
        return dict(self.nodes[ROLLOUT][idx].tails)

    # -- internals --------------------------------------------------------------------
    def _kept_slots(self, held: tuple[int, ...] | None) -> tuple[int, ...]:
        """The worker slots a tail keeps: the lowest `tail_worker_frac * units` of those it held."""
        return self._all_kept if held is None else held[:self._keep_n]

    def _free_slots(self, node: _NodeState) -> tuple[int, ...]:
        """The worker slots of a rollout node that no migrated tail keeps."""
        taken = {s for k in node.kept.values() for s in k}
        return tuple(s for s in range(self.units) if s not in taken)

    def _reset_inits(self) -> None:
        """Recompute the nodes pending inits wait for (after one is granted or withdrawn)."""
        self._inits = {ROLLOUT: set(), TRAIN: set()}
        for job_id, phase in self._pending:
            if phase == INIT:
                m = self._members[job_id]
                self._inits[ROLLOUT].update(m.rollout_nodes)
                self._inits[TRAIN].update(m.train_nodes)

    def _init_ready(self, job_id: str) -> bool:
        """Every node of the job is free, with no migrated tail on it (an init may start)."""
        m = self._members[job_id]
        return (all(self.nodes[ROLLOUT][i].holder is None and not self.nodes[ROLLOUT][i].tails
                    for i in m.rollout_nodes)
                and all(self.nodes[TRAIN][i].holder is None for i in m.train_nodes))

    def _grant_init(self, job_id: str, cb: Callable[[Grant], None]) -> None:
        """Hold every node of the job for its init (the turn order does not move)."""
        m = self._members[job_id]
        for pool in (ROLLOUT, TRAIN):
            for i in self._pins(m, pool):
                node = self.nodes[pool][i]
                node.holder = node.last = job_id
        del self._pending[(job_id, INIT)]
        self._reset_inits()
        cb(Grant(self.group.group_id, job_id, INIT, ROLLOUT, m.rollout_nodes, 0.0, self.env.now(), 0.0,
                 units=self.units, train_held=m.train_nodes))

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
        pool_nodes, meta = self.nodes[pool], self._meta[phase]
        inits = self._inits[pool]
        if inits and not inits.isdisjoint(idxs):
            return False  # an init waits for these nodes
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
                # Cached until a key of a job pinned here changes (a grant or `advance` moves
                # the granted job's key on its own nodes; membership changes reset every node).
                turn = node.turn
                if turn is _UNKNOWN:
                    turn = node.turn = min(pinned, key=self._key(meta))
                if turn != job_id:
                    return False
            if pool == ROLLOUT and node.tails and sum(node.tails.values()) > 1.0 - self.cfg.start_ratio + 1e-12:
                return False
        return True

    def _dispatch(self) -> None:
        # Grants every pending request that can run, in request order. A grant only takes
        # nodes, so it never unblocks another request; a pass is repeated only when a
        # callback freed something meanwhile (a release, a tail, a withdrawal).
        pending = self._pending
        self._settled = False
        if not pending:
            self._settled = True
            return
        self._depth += 1
        try:
            again = True
            while again:
                freed = self._freed
                for (job_id, phase), cb in list(pending.items()):
                    if pending.get((job_id, phase)) is not cb:
                        continue  # a callback's own dispatch already granted it (this pass's list is stale)
                    if phase == INIT:
                        if self._init_ready(job_id):
                            self._grant_init(job_id, cb)
                    elif self._grantable_now(job_id, phase):
                        self._grant(job_id, phase, cb)
                again = self._freed != freed
        finally:
            self._depth -= 1
        self._settled = not self._depth

    def _grant(self, job_id: str, phase: str, cb: Callable[[Grant], None]) -> None:
        """Grant a pending rollout or training request that `_grantable_now` allows."""
        member = self._members[job_id]
        pool = ROLLOUT if phase == ROLLOUT else TRAIN
        idxs = member.rollout_nodes if pool == ROLLOUT else member.train_nodes
        pool_nodes = self.nodes[pool]
        nodes = [pool_nodes[i] for i in idxs]
        switch = self.cfg.warm_switch_s if any(n.last not in (None, job_id) for n in nodes) else 0.0
        if pool == ROLLOUT and job_id in self._cold:
            switch = self._cold.pop(job_id)
        shared = pool == ROLLOUT and any(len(n.pinned) > 1 for n in nodes)
        for n in nodes:
            n.holder = job_id
            n.last = job_id
            n.turn = _UNKNOWN  # its key moves on
        self._meta[pool][job_id] += 1
        del self._pending[(job_id, phase)]
        if pool == ROLLOUT:
            cb(self._rollout_grant(job_id, idxs, nodes, switch, tail_share(member.job, shared, self.cfg)))
        else:
            cb(Grant(self.group.group_id, job_id, phase, pool, idxs, switch, self.env.now(), 0.0))

    def _rollout_grant(self, job_id: str, idxs: tuple[int, ...], nodes: list[_NodeState], switch: float,
                       share: float) -> Grant:
        """A rollout permit with its worker slots (computed only where tails make them matter)."""
        workers: tuple[tuple[int, ...], ...] = ()
        keep: tuple[tuple[int, ...], ...] = ()
        if any(n.kept for n in nodes):
            workers = tuple(self._free_slots(n) for n in nodes)
            for n, w in zip(nodes, workers):
                n.slots = w
        else:
            for n in nodes:
                n.slots = None
        if share > 0:
            keep = tuple(self._kept_slots(n.slots) for n in nodes)
        return Grant(self.group.group_id, job_id, ROLLOUT, ROLLOUT, idxs, switch, self.env.now(), share,
                     units=self.units, workers=workers, keep=keep)
