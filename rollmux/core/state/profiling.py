"""Jobs submitted without phase times, measured as they run (docs/decisions/profiling.md).

A job whose spec says `measure` (a record that gives no phase time, core/spec.py) is placed on
its nominal nodes in a group of its own (`ClusterState.decide`), which the placement view hides
from every other job until it is measured: its SLO admission has nothing to plan with. It takes no
mode that needs a profile (`JobSpec.can`): no co-location, elastic shape or move. Each iteration
it finishes is observed here instead of by drift repair: its measured rollout, training and
previous sync seconds.

After `profiling.warmup` uncounted iterations and at least `profiling.iterations` counted ones, once
they are precise enough (below), the profile they make (`fitted`) is a decision, a `Profiled` record handed to `commit` as every repair's
decisions are (the live service journals it first). Applied, it is the job's planned profile, as
drift repair's measured profiles are (`planned`, with an estimate fed every iteration measured so
far), its group is re-planned and offered again, and admission is revisited by the departure-time
repairs (`Departures.after`): the job may move into a group where it costs less than on its own
nodes, or fold into co-location (each priced against its migration), and small groups elsewhere
may now join it.

A few iterations say little, and an overstated solo time widens the job's SLO budget (the scheduler
would let it run slower than its SLO allows), an understated one loads its partners more than planned.
So the job is measured until its solo iteration time is known well enough for its SLO: the
standard error of the logs of its measured solo times, times `profiling.z` (one-sided confidence),
at most `profiling.precision` of the log of its SLO (the share of its slack measurement error may
take). A job whose SLO leaves the scheduler no room for that error runs alone all its life, as it
would on nodes of its own. From then on drift repair watches it like any other job.
"""

from __future__ import annotations

import math
import statistics
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
    """What was measured of one job so far: (rollout, train, previous sync or None) per iteration,
    and the SLO it was submitted with (how precisely its solo time must be known)."""

    slo: float
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

    def start(self, job: JobSpec) -> None:
        """A job to measure was placed (a re-placement keeps what was measured)."""
        self.jobs.setdefault(job.job_id, Measuring(job.slo))

    def forget(self, job_id: str) -> None:
        """The job ended."""
        self.jobs.pop(job_id, None)

    def groups(self) -> frozenset[int]:
        """The groups of the jobs being measured (hidden from placement)."""
        group_of = self.state.group_of
        return frozenset(group_of[j] for j in self.jobs if j in group_of)

    def observe(self, job_id: str, rollout_s: float, train_s: float, sync_s: float | None,
                progress: Progress, commit: Commit) -> bool:
        """An iteration of a job measured as it runs (False: the job is not, or no longer: drift
        repair watches it); the profile it makes, decided as the module docstring says."""
        m = self.jobs.get(job_id)
        if m is None:
            return False
        m.seen.append((rollout_s, train_s, sync_s))
        counted = m.counted(self.state.cfg.profiling.warmup)
        gid = self.state.group_of.get(job_id)
        low = self.solo_bound(counted, m.slo)
        if gid not in self.state.groups or low is None:
            return True  # (not in a group: a migrant, measured on where it arrives)
        commit(Profiled.of(self.fitted(self.state.groups[gid].member(job_id).job, m.slo, counted, low)))
        self._after(gid, progress, commit)
        return True

    def solo_bound(self, counted: list[tuple[float, float, float | None]], slo: float) -> float | None:
        """A lower confidence bound of the job's solo iteration time from its counted iterations:
        the geometric mean of their solo times, `profiling.z` standard errors of their logs below;
        None until at least `profiling.iterations` are counted and that error is within
        `profiling.precision` of ln(slo) (the module docstring)."""
        cfg = self.state.cfg.profiling
        if len(counted) < cfg.iterations:
            return None
        syncs = [s for _, _, s in counted if s is not None]
        sync = statistics.median(syncs) if syncs else 0.0
        logs = [math.log(max(r + t + sync, 1e-9)) for r, t, _ in counted]
        error = cfg.z * max(statistics.stdev(logs), cfg.min_sigma) / math.sqrt(len(logs))
        return math.exp(statistics.fmean(logs) - error) if error <= cfg.precision * math.log(slo) else None

    def fitted(self, job: JobSpec, slo: float, counted: list[tuple[float, float, float | None]],
               low: float) -> JobSpec:
        """The profile `job` is planned with from its counted iterations (`fitted_phases`; the
        slowest rollout times `profiling.max_headroom` as its worst case), its SLO budget taken
        against `low`, the lower bound of its solo time, not against the estimate: `slo` (the one it
        was submitted with) times low / the estimate. An overstated estimate would widen its
        budget, an understated one only costs a little packing. Never under 1: the job then meets
        its SLO alone, where the precision `solo_bound` asks for leaves it if its SLO is tight."""
        cfg = self.state.cfg.profiling
        fitted = fitted_phases([r for r, _, _ in counted], [t for _, t, _ in counted],
                               [s for _, _, s in counted if s is not None],
                               max(r for r, _, _ in counted) * cfg.max_headroom, cfg.min_sigma)
        spec = JobSpec(**{**job.fields(), **fitted, "measure": False, "slo": slo})
        bounded = min(slo, max(1.0, slo * low / spec.solo_iter_s))
        return spec.model_copy(update={"slo": round(bounded, 6)}) if bounded < slo else spec

    def apply(self, r: Profiled) -> None:
        """The job is planned with its measured profile from now on; its group is re-planned and
        offered to other jobs again."""
        st = self.state
        m = self.jobs.pop(r.job_id, None)  # (measured: drift repair watches it from its next iteration)
        st.planned[r.job_id] = r.spec
        est = st.estimates[r.job_id] = PhaseEstimate(r.spec)
        for rollout_s, train_s, _ in (m.seen if m is not None else ()):  # its past: owed at measured solo times
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

