"""Jobs submitted without phase times, measured as they run (docs/decisions/profiling.md).

A job whose spec says `measure` (a record that gives no phase time, core/spec.py) is placed on
its nominal nodes in a group of its own (`ClusterState.decide`), which the placement view hides
from every other job: its SLO admission has nothing to plan with. It takes no mode that needs a
profile (`JobSpec.can`): no co-location, elastic shape or move. Each iteration it finishes is
observed here instead of by drift repair: its measured rollout, training and previous sync
seconds. After `profiling.warmup` uncounted iterations and `profiling.iterations` counted ones,
the profile they make (`fitted_phases`) is a decision, a `Profiled` record handed to `commit` as
every repair's decisions are (the live service journals it first). Applied, it is the job's
planned profile, as drift repair's measured profiles are (`planned`, its estimate fed every
iteration measured so far), and its group is re-planned and offered again. Then admission is
revisited, by the departure-time repairs (`Departures.after`): the job may move into a group where
it costs less than on its own nodes, or fold into co-location (each priced against its
migration), and small groups elsewhere may now join it. From then on it is a job like any
other: drift repair watches its measured times.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from rollmux.core.estimates import MIN_MEASURED_S, PhaseEstimate, fitted_phases
from rollmux.core.group import Group, Member
from rollmux.core.intra_group import plan_group
from rollmux.core.records import Movers, Profiled
from rollmux.core.spec import MAX_PHASE_S, JobSpec
from rollmux.core.state.shared import Held, Progress

Commit = Callable[[Profiled | Movers], object]


@dataclass
class Measuring:
    """What was measured of one job so far: (rollout, train, previous sync or None) per iteration."""

    seen: list[tuple[float, float, float | None]] = field(default_factory=list)

    def counted(self, warmup: int) -> list[tuple[float, float, float | None]]:
        """The iterations past the warm-up."""
        return self.seen[warmup:]


class Profiling:
    """The jobs of a `ClusterState` being measured, and their profiles once measured."""

    def __init__(self, state: Held, after: Callable[[int, Progress, Commit], object]) -> None:
        self.state = state
        self._after = after  # the departure-time repairs, on the profiled job's group
        self.jobs: dict[str, Measuring] = {}

    def start(self, job_id: str) -> None:
        """A job to measure was placed (a re-placement keeps what was measured)."""
        self.jobs.setdefault(job_id, Measuring())

    def forget(self, job_id: str) -> None:
        """The job ended."""
        self.jobs.pop(job_id, None)

    def groups(self) -> frozenset[int]:
        """The groups of the jobs being measured (hidden from placement)."""
        group_of = self.state.group_of
        return frozenset(group_of[j] for j in self.jobs if j in group_of)

    def observe(self, job_id: str, rollout_s: float, train_s: float, sync_s: float | None,
                progress: Progress, commit: Commit) -> bool:
        """An iteration of a job being measured (False: the job is not): noted; the one that
        completes its measurement decides its profile, then revisits its admission."""
        m = self.jobs.get(job_id)
        if m is None:
            return False
        m.seen.append((rollout_s, train_s, sync_s))
        cfg = self.state.cfg.profiling
        counted = m.counted(cfg.warmup)
        if len(counted) < cfg.iterations:
            return True
        gid = self.state.group_of.get(job_id)
        job = self.state.groups[gid].member(job_id).job if gid in self.state.groups else None
        if job is None:
            return True  # (not running in a group: measured again where it is placed)
        fitted = fitted_phases([r for r, _, _ in counted], [t for _, t, _ in counted],
                               [s for _, _, s in counted if s is not None],
                               max(r for r, _, _ in counted) * cfg.max_headroom, cfg.min_sigma)
        commit(Profiled.of(JobSpec(**{**dict(job), **fitted, "measure": False})))
        self._after(gid, progress, commit)
        return True

    def apply(self, r: Profiled) -> None:
        """The job is planned with its measured profile from now on; its group is re-planned and
        offered to other jobs again."""
        st = self.state
        m = self.jobs.pop(r.job_id, Measuring())
        st.planned[r.job_id] = r.spec
        est = st.estimates[r.job_id] = PhaseEstimate(r.spec)
        for rollout_s, train_s, _ in m.seen:  # its past iterations: owed at their measured solo times
            if all(MIN_MEASURED_S <= v <= MAX_PHASE_S for v in (rollout_s, train_s)):
                est.observe(rollout_s, train_s)
        gid = st.group_of.get(r.job_id)
        if gid not in st.groups:
            return
        g = st.groups[gid]
        members = tuple(Member(r.spec, m.rollout_nodes, m.train_nodes, m.rollout_factor) if m.job_id == r.job_id
                        else m for m in g.members)
        g = plan_group(Group(g.group_id, g.n_rollout, g.n_train, members), st.intra)
        st.groups[gid] = g
        st.controllers[gid].update_group(g)
