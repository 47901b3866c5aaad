"""The scheduler's cluster state, shared by every executor (simulator, live service).

`ClusterState` owns the groups, one `GroupController` per group, the node
ledger and the departure-time repairs. It decides placements through a pure
placement policy, validates every plan against the written invariants and
applies it; it never knows whether jobs are simulated or real. Executors feed
it arrivals and departures and tell it each job's progress.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Callable, Mapping, Sequence

import numpy as np

from rollmux.core.accounting import Ledger
from rollmux.core.colo_controller import ColocatedController
from rollmux.core.colo_model import colocated_group, colocated_iter_s, colocated_phases, group_gpus
from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.env import Environment
from rollmux.core.estimates import PhaseEstimate, measured_spec
from rollmux.core.group import Group, Member
from rollmux.core.group_controller import GroupController
from rollmux.core.intra_group import job_planning_times, plan_group
from rollmux.core.placement import (
    Case,
    ClusterView,
    Colocating,
    Explaining,
    JoinBounds,
    PlacementPlan,
    PlacementPolicy,
    ProgressView,
    Regrouping,
    Shaped,
    validate_plan,
)
from rollmux.core.placement.admission import group_fits
from rollmux.core.placement.index import IndexedGroups, IndexSnapshot, progress_rows
from rollmux.core.placement.why import WhyTally
from rollmux.core.repair.compaction import compactions, narrowed
from rollmux.core.repair.moves import (
    Move,
    OwedProgress,
    Regroup,
    migration_seconds,
    owed_by_members,
    plan_moves,
)
from rollmux.core.repair.pairing import Pairing, pair_decision
from rollmux.core.repair.regroup import colocated_stake, dissolve_decision, shrink
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.errors import InputError

Progress = Mapping[str, tuple[int, float]]  # job_id -> (iterations done, seconds since start)


# Co-located jobs a departure's consolidation pass tries to move into groups, at most.
COLO_TRIES = 4

# The IntraConfig fields that decide SLO admission: the policy admits a job by them and this
# executor re-plans and repairs groups by them (`group_fits`), so the two must agree.
ADMISSION_FIELDS = ("plan", "plan_quantile", "plan_z", "plan_chains", "plan_length", "order", "max_rate")


def check_same_admission(policy: PlacementPolicy, intra: IntraConfig) -> None:
    """InputError naming the fields where a policy's own planner view admits by other rules
    than the scheduler's; other fields (long-tail migration, switch time) may differ."""
    if not isinstance(policy, Regrouping):
        return
    own = policy.cfg
    diff = [f for f in ADMISSION_FIELDS if getattr(own, f) != getattr(intra, f)]
    if diff:
        shown = ", ".join(f"{f}={getattr(own, f)!r} vs {getattr(intra, f)!r}" for f in diff)
        raise InputError("policy", f"its SLO admission differs from the scheduler config's ({shown}): "
                                   "build the policy with build_policy(config, cluster)")


class ClusterState:
    """Groups, controllers and the ledger; placement, departures and regrouping."""

    def __init__(self, env: Environment, cluster: ClusterSpec, policy: PlacementPolicy,
                 cfg: SchedulerConfig) -> None:
        self.env, self.cluster, self.policy, self.cfg = env, cluster, policy, cfg
        self.intra = cfg.intra_for(cluster)  # the group planner's view (core/config.py)
        check_same_admission(policy, self.intra)
        # The policy's optional capabilities (core/placement.py), asked once.
        self.regroups = isinstance(policy, Regrouping)
        self.join_bounds = policy if isinstance(policy, JoinBounds) else None
        self.explains = isinstance(policy, Explaining) and policy.explains
        colocates = isinstance(policy, Colocating) and policy.colocate
        self.ledger = Ledger(cluster)
        # Every write to the groups also updates their placement index (core/group_index.py).
        self.groups: dict[int, Group] = IndexedGroups(self.intra)
        self._view_groups: tuple = (None, (), None)  # (key, groups, index snapshot) of the last view
        # A co-located job's controller grants its permits on its own training nodes (the live
        # plane asks it; the simulator plays co-located iterations without permits).
        self.controllers: dict[int, GroupController | ColocatedController] = {}
        self.dissolving: set[int] = set()
        self.cases: dict[str, int] = {}
        self.why = WhyTally()  # why isolated arrivals joined no group (plans that say: core/why.py)
        # Migrants with a reserved slot, not yet arrived: job -> (target group, move).
        self.arriving: dict[str, Move] = {}
        # Migrants that arrived but are not through their first iteration there: their
        # migration may still stall the group (with `arriving`: what `view` charges, `_owed`).
        self.settling: dict[str, Move] = {}
        # Policy time per decision: each arrival (or re-placement), and all the policy
        # calls one departure's repairs make together.
        self.decision_ms: dict[str, list[float]] = {"arrival": [], "departure": [], "repair": []}
        self.estimates: dict[str, PhaseEstimate] = {}
        self.planned: dict[str, JobSpec] = {}  # measured profiles that replaced declared ones
        self._next_gid = 0
        # Co-located jobs' own placements (core/colocate.py), apart from the groups: never a
        # candidate, never re-planned; with `colo_regroup` a consolidation pass may move one
        # into a group (as it dissolves a lone group). A policy with the mode on counts them.
        self.colocated: dict[int, Group] = {}
        self._pass_targets: set[int] | None = None  # the groups a consolidation pass found new room in
        self._compact_at: dict[int, float] = {}  # group -> earliest next compaction try
        self.compacted = 0  # rollout nodes given back by compaction
        if colocates:
            self.cases[Case.COLOCATED.value] = 0

    def view(self, progress: Progress) -> ClusterView:
        """A frozen snapshot for the policy (groups being dissolved are not offered).

        `progress` is read, not copied (a copy made every decision O(all jobs)): callers
        hand over a mapping they do not change while the decision runs."""
        if self.planned:  # jobs planned with measured profiles owe their past at measured times
            progress = _MeasuredProgress(progress, self.estimates, self.planned)
        owed_s = self._owed()
        if owed_s:  # every plan charges the migrations still pending into a group to its members
            progress = OwedProgress(progress, owed_by_members(
                [g for gid in owed_s if (g := self.groups.get(gid)) is not None], owed_s))
        pools = self.cluster.pools
        free = {p: (None if getattr(pools, p).max_nodes is None
                    else getattr(pools, p).max_nodes - self.ledger.nodes[p]) for p in ("rollout", "train")}
        groups, index = self._groups_in_view()
        return ClusterView(self.cluster, groups, free["rollout"], free["train"],
                           self.cfg.placement.max_group_size, self._next_gid, progress, index, owed_s)

    def _owed(self) -> dict[int, float]:
        """Group id -> migration seconds its members may still wait for: every move reserved
        into it and every migrant not yet through its first iteration there (conservative:
        all of each, until that iteration ends; they may come one after another)."""
        owed: dict[int, float] = {}
        for moves in (self.arriving, self.settling):
            for mv in moves.values():
                gid = mv.plan.group.group_id
                owed[gid] = owed.get(gid, 0.0) + mv.migration_s
        return owed

    def _groups_in_view(self) -> tuple[tuple[Group, ...], IndexSnapshot | None]:
        """The groups a view offers (dissolving ones hidden) and the index as of them,
        rebuilt only when a group or the dissolving set changed (a rebuild is O(groups))."""
        groups = self.groups
        if not isinstance(groups, IndexedGroups):  # replaced by a plain dict: no index
            return tuple(g for g in groups.values() if g.group_id not in self.dissolving), None
        key = (groups.index.version, frozenset(self.dissolving))
        if self._view_groups[0] != key:
            view_groups = groups.values_without(self.dissolving)
            self._view_groups = (key, view_groups, groups.index.snapshot(view_groups, self.dissolving))
        return self._view_groups[1], self._view_groups[2]

    def place(self, job: JobSpec, progress: Progress, arrival: bool = True) -> PlacementPlan | None:
        """Decide, validate and apply a placement for `job`; None if it must wait. An arrival
        placed co-located may found a group with a co-located job instead (`pair`)."""
        plan = self.decide(job, progress)
        if plan is None:
            return None
        pairing = self.pair(job, plan, progress) if arrival else None
        if pairing is not None:
            self.apply(pairing.plan, arrival)
            self.apply_regroup(pairing.regroup)
            return pairing.plan
        self.apply(plan, arrival)
        return plan

    def pair(self, job: JobSpec, plan: PlacementPlan, progress: Progress) -> Pairing | None:
        """With `colo_pair`, the validated pairing (core/pairing.py) of an arrival the policy
        placed co-located (`plan`) with a co-located job not already moving; None otherwise.
        Its time counts towards the arrival's decision."""
        if not (self.cfg.colocation.pair and plan.case == Case.COLOCATED and self.colocated):
            return None
        t0 = time.perf_counter()
        arriving = self.arriving
        idle = [g for gid, g in self.colocated.items()
                if gid not in self.dissolving and g.members[0].job_id not in arriving]
        view = self.view(progress)
        pairing = pair_decision(job, plan, view, idle, self.policy, self.cfg.regroup.migration_scale, self.cfg.regroup.margin)
        if pairing is not None:
            validate_plan(pairing.plan, job, view)
        if self.decision_ms["arrival"]:
            self.decision_ms["arrival"][-1] += (time.perf_counter() - t0) * 1e3
        return pairing

    def decide(self, job: JobSpec, progress: Progress) -> PlacementPlan | None:
        """The policy's validated plan for `job` (not applied); None if it must wait."""
        view = self.view(progress)
        t0 = time.perf_counter()
        plan = self.policy.place(job, view)
        self.decision_ms["arrival"].append((time.perf_counter() - t0) * 1e3)
        if plan is not None:
            validate_plan(plan, job, view)
        return plan

    def apply(self, plan: PlacementPlan, arrival: bool, held: bool = False) -> None:
        """Carry out a plan: pay for added nodes, install the group, update its controller.

        `held`: the slot is reserved for a migrant that has not arrived; its controller
        keeps it out of the turn order until `arrive`."""
        g, now = plan.group, self.env.now()
        self.ledger.provision("rollout", plan.added_rollout_nodes, now)
        self.ledger.provision("train", plan.added_train_nodes, now)
        if arrival:  # a migrating job was counted when it arrived
            self.cases[plan.case.value] = self.cases.get(plan.case.value, 0) + 1
            if plan.why is not None:
                self.why.add(plan.why)
        if plan.case == Case.COLOCATED:  # its training nodes, no group
            self.colocated[g.group_id] = g
            self.controllers[g.group_id] = ColocatedController(self.env, g, self.intra)
            self._next_gid = max(self._next_gid, g.group_id + 1)
            return
        self.groups[g.group_id] = g
        self._next_gid = max(self._next_gid, g.group_id + 1)
        ctl = self.controllers.get(g.group_id)
        if ctl is None:
            ctl = self.controllers[g.group_id] = GroupController(self.env, g, self.intra)
        if held:
            ctl.hold(plan.job_id)
        ctl.update_group(g)

    def apply_regroup(self, r: Regroup) -> None:
        """Carry out a regrouping: reserve every move's slot; a dissolved group is hidden from placement."""
        if r.dissolve:
            self.dissolving.add(r.group_id)
        for mv in r.moves:
            self.apply(mv.plan, arrival=False, held=True)
            self.arriving[mv.job_id] = mv

    def arrive(self, job_id: str) -> int:
        """A migrant left its old group: it takes its reserved slot; returns the group id.

        Its first rollout permit there carries the whole migration as its switch time."""
        mv = self.arriving.pop(job_id)
        self.settling[job_id] = mv
        gid = mv.plan.group.group_id
        self.controllers[gid].activate(job_id, mv.migration_s)
        return gid

    def forget(self, job_id: str) -> None:
        """The job ended: drop what was measured about it."""
        self.estimates.pop(job_id, None)
        self.planned.pop(job_id, None)
        self.settling.pop(job_id, None)

    def cancel_arrival(self, job_id: str) -> None:
        """A migrant ended before it moved: give its reserved slot back."""
        mv = self.arriving.pop(job_id, None)
        if mv is not None:
            self.controllers[mv.plan.group.group_id].activate(job_id, 0.0)
            self.leave(job_id, mv.plan.group.group_id)

    def leave(self, job_id: str, group_id: int) -> Group | None:
        """Remove the job from its group; return what is left (None if the group is gone)."""
        if group_id in self.colocated:  # a co-located job gives its training nodes back
            self.ledger.release("train", self.colocated.pop(group_id).n_train, self.env.now())
            del self.controllers[group_id]
            self.dissolving.discard(group_id)  # (it may have left for a group: colo_regroup)
            return None
        now, old = self.env.now(), self.groups[group_id]
        rest = Group(old.group_id, old.n_rollout, old.n_train,
                     tuple(m for m in old.members if m.job_id != job_id))
        if not rest.members:
            del self.groups[group_id], self.controllers[group_id]
            self.dissolving.discard(group_id)
            self._compact_at.pop(group_id, None)
            self.ledger.release("rollout", rest.n_rollout, now)
            self.ledger.release("train", rest.n_train, now)
            return None
        remap = None
        if self.cfg.regroup.shrink:
            rest, remap, freed_r, freed_t = shrink(rest)
            self.ledger.release("rollout", freed_r, now)
            self.ledger.release("train", freed_t, now)
        # Keep the order: a departure can only shorten the period, and a
        # re-ordering would cost the remaining members a transient.
        rest = plan_group(rest, self.intra, reorder=False)
        self.groups[group_id] = rest
        self.controllers[group_id].update_group(rest, remap)
        return rest

    def after_departure(self, rest: Group | None, progress: Progress,
                        commit: Callable[[Regroup], None] | None = None) -> list[str]:
        """Departure-time repairs; returns the jobs that migrate at their next boundary.

        Each decision is handed to `commit` (default: `apply_regroup`) before the next one
        is made, so later decisions see earlier reservations; the live plane journals it."""
        if not (self.cfg.regroup.enabled and self.regroups):
            return []
        commit = commit or self.apply_regroup
        t0 = time.perf_counter()
        movers = self._dissolve(rest, progress, commit) if rest is not None else []
        for g in self.consolidation_candidates(rest, progress):
            # The departure freed room: small groups elsewhere may now fit into others.
            # An earlier move of this pass may have reserved a slot in it: take it as it is now.
            now = self.groups.get(g.group_id) or self.colocated.get(g.group_id)
            if now is not None and now.size <= self.cfg.regroup.consolidate:
                # A co-located job was placed against the groups of its arrival: only those
                # with new room can take it now, so its (full) placement search looks there.
                within = self._pass_targets if g.group_id in self.colocated else None
                movers += self._dissolve(now, progress, commit, within)
        self.decision_ms["departure"].append((time.perf_counter() - t0) * 1e3)
        return movers

    def consolidation_candidates(self, rest: Group | None = None,
                                 progress: Progress | None = None) -> list[Group]:
        """The small groups a departure may have made movable, smallest first (stable order).

        Small: at most `consolidate` members, not dissolving. Room appears only in a group
        that lost a member (`rest`, what is left of the departed job's group; None: it is
        gone) or is new, and, under node caps, as freed nodes. So without caps a small group
        is revisited only when one of its members could join such a group: `rest` or one
        that appeared or lost a member since the last pass (`IndexedGroups.roomier`, taken
        and cleared here), by the policy's cheap necessary check `could_join` (as `join_matrix`);
        with caps, or with a policy without that check, every small group is. `rest` itself was just
        tried: left out. The pass adds and removes no group, so the list is taken once."""
        groups = self.groups
        self._pass_targets = None  # (set below when the pass knows which groups have new room)
        indexed = isinstance(groups, IndexedGroups)
        roomier = set(groups.roomier) if indexed else set()
        if indexed:
            groups.roomier.clear()
        k = self.cfg.regroup.consolidate
        if not k:
            return []
        small = (groups.index.small(k) if indexed else [g for g in groups.values() if len(g.members) <= k])
        skip = self.dissolving if rest is None else self.dissolving | {rest.group_id}
        if self.cfg.colocation.regroup:  # a co-located job is a group of one (on its own training nodes)
            small = list(small) + list(self.colocated.values())
        small = [g for g in small if g.group_id not in skip]
        pools = self.cluster.pools
        join_matrix = None if self.join_bounds is None else self.join_bounds.join_matrix
        if indexed and join_matrix is not None and pools.rollout.max_nodes is None and pools.train.max_nodes is None:
            if rest is not None:
                roomier.add(rest.group_id)
            targets = [groups[i] for i in sorted(roomier) if i in groups and i not in self.dissolving]
            if not targets:
                return []  # no room was freed anywhere
            self._pass_targets = {t.group_id for t in targets}
            view = self.view(progress if progress is not None else {})
            small = [g for g in small if g.members]  # (an empty segment would break reduceat)
            sizes = [len(g.members) for g in small]
            can = join_matrix(targets, [m.job for g in small for m in g.members], view)
            own = np.repeat([g.group_id for g in small], sizes)
            can &= own[:, None] != np.array([t.group_id for t in targets])[None, :]  # not its own group
            hit = np.logical_or.reduceat(can.any(axis=1), np.cumsum([0] + sizes[:-1])).tolist() if sizes else []
            small = [g for g, h in zip(small, hit) if h]
        small = self._fewer_colocated(small, progress if progress is not None else {})
        return sorted(small, key=lambda g: g.size)

    def _fewer_colocated(self, small: list[Group], progress: Progress) -> list[Group]:
        """At most COLO_TRIES co-located candidates, those whose own nodes would cost most over
        their remaining iterations first: each try is a full placement search, and co-located
        jobs outnumber the room a departure frees (on a 10,000-job trace, most of its time)."""
        colo = [g for g in small if g.group_id in self.colocated]
        if len(colo) <= COLO_TRIES:
            return small

        keep = {g.group_id for g in sorted(colo, key=lambda g: -colocated_stake(g, progress, self.cluster))[:COLO_TRIES]}
        return [g for g in small if g.group_id not in self.colocated or g.group_id in keep]

    def _dissolve(self, group: Group, progress: Progress,
                  commit: Callable[[Regroup], None] | None = None, within: set[int] | None = None) -> list[str]:
        """Dissolve the group if its members fit elsewhere (in the groups `within`, if given) for
        less than the moves cost; the movers."""
        gid = group.group_id
        if gid in self.dissolving or any(j in self.arriving for j in group.job_ids()):
            return []  # a group still waiting for a migrant is not moved again (hysteresis)
        self.dissolving.add(gid)  # hides it from the view below
        try:
            view = self.view(progress)
            if within is not None:  # (a few groups: no index needed to search them)
                view = replace(view, groups=tuple(g for g in view.groups if g.group_id in within), index=None)
            decision = dissolve_decision(group, view, self.policy, self.cfg.regroup.migration_scale,
                                         self.cfg.regroup.margin)
        finally:
            self.dissolving.discard(gid)
        if decision is None:
            return []
        (commit or self.apply_regroup)(decision)
        return list(group.job_ids())

    # -- drift repair ---------------------------------------------------------------------
    def observe(self, job_id: str, group_id: int, rollout_s: float, train_s: float, progress: Progress,
                commit: Callable[[Regroup], None] | None = None, rollout_factor: float | None = None,
                compact_commit: Callable[[int, int], None] | None = None) -> list[str]:
        """A member finished an iteration with these measured phase times (its rollout at
        `rollout_factor`, core/elastic.py; None: its member's factor now).

        When they move its measured profile (`estimates`) by more than 5% from what its
        group was planned with, the group is re-planned with measured times; if that plan
        breaks a member's SLO budget, members are evicted (slowest first) until it does
        not. Returns the evicted jobs (they migrate at their next boundary). Else the group
        may give back idle rollout nodes (`compact`, each drop through `compact_commit`)."""
        movers = self._repair(job_id, group_id, rollout_s, train_s, progress, commit, rollout_factor)
        if not movers:
            self.compact(group_id, progress, compact_commit)
        return movers

    @property
    def compacts(self) -> bool:
        """Rollout compaction is on and the policy may narrow rollouts (elastic rollout)."""
        return self.cfg.compaction.enabled and isinstance(self.policy, Shaped) and self.policy.shapes.elastic_rollout

    def compact(self, group_id: int, progress: Progress, commit: Callable[[int, int], None] | None = None) -> int:
        """Rollout compaction (core/compaction.py): drop the group's idle rollout nodes that its
        members can do without within their SLO budgets; the nodes dropped. Tried at most once
        per `compact_every_s` per group (an exact SLO check each), and only where the policy
        may narrow rollouts (elastic rollout). `commit(group_id, node)` carries out each drop
        (the live plane journals it first, then calls `apply_compaction`); None: applied here."""
        g = self.groups.get(group_id)
        if (g is None or g.n_rollout < 2 or not self.compacts or group_id in self.dissolving
                or any(j in self.arriving or j in self.settling for j in g.job_ids())):
            return 0  # (a migration still owed to the group: its members' budgets are charged elsewhere)
        now = self.env.now()
        if now < self._compact_at.get(group_id, 0.0):
            return 0
        ctl = self.controllers[group_id]
        idle = ctl.idle_rollout_nodes()
        if not idle:
            return 0  # (not a try: a later iteration's end may find a node idle)
        self._compact_at[group_id] = now + self.cfg.compaction.every_s
        if self.planned:
            progress = _MeasuredProgress(progress, self.estimates, self.planned)
        dropped = 0
        for g, drop in compactions(g, self.cluster, self.intra, progress, idle):
            if commit is None:
                self._adopt_compaction(g, drop)
            else:
                commit(group_id, drop)
            dropped += 1
        return dropped

    def apply_compaction(self, group_id: int, drop: int) -> None:
        """Carry out a compaction decided by `compact` (a live one, or one read back from the
        journal): the group without rollout node `drop`, its members there narrowed and the
        group re-planned exactly as the decision did (core/compaction.py `narrowed`)."""
        g = self.groups.get(group_id)
        cand = None if g is None or not 0 <= drop < g.n_rollout else narrowed(g, drop, self.cluster)
        if cand is None:
            raise ValueError(f"group {group_id} cannot give back rollout node {drop}")
        self._adopt_compaction(plan_group(cand, self.intra, reorder=False), drop)

    def _adopt_compaction(self, g: Group, drop: int) -> None:
        """The group `g` now runs without its former rollout node `drop`: release it, renumber the rest."""
        self.ledger.release("rollout", 1, self.env.now())
        self.groups[g.group_id] = g
        self.controllers[g.group_id].update_group(g, {n: n - (n > drop) for n in range(g.n_rollout + 1)
                                                      if n != drop})
        self.compacted += 1

    def _repair(self, job_id: str, group_id: int, rollout_s: float, train_s: float, progress: Progress,
                commit: Callable[[Regroup], None] | None, rollout_factor: float | None) -> list[str]:
        """Drift repair of `observe`: the evicted jobs."""
        self.settling.pop(job_id, None)  # a migrant's first iteration there: its stall is past
        if not (self.cfg.regroup.repair and self.regroups) or group_id in self.dissolving:
            return []  # only a policy with SLO admission repairs (baselines never check SLOs)
        if group_id in self.colocated:  # it shares nothing: no group to re-plan
            if self.cfg.colocation.regroup:  # (its measured profile serves a move only)
                self._observe_colocated(job_id, group_id, rollout_s, train_s)
            return []
        g = self.groups[group_id]
        member = g.member(job_id)
        # Measured against the profile: an elastic member's rollout (core/elastic.py) is brought
        # back to its nominal nodes first, else its factor would read as drift (either executor).
        factor = member.rollout_factor if rollout_factor is None else rollout_factor
        spec = self._measured(job_id, member.job, rollout_s / factor, train_s)
        if spec is None:
            return []
        t0 = time.perf_counter()
        members = tuple(Member(spec, m.rollout_nodes, m.train_nodes, m.rollout_factor) if m.job_id == job_id else m
                        for m in g.members)
        g = plan_group(Group(g.group_id, g.n_rollout, g.n_train, members), self.intra)
        self.groups[group_id] = g
        self.controllers[group_id].update_group(g)
        if self.planned:
            progress = _MeasuredProgress(progress, self.estimates, self.planned)
        movers = self._evict(g, progress, commit or self.apply_regroup)
        self.decision_ms["repair"].append((time.perf_counter() - t0) * 1e3)
        return movers

    def _measured(self, job_id: str, job: JobSpec, rollout_s: float, train_s: float) -> JobSpec | None:
        """Add one iteration's measured (nominal-shape, disaggregated) phase times to the job's
        estimate; its measured profile when that differs by more than 5% from `job`, the profile
        it is planned with now (it then replaces it in `planned`), else None."""
        est = self.estimates.get(job_id)
        if est is None:
            est = self.estimates[job_id] = PhaseEstimate(job)  # the declared profile
        est.observe(rollout_s, train_s)
        scales = est.scales()
        if est.accepted is not None and est.accepted[0] == scales and est.accepted[1] is job:
            return None
        spec = measured_spec(est.job, *scales)
        if abs(spec.solo_iter_s / job.solo_iter_s - 1) <= 0.05:
            est.accepted = (scales, job)
            return None
        self.planned[job_id] = spec
        return spec

    def _observe_colocated(self, job_id: str, group_id: int, rollout_s: float, train_s: float) -> None:
        """A co-located job's measured phase times, taken back to disaggregated ones by the veRL
        model's scales (of its declared profile, as it was placed): when they move its profile as
        in `observe`, it is planned with measured times from then on, so a later move into a
        group (`colo_regroup`) plans what it runs."""
        member = self.colocated[group_id].members[0]
        gpus = group_gpus(self.colocated[group_id], self.cluster)  # G, or a narrowed G'
        est = self.estimates.get(job_id)
        declared = member.job if est is None else est.job
        r_scale, t_scale, _ = colocated_phases(declared, self.cluster, 1.0, 1.0, self.cfg.colocation.speed, gpus)
        spec = self._measured(job_id, member.job, rollout_s / r_scale, train_s / t_scale)
        if spec is None:
            return
        planned_s = colocated_iter_s(spec, self.cluster, job_planning_times(spec, self.intra).rollout,
                                     self.cfg.colocation.speed, gpus)
        g = self.colocated[group_id] = colocated_group(group_id, spec, self.cluster, planned_s, gpus)
        self.controllers[group_id].update_group(g)

    def _evict(self, g: Group, progress: Progress, commit: Callable[[Regroup], None]) -> list[str]:
        """Move members out of `g` (re-planned) until its period fits every staying member's budget."""
        staying = [m for m in g.members if m.job_id not in self.arriving]
        movers: list[str] = []
        while len(staying) > 1:
            rest = plan_group(shrink(Group(g.group_id, g.n_rollout, g.n_train, tuple(staying)))[0],
                              self.intra)
            if group_fits(rest, progress, self.intra):  # the policy's own SLO admission test
                break
            victim = max(staying, key=lambda m: m.job.solo_iter_s)
            charges = {victim.job_id: migration_seconds(victim.job, self.cluster, self.cfg.regroup.migration_scale)}
            self.dissolving.add(g.group_id)  # not a target of its own eviction
            try:
                planned = plan_moves((victim,), g.group_id, self.view(progress), self.policy, charges,
                                     g.shape.period_s, isolated_ok=True)
            finally:
                self.dissolving.discard(g.group_id)
            if planned is None:
                break  # node caps: nowhere to go now; the group runs on as it is
            commit(Regroup(g.group_id, tuple(planned[0]), False))
            movers.append(victim.job_id)
            staying.remove(victim)
        return movers


class _MeasuredProgress(ProgressView):
    """Progress as the planner must read it for jobs planned with measured profiles (see
    `PhaseEstimate.elapsed_charge`); other jobs read through unchanged. Lazy: a copy of
    every job's progress per decision would cost O(all jobs)."""

    def __init__(self, base: Progress, estimates: Mapping[str, PhaseEstimate],
                 planned: Mapping[str, JobSpec]) -> None:
        self.base, self.estimates, self.planned = base, estimates, planned

    def get(self, job_id: str, default=None):
        """The job's progress as the planner reads it, or `default`."""
        got = self.base.get(job_id)
        if got is None:
            return default
        spec = self.planned.get(job_id)
        return got if spec is None else (got[0], got[1] + self.estimates[job_id].elapsed_charge(got[0], spec))

    def snapshot_key(self) -> object:
        """The base's: estimates and plans change only with events, each of which reads a
        new base, so views built on one base in one decision read the same entries."""
        base = self.base
        return base.snapshot_key() if isinstance(base, ProgressView) else None

    def rows(self, job_ids: Sequence[str]) -> np.ndarray:
        """(done, elapsed) as the planner reads them, NaN rows for jobs without progress."""
        out = progress_rows(self.base, job_ids)
        planned = self.planned
        if planned:
            for i, j in enumerate(job_ids):
                spec = planned.get(j)
                if spec is not None and not np.isnan(out[i, 0]):
                    out[i, 1] += self.estimates[j].elapsed_charge(int(out[i, 0]), spec)
        return out

    def __iter__(self):
        return iter(self.base)

    def __len__(self) -> int:
        return len(self.base)
