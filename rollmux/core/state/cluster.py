"""The scheduler's cluster state, shared by every executor (simulator, live service): decide, then apply.

`ClusterState` owns the groups, one `GroupController` per group, the node ledger and the
slots reserved for migrants. Like Kueue's scheduler it decides on a snapshot, then applies:
`decide` hands the placement policy a frozen `view`, validates its plan against the written
invariants (DESIGN §3) and returns the records that carry it out (core/records.py) without
changing anything; `apply` carries out one record through one table. The repairs decide on
their own snapshots and hand each decision to a `commit` callback as a record: the
departure-time repairs (`Departures`, DESIGN §5a) and the drift repair and compaction
(`DriftRepair`). The simulator applies every record at once (a null journal); the live
service journals it, then applies it, and a restart replays the journal through the same
`apply`. It never knows whether jobs are simulated or real.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Callable

from rollmux.core.accounting import Ledger
from rollmux.core.colo_controller import ColocatedController
from rollmux.core.config import IntraConfig, SchedulerConfig
from rollmux.core.env import Environment
from rollmux.core.estimates import PhaseEstimate
from rollmux.core.group import Group
from rollmux.core.group_controller import GroupController
from rollmux.core.intra_group import plan_group
from rollmux.core.placement import (
    ClusterView,
    Colocating,
    Explaining,
    JoinBounds,
    PlacementPlan,
    PlacementPolicy,
    Regrouping,
    Shaped,
    validate_plan,
)
from rollmux.core.placement.costs import FoldTerms
from rollmux.core.placement.index import IndexedGroups, IndexSnapshot
from rollmux.core.placement.why import WhyTally
from rollmux.core.placement.options.isolated import isolated_plan
from rollmux.core.records import Compact, Leave, MoveOut, Movers, MoversV1, Place, Profiled
from rollmux.core.repair.moves import Move, OwedProgress, owed_by_members
from rollmux.core.repair.pairing import Pairing, pair_decision
from rollmux.core.repair.regroup import shrink
from rollmux.core.spec import ClusterSpec, JobSpec
from rollmux.core.state.departures import Departures
from rollmux.core.state.drift import DriftRepair
from rollmux.core.state.profiling import Profiling
from rollmux.core.state.shared import Progress, measured
from rollmux.core.vocabulary import Case, Pool
from rollmux.errors import InputError

Decision = Place | Movers | MoversV1 | Compact | MoveOut | Leave | Profiled  # what `apply` carries out
Commit = Callable[[Decision], object]
ROLLOUT, TRAIN = Pool.ROLLOUT.value, Pool.TRAIN.value  # (vocabulary.py)

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
    """Groups, controllers and the ledger; decisions as records, and the one table that applies them."""

    def __init__(self, env: Environment, cluster: ClusterSpec, policy: PlacementPolicy,
                 cfg: SchedulerConfig) -> None:
        self.env, self.cluster, self.policy, self.cfg = env, cluster, policy, cfg
        self.intra = cfg.intra_for(cluster)  # the group planner's view (core/config.py)
        check_same_admission(policy, self.intra)
        # The policy's optional capabilities (core/placement/model.py), asked once.
        self.regroups = isinstance(policy, Regrouping)
        self.join_bounds = policy if isinstance(policy, JoinBounds) else None
        self.explains = isinstance(policy, Explaining) and policy.explains
        # Rollout compaction is on and the policy may narrow rollouts (elastic rollout).
        self.compacts = cfg.compaction.enabled and isinstance(policy, Shaped) and policy.shapes.elastic_rollout
        self.ledger = Ledger(cluster)
        # Every write to the groups also updates their placement index (core/placement/index.py).
        self.groups: dict[int, Group] = IndexedGroups(self.intra)
        self._view_groups: tuple = (None, (), None)  # (key, groups, index snapshot) of the last view
        # A co-located job's controller grants its permits on its own training nodes (the live
        # plane asks it; the simulator plays co-located iterations without permits).
        self.controllers: dict[int, GroupController | ColocatedController] = {}
        self.group_of: dict[str, int] = {}  # placed job -> the group it runs in (not a slot reserved for it)
        self.dissolving: set[int] = set()
        self.cases: dict[str, int] = {}
        self.why = WhyTally()  # why isolated arrivals joined no group (plans that say: core/placement/why.py)
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
        self.next_gid = 0
        # Co-located jobs' own placements (core/placement/options/colocated.py), apart from the groups: never a
        # candidate, never re-planned; with `colo_regroup` a consolidation pass may move one
        # into a group (as it dissolves a lone group). A policy with the mode on counts them.
        self.colocated: dict[int, Group] = {}
        self.compacted = 0  # rollout nodes given back by compaction
        self.repinned = 0  # members a compaction re-pinned to another rollout node
        if isinstance(policy, Colocating) and policy.colocate:
            self.cases[Case.COLOCATED] = 0
        # A group's last member may fold into co-location (core/repair/fold.py).
        folds = cfg.colocation.fold and Case.COLOCATED in self.cases and self.regroups
        self.fold_terms = (FoldTerms(cfg.regroup.margin, cfg.colocation.fold_below, cfg.regroup.migration_scale)
                           if folds else None)
        self.folded = 0  # lone members that folded into co-location
        # With a node map (the live plane's, live/nodemap.py): the groups whose rollout node
        # indices were renumbered (old -> new) since the map last read them; None: not kept.
        self.renumbered: dict[int, dict[int, int]] | None = None
        self.departures = Departures(self)
        self.drift = DriftRepair(self)
        # Jobs measured as they run (core/state/profiling.py), then revisited as a departure would.
        self.profiling = Profiling(self, lambda gid, progress, commit: self.departures.after(
            self.groups.get(gid), progress, commit))
        # The one table of what `apply` carries out (Ray autoscaler style: explicit, no lookup by name).
        self._apply: dict[type, Callable] = {
            Place: self._place, Movers: self._movers, MoversV1: self._movers_v1,
            Compact: self.drift.apply_compaction, MoveOut: self._move_out, Leave: self._leave,
            Profiled: self.profiling.apply,
        }

    # -- the snapshot a decision reads ----------------------------------------------------
    def view(self, progress: Progress) -> ClusterView:
        """A frozen snapshot for the policy (groups being dissolved are not offered).

        `progress` is read, not copied (a copy made every decision O(all jobs)): callers
        hand over a mapping they do not change while the decision runs."""
        progress = measured(progress, self.estimates, self.planned)  # measured jobs owe their past so
        owed_s = self._owed()
        if owed_s:  # every plan charges the migrations still pending into a group to its members
            progress = OwedProgress(progress, owed_by_members(
                [g for gid in owed_s if (g := self.groups.get(gid)) is not None], owed_s))
        pools = self.cluster.pools
        free = {p: (None if getattr(pools, p).max_nodes is None
                    else getattr(pools, p).max_nodes - self.ledger.nodes[p]) for p in (ROLLOUT, TRAIN)}
        groups, index = self._groups_in_view()
        return ClusterView(self.cluster, groups, free[ROLLOUT], free[TRAIN],
                           self.cfg.placement.max_group_size, self.next_gid, progress, index, owed_s)

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
        """The groups a view offers (dissolving ones and those of jobs being measured hidden) and
        the index as of them, rebuilt only when a group or the hidden set changed (a rebuild is O(groups))."""
        groups = self.groups
        hidden = frozenset(self.dissolving) | self.profiling.groups()
        if not isinstance(groups, IndexedGroups):  # replaced by a plain dict: no index
            return tuple(g for g in groups.values() if g.group_id not in hidden), None
        key = (groups.index.version, hidden)
        if self._view_groups[0] != key:
            view_groups = groups.values_without(hidden)
            self._view_groups = (key, view_groups, groups.index.snapshot(view_groups, hidden))
        return self._view_groups[1], self._view_groups[2]

    # -- deciding ---------------------------------------------------------------------------
    def decide(self, job: JobSpec, progress: Progress, arrival: bool = True) -> tuple[Place | Movers, ...]:
        """The records that place `job` by the policy's validated plan, changing nothing: a
        `Place`, or with a pairing the arrival's `Place` and each co-located mover's `Movers`;
        () if it must wait. `arrival`: a new job (only an arrival may be paired)."""
        view = self.view(progress)
        t0 = time.perf_counter()
        # A job still to be measured has nothing to admit it by: a group of its own, nominal nodes.
        plan = isolated_plan(job, view, self.intra) if job.measure else self.policy.place(job, view)
        self.decision_ms["arrival"].append((time.perf_counter() - t0) * 1e3)
        if plan is None:
            return ()
        validate_plan(plan, job, view)
        pairing = self.pair(job, plan, progress) if arrival and not job.measure else None
        if pairing is not None:
            return Place.of(pairing.plan, arrival), *(Movers.of_regroup(r) for r in pairing.regroups)
        return (Place.of(plan, arrival),)

    def pair(self, job: JobSpec, plan: PlacementPlan, progress: Progress) -> Pairing | None:
        """With `colocation.pair`, the validated pairing (core/repair/pairing.py) of an arrival the
        policy placed co-located (with folding, or in a group of its own: `plan`) with co-located
        jobs not already moving; None otherwise.
        Its time counts towards the arrival's decision."""
        founds = plan.case == Case.COLOCATED or (self.fold_terms is not None and plan.case == Case.ISOLATED)
        if not (self.cfg.colocation.pair and founds and self.colocated):
            return None
        t0 = time.perf_counter()
        arriving = self.arriving
        idle = [g for gid, g in self.colocated.items()
                if gid not in self.dissolving and g.members[0].job_id not in arriving]
        view = self.view(progress)
        pairing = pair_decision(job, plan, view, idle, self.policy, self.cfg.regroup.migration_scale,
                                self.cfg.regroup.margin, self.fold_terms)
        if pairing is not None:
            validate_plan(pairing.plan, job, view)
        if self.decision_ms["arrival"]:
            self.decision_ms["arrival"][-1] += (time.perf_counter() - t0) * 1e3
        return pairing

    def place(self, job: JobSpec, progress: Progress, arrival: bool = True) -> PlacementPlan | None:
        """Decide, then apply the records; the plan `job` was placed by, or None if it must wait."""
        records = self.decide(job, progress, arrival)
        for r in records:
            self.apply(r)
        return records[0].plan if records else None

    def after_departure(self, rest: Group | None, progress: Progress, commit: Commit | None = None) -> list[str]:
        """Departure-time repairs (`Departures`); returns the jobs that migrate at their next
        boundary. Each decision goes to `commit` (default: `apply`) before the next is made."""
        return self.departures.after(rest, progress, commit or self.apply)

    def consolidation_candidates(self, rest: Group | None = None, progress: Progress | None = None) -> list[Group]:
        """The small groups a departure may have made movable, smallest first (`Departures.candidates`)."""
        return self.departures.candidates(rest, progress)

    def observe(self, job_id: str, group_id: int, rollout_s: float, train_s: float, progress: Progress,
                commit: Commit | None = None, rollout_factor: float | None = None,
                sync_s: float | None = None) -> list[str]:
        """A member finished an iteration with these measured phase times (`sync_s`: its previous
        sync's, if measured): a job being measured is profiled (`Profiling.observe`), any other goes
        to drift repair, else compaction (`DriftRepair.observe`); the evicted jobs. Each decision
        (a `Profiled`, `Movers` or `Compact`) goes to `commit` (default: `apply`) before the next is made."""
        commit = commit or self.apply
        if self.profiling.observe(job_id, rollout_s, train_s, sync_s, progress, commit):
            return []
        return self.drift.observe(job_id, group_id, rollout_s, train_s, progress, commit, rollout_factor)

    def compact(self, group_id: int, progress: Progress, commit: Commit | None = None) -> int:
        """Rollout compaction of one group (`DriftRepair.compact`); the nodes it gives back."""
        return self.drift.compact(group_id, progress, commit or self.apply)

    def set_capacity(self, nodes: Mapping[str, int]) -> None:
        """Cap each pool named in `nodes` at that many nodes (the live inventory's)."""
        pools = self.cluster.pools
        update = {p: getattr(pools, p).model_copy(update={"max_nodes": n}) for p, n in nodes.items()}
        self.cluster = self.cluster.model_copy(update={"pools": pools.model_copy(update=update)})

    def renumber(self, group_id: int, remap: Mapping[int, int]) -> None:
        """The group's rollout node indices were renumbered (old -> new; an old index absent is
        freed): noted for the node map, composed with a renumbering it has not read yet."""
        if self.renumbered is None:
            return
        prev = self.renumbered.get(group_id)
        self.renumbered[group_id] = (dict(remap) if prev is None
                                     else {o: remap[n] for o, n in prev.items() if n in remap})

    # -- applying -------------------------------------------------------------------------
    def apply(self, record: Decision) -> Group | None:
        """Carry out one decision record. A departure (`MoveOut`, `Leave`) returns what is left
        of the job's group (None if it is gone or the job had none); the others return None."""
        handler = self._apply.get(type(record))
        if handler is None:
            raise TypeError(f"ClusterState applies {', '.join(t.__name__ for t in self._apply)}, "
                            f"not {type(record).__name__}")
        return handler(record)

    def _place(self, r: Place) -> None:
        self._install(r.plan, r.arrival)
        self.group_of[r.job_id] = r.plan.group.group_id
        job = r.plan.group.member(r.job_id).job
        if job.measure:
            self.profiling.start(job)

    def _movers(self, r: Movers) -> None:
        """Reserve every move's slot; a dissolved group is hidden from placement."""
        if r.dissolve:
            self.dissolving.add(r.group_id)
        for mv in r.moves:
            self._install(mv.plan, arrival=False, held=True)
            self.arriving[mv.job_id] = mv
            if mv.plan.case == Case.COLOCATED:  # a lone member folds (core/repair/fold.py)
                self.folded += 1

    def _movers_v1(self, r: MoversV1) -> None:
        """A version 1 regrouping (no slot reserved): the groups its movers leave are hidden."""
        self.dissolving.update(r.group_ids)

    def _move_out(self, r: MoveOut) -> Group | None:
        """The job leaves its group; a mover with a reserved slot takes it (`arrive`)."""
        gid = self.group_of.get(r.job_id)
        rest = None if gid is None else self.leave(r.job_id, gid)
        if r.job_id in self.arriving:
            self.arrive(r.job_id)
        return rest

    def _leave(self, r: Leave) -> Group | None:
        """The job ended: a slot reserved for it is given back, what was measured of it dropped,
        and it leaves its group."""
        self.cancel_arrival(r.job_id)  # it leaves for good before a planned move
        self.forget(r.job_id)
        gid = self.group_of.get(r.job_id)
        return None if gid is None else self.leave(r.job_id, gid)

    def _install(self, plan: PlacementPlan, arrival: bool, held: bool = False) -> None:
        """Carry out a plan: pay for added nodes, install the group, update its controller.

        `held`: the slot is reserved for a migrant that has not arrived; its controller
        keeps it out of the turn order until `arrive`."""
        g, now = plan.group, self.env.now()
        self.ledger.provision(ROLLOUT, plan.added_rollout_nodes, now)
        self.ledger.provision(TRAIN, plan.added_train_nodes, now)
        if arrival:  # a migrating job was counted when it arrived
            self.cases[plan.case] = self.cases.get(plan.case, 0) + 1
            if plan.why is not None:
                self.why.add(plan.why)
        self.next_gid = max(self.next_gid, g.group_id + 1)
        if plan.case == Case.COLOCATED:  # its training nodes, no group
            self.colocated[g.group_id] = g
            ctl = self.controllers[g.group_id] = ColocatedController(self.env, g, self.intra)
            if held:
                ctl.hold(plan.job_id)
            return
        self.groups[g.group_id] = g
        ctl = self.controllers.get(g.group_id)
        if ctl is None:
            ctl = self.controllers[g.group_id] = GroupController(self.env, g, self.intra)
        if held:
            ctl.hold(plan.job_id)
        ctl.update_group(g)

    def arrive(self, job_id: str) -> int:
        """A migrant left its old group: it takes its reserved slot; returns the group id.

        Its first rollout permit there carries the whole migration as its switch time."""
        mv = self.arriving.pop(job_id)
        self.settling[job_id] = mv
        gid = self.group_of[job_id] = mv.plan.group.group_id
        self.controllers[gid].activate(job_id, mv.migration_s)
        return gid

    def forget(self, job_id: str) -> None:
        """The job ended: drop what was measured about it."""
        self.estimates.pop(job_id, None)
        self.planned.pop(job_id, None)
        self.settling.pop(job_id, None)
        self.profiling.forget(job_id)

    def cancel_arrival(self, job_id: str) -> None:
        """A migrant ended before it moved: give its reserved slot back."""
        mv = self.arriving.pop(job_id, None)
        if mv is not None:
            self.controllers[mv.plan.group.group_id].activate(job_id, 0.0)
            self.leave(job_id, mv.plan.group.group_id)

    def leave(self, job_id: str, group_id: int) -> Group | None:
        """Remove the job from its group; return what is left (None if the group is gone)."""
        if self.group_of.get(job_id) == group_id:
            del self.group_of[job_id]
        if group_id in self.colocated:  # a co-located job gives its training nodes back
            self.ledger.release(TRAIN, self.colocated.pop(group_id).n_train, self.env.now())
            del self.controllers[group_id]
            self.dissolving.discard(group_id)  # (it may have left for a group: colo_regroup)
            return None
        now, old = self.env.now(), self.groups[group_id]
        rest = Group(old.group_id, old.n_rollout, old.n_train,
                     tuple(m for m in old.members if m.job_id != job_id))
        if not rest.members:
            del self.groups[group_id], self.controllers[group_id]
            self.dissolving.discard(group_id)
            self.drift.forget_group(group_id)
            self.ledger.release(ROLLOUT, rest.n_rollout, now)
            self.ledger.release(TRAIN, rest.n_train, now)
            return None
        remap = None
        if self.cfg.regroup.shrink:
            rest, remap, freed_r, freed_t = shrink(rest)
            self.ledger.release(ROLLOUT, freed_r, now)
            self.ledger.release(TRAIN, freed_t, now)
            if freed_r:
                self.renumber(group_id, remap)
        # Keep the order: a departure can only shorten the period, and a
        # re-ordering would cost the remaining members a transient.
        rest = plan_group(rest, self.intra, reorder=False)
        self.groups[group_id] = rest
        self.controllers[group_id].update_group(rest, remap)
        return rest

    def reindex(self) -> None:
        """Rebuild `group_of` from the groups (after loading them from a snapshot): each member
        runs where it is, unless that is a slot reserved for it."""
        self.group_of = {m.job_id: gid for table in (self.groups, self.colocated) for gid, g in table.items()
                         for m in g.members
                         if not (m.job_id in self.arriving and self.arriving[m.job_id].plan.group.group_id == gid)}


__all__ = ["ADMISSION_FIELDS", "ClusterState", "Commit", "Decision", "check_same_admission"]
