"""Drift repair and rollout compaction of the groups a `ClusterState` holds (DESIGN §5a).

Declared profiles are estimates. Each finished iteration's measured phase times feed the
job's estimate (core/estimates.py); when they move its measured profile by more than 5%
from what its group was planned with, the group is re-planned with measured times, and if
that plan breaks a member's SLO budget, members are evicted (slowest first) until it does
not (docs/decisions/drift-repair.md). Else the group may give back idle rollout nodes its
members can do without (core/repair/compaction.py, docs/decisions/compaction.md).

What the repair decides is a record (core/records.py): each eviction a `Movers`, each node
given back a `Compact`, handed to `commit` before the next decision is made. The simulator
applies it at once (`ClusterState.apply`); the live service journals it first. The re-plan
itself is no decision (a function of the measurements): a replayed `observe` redoes it.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from rollmux.core.colo_model import colocated_group, colocated_iter_s, colocated_phases, group_gpus
from rollmux.core.estimates import MIN_MEASURED_S, PhaseEstimate, measured_spec
from rollmux.core.group import Group, Member
from rollmux.core.intra_group import job_planning_times, plan_group
from rollmux.core.placement.admission import group_fits
from rollmux.core.records import Compact, Movers
from rollmux.core.repair.compaction import Repin, compactions, narrowed, repinned
from rollmux.core.repair.moves import migration_seconds, plan_moves, repin_seconds
from rollmux.core.repair.regroup import shrink
from rollmux.core.spec import MAX_PHASE_S, JobSpec
from rollmux.core.state.shared import Held, Progress, measured
from rollmux.core.vocabulary import Mode, Pool

Commit = Callable[[Movers | Compact], object]  # carries out one decision (default: `ClusterState.apply`)
log = logging.getLogger("rollmux.drift")


def in_range(seconds: float) -> bool:
    """Whether a measured phase time can say something of a job's speed: finite, at least
    `MIN_MEASURED_S` and at most `MAX_PHASE_S` (NaN is not)."""
    return MIN_MEASURED_S <= seconds <= MAX_PHASE_S


class DriftRepair:
    """The measured-profile side of a `ClusterState`: estimates, re-plans, evictions, compaction."""

    def __init__(self, state: Held) -> None:
        self.state = state
        self._compact_at: dict[int, float] = {}  # group -> earliest next compaction try

    def observe(self, job_id: str, group_id: int, rollout_s: float, train_s: float, progress: Progress,
                commit: Commit, rollout_factor: float | None = None) -> list[str]:
        """A member finished an iteration with these measured phase times (its rollout at
        `rollout_factor`, core/elastic.py; None: its member's factor now): re-plan and evict
        (the evicted jobs, who migrate at their next boundary), else try a compaction."""
        movers = self._repair(job_id, group_id, rollout_s, train_s, progress, commit, rollout_factor)
        if not movers:
            self.compact(group_id, progress, commit)
        return movers

    def forget_group(self, group_id: int) -> None:
        """The group is gone: no compaction is due for it."""
        self._compact_at.pop(group_id, None)

    # -- rollout compaction ------------------------------------------------------------------
    def compact(self, group_id: int, progress: Progress, commit: Commit) -> int:
        """Rollout compaction: decide each idle rollout node the group's members can do without
        within their SLO budgets (a `Compact` each, through `commit`); the nodes dropped. Tried
        at most once per `compact_every_s` per group (an exact SLO check each), and only where
        the policy may narrow rollouts (elastic rollout)."""
        st = self.state
        g = st.groups.get(group_id)
        if (g is None or g.n_rollout < 2 or not st.compacts or group_id in st.dissolving
                or any(j in st.arriving or j in st.settling for j in g.job_ids())):
            return 0  # (a migration still owed to the group: its members' budgets are charged elsewhere)
        now = st.env.now()
        if now < self._compact_at.get(group_id, 0.0):
            return 0
        idle = st.controllers[group_id].idle_rollout_nodes()
        if not idle:
            return 0  # (not a try: a later iteration's end may find a node idle)
        self._compact_at[group_id] = now + st.cfg.compaction.every_s
        dropped = 0
        for after, drop in compactions(g, st.cluster, st.intra, measured(progress, st.estimates, st.planned), idle,
                                       self._repin()):
            commit(Compact.of(group_id, drop, repin=bool(repinned(g, drop))))
            g = after
            dropped += 1
        return dropped

    def _repin(self) -> Repin | None:
        cfg = self.state.cfg
        return Repin(cfg.regroup.margin, cfg.regroup.migration_scale) if cfg.compaction.repin else None

    def apply_compaction(self, r: Compact) -> None:
        """Carry out a compaction: the group without rollout node `node`, its members there
        narrowed and the group re-planned exactly as the decision did (core/repair/compaction.py
        `narrowed`), that node released and the rest renumbered."""
        st = self.state
        g = st.groups.get(r.group_id)
        cand = None if g is None or not 0 <= r.node < g.n_rollout else narrowed(g, r.node, st.cluster, r.repin)
        if cand is None:
            raise ValueError(f"group {r.group_id} cannot give back rollout node {r.node}")
        moved = repinned(g, r.node) if r.repin else []
        g, drop = plan_group(cand, st.intra, reorder=False), r.node
        st.ledger.release(Pool.ROLLOUT, 1, st.env.now())
        st.groups[g.group_id] = g
        ctl = st.controllers[g.group_id]
        remap = {n: n - (n > drop) for n in range(g.n_rollout + 1) if n != drop}
        ctl.update_group(g, remap)
        st.renumber(g.group_id, remap)
        for job_id in moved:  # its rollout state is not on its new node: its next rollout cold-starts
            ctl.cold_start(job_id, repin_seconds(g.member(job_id).job, st.cluster, st.cfg.regroup.migration_scale))
        st.compacted += 1
        st.repinned += len(moved)

    # -- drift repair --------------------------------------------------------------------------
    def _repair(self, job_id: str, group_id: int, rollout_s: float, train_s: float, progress: Progress,
                commit: Commit, rollout_factor: float | None) -> list[str]:
        """Drift repair of `observe`: the evicted jobs."""
        st = self.state
        st.settling.pop(job_id, None)  # a migrant's first iteration there: its stall is past
        if not (st.cfg.regroup.repair and st.regroups) or group_id in st.dissolving:
            return []  # only a policy with SLO admission repairs (baselines never check SLOs)
        if group_id in st.colocated:  # it shares nothing: no group to re-plan
            if st.cfg.colocation.regroup:  # (its measured profile serves a move only)
                self._observe_colocated(job_id, group_id, rollout_s, train_s)
            return []
        g = st.groups[group_id]
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
        g = plan_group(Group(g.group_id, g.n_rollout, g.n_train, members), st.intra)
        st.groups[group_id] = g
        st.controllers[group_id].update_group(g)
        movers = self._evict(g, measured(progress, st.estimates, st.planned), commit)
        st.decision_ms["repair"].append((time.perf_counter() - t0) * 1e3)
        return movers

    def _measured(self, job_id: str, job: JobSpec, rollout_s: float, train_s: float) -> JobSpec | None:
        """Add one iteration's measured (nominal-shape, disaggregated) phase times to the job's
        estimate; its measured profile when that differs by more than 5% from `job`, the profile
        it is planned with now (it then replaces it in `planned`), else None. A phase measured
        too short to measure, or longer than any phase may last, says nothing of the job's speed
        (training scales with the rollout's tokens, and a profile's phases last a while): it is
        not added. A measured profile outside a job record's ranges is not planned with."""
        if not (in_range(rollout_s) and in_range(train_s)):
            return None
        estimates = self.state.estimates
        est = estimates.get(job_id)
        if est is None:
            est = estimates[job_id] = PhaseEstimate(job)  # the declared profile
        try:
            est.observe(rollout_s, train_s)
            scales = est.scales()
            if est.accepted is not None and est.accepted[0] == scales and est.accepted[1] is job:
                return None
            spec = measured_spec(est.job, *scales)
        except (ValueError, ArithmeticError) as exc:  # (pydantic's ValidationError is a ValueError)
            log.warning("job %s: no measured profile within a job record's ranges; it keeps the one it is "
                        "planned with: %s", job_id, str(exc).splitlines()[0])
            return None
        if abs(spec.solo_iter_s / job.solo_iter_s - 1) <= 0.05:
            est.accepted = (scales, job)
            return None
        self.state.planned[job_id] = spec
        return spec

    def _observe_colocated(self, job_id: str, group_id: int, rollout_s: float, train_s: float) -> None:
        """A co-located job's measured phase times, taken back to disaggregated ones by the veRL
        model's scales (of its declared profile, as it was placed): when they move its profile as
        in `observe`, it is planned with measured times from then on, so a later move into a
        group (`colo_regroup`) plans what it runs."""
        st = self.state
        member = st.colocated[group_id].members[0]
        gpus = group_gpus(st.colocated[group_id], st.cluster)  # G, or a narrowed G'
        est = st.estimates.get(job_id)
        declared = member.job if est is None else est.job
        r_scale, t_scale, _ = colocated_phases(declared, st.cluster, 1.0, 1.0, st.cfg.colocation.speed, gpus)
        spec = self._measured(job_id, member.job, rollout_s / r_scale, train_s / t_scale)
        if spec is None:
            return
        planned_s = colocated_iter_s(spec, st.cluster, job_planning_times(spec, st.intra).rollout,
                                     st.cfg.colocation.speed, gpus)
        g = st.colocated[group_id] = colocated_group(group_id, spec, st.cluster, planned_s, gpus)
        st.controllers[group_id].update_group(g)

    def _evict(self, g: Group, progress: Progress, commit: Commit) -> list[str]:
        """Move members out of `g` (re-planned) until its period fits every staying member's budget;
        a member that cannot be moved (`JobSpec.cannot`) is never the one evicted."""
        st = self.state
        staying = [m for m in g.members if m.job_id not in st.arriving]
        movers: list[str] = []
        while len(staying) > 1:
            rest = plan_group(shrink(Group(g.group_id, g.n_rollout, g.n_train, tuple(staying)))[0], st.intra)
            if group_fits(rest, progress, st.intra):  # the policy's own SLO admission test
                break
            movable = [m for m in staying if m.job.can(Mode.MOVE)]
            if not movable:
                break  # nobody may go: the group runs on as it is
            victim = max(movable, key=lambda m: m.job.solo_iter_s)
            charges = {victim.job_id: migration_seconds(victim.job, st.cluster, st.cfg.regroup.migration_scale)}
            st.dissolving.add(g.group_id)  # not a target of its own eviction
            try:
                planned = plan_moves((victim,), g.group_id, st.view(progress), st.policy, charges,
                                     g.shape.period_s, isolated_ok=True)
            finally:
                st.dissolving.discard(g.group_id)
            if planned is None:
                break  # node caps: nowhere to go now; the group runs on as it is
            commit(Movers.of(g.group_id, tuple(planned[0]), False))
            movers.append(victim.job_id)
            staying.remove(victim)
        return movers
