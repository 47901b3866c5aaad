"""A job submitted without phase times is measured as it runs (core/state/profiling.py)."""

from __future__ import annotations

import math

import pytest
from factories import GROUPS, config, make_cluster, make_job, make_policy

from rollmux.core.config import SchedulerConfig
from rollmux.core.env import SimEnvironment
from rollmux.core.placement import build_policy
from rollmux.core.estimates import fitted_phases
from rollmux.core.records import Movers, Profiled, parse
from rollmux.core.spec import MEASURE_PHASE_S, JobSpec
from rollmux.core.state import ClusterState
from rollmux.core.vocabulary import Mode

CLUSTER = make_cluster()


def _record(job_id: str = "m", **over) -> dict:
    """A job record that gives no phase time."""
    return {"job_id": job_id, "arrival_s": 0.0, "duration_s": 100_000.0, "slo": 2.0, "rollout_gpus": 8,
            "train_gpus": 8, **over}


def _state(**cfg) -> ClusterState:
    return ClusterState(SimEnvironment(), CLUSTER, make_policy(), config(GROUPS, **cfg))


def _measured(st: ClusterState, job_id: str, rollout: float, train: float, n: int, sync: float = 5.0) -> list:
    """`n` iterations of `job_id` observed; every decision they handed over."""
    decided: list = []

    def commit(r):
        decided.append(r)
        st.apply(r)
    gid = st.group_of[job_id]
    for i in range(n):
        st.observe(job_id, gid, rollout, train, {}, commit=commit, sync_s=None if i == 0 else sync)
    return decided


def test_a_record_without_phase_times_is_measured_on_placeholders_and_takes_no_mode_that_needs_a_profile():
    job = JobSpec.model_validate(_record())
    assert job.measure and job.rollout_s.max == MEASURE_PHASE_S and job.train_s == MEASURE_PHASE_S
    assert [m for m in Mode if job.can(m)] == [Mode.TAIL_MIGRATION]
    assert JobSpec.model_validate(job.model_dump()) == job  # (a journal's round trip keeps it measuring)
    declared = JobSpec.model_validate(_record(rollout_s={"median": 1, "sigma": 0, "max": 1}, train_s=1, sync_s=0,
                                              host_gb={"rollout": 1, "train": 1}))
    assert not declared.measure and "measure" not in declared.model_dump()


def test_a_record_with_some_phase_times_names_the_missing_ones():
    with pytest.raises(ValueError, match="sync_s"):
        JobSpec.model_validate(_record(rollout_s={"median": 1, "sigma": 0, "max": 1}, train_s=1))


def test_a_job_being_measured_gets_a_group_no_other_job_joins_until_it_is_measured():
    st = _state()
    st.place(JobSpec.model_validate(_record("m")), {})
    plan = st.place(make_job("b", rollout=100, train=100, slo=2.0), {})
    assert plan.case.value == "isolated"   # b would have joined a profiled job of m's times (below)
    gid = st.group_of["m"]
    decided = _measured(st, "m", 100.0, 100.0, 1 + 3)
    assert [type(r) for r in decided][:1] == [Profiled]
    assert not st.planned["m"].measure and st.groups[gid].member("m").job is st.planned["m"]
    plan = st.place(make_job("c", rollout=100, train=100, slo=2.0), {})
    assert plan.case.value == "direct_packing"  # its group is offered again


def test_measurement_counts_after_the_warmup_and_fits_the_record_fields():
    st = _state()
    st.place(JobSpec.model_validate(_record("m")), {})
    gid = st.group_of["m"]
    assert _measured(st, "m", 500.0, 400.0, 1) == []      # the warm-up iteration
    seen = [(80.0, 40.0, None), (100.0, 50.0, 4.0), (120.0, 60.0, 6.0)]
    decided = []
    for rollout, train, sync in seen:
        st.observe("m", gid, rollout, train, {}, commit=lambda r: (decided.append(r), st.apply(r)), sync_s=sync)
    spec = decided[0].spec
    want = fitted_phases([80.0, 100.0, 120.0], [40.0, 50.0, 60.0], [4.0, 6.0], 120.0 * 1.25, 0.05)
    assert spec.rollout_s.model_dump() == want["rollout_s"] and spec.train_s == 50.0 and spec.sync_s == 5.0
    # The same work as declared (its solo lifetime), now in measured iterations, not the placeholders' 83.
    assert spec.rollout_s.max == 150.0 and spec.duration_s == 100_000.0
    assert spec.iterations == round(100_000 / spec.solo_iter_s) > 400
    assert st.estimates["m"].count == 4  # every measured iteration, the warm-up's too: owed at its solo time


def test_once_measured_a_lone_job_moves_into_a_group_where_it_costs_less():
    st = _state()
    st.place(make_job("h", rollout=100, train=100, slo=2.0), {})  # a group m fits beside, once known
    st.place(JobSpec.model_validate(_record("m", slo=2.0)), {})
    assert st.group_of["m"] != st.group_of["h"]
    decided = _measured(st, "m", 100.0, 100.0, 4)
    assert [type(r) for r in decided] == [Profiled, Movers]
    assert decided[1].moves[0].job_id == "m" and decided[1].moves[0].plan.group.group_id == st.group_of["h"]


def test_a_measured_job_is_not_moved_when_it_fits_nowhere_for_less():
    st = _state()
    st.place(make_job("h", rollout=100, train=100, slo=1.2), {})  # no slack for a mate as slow as it
    st.place(JobSpec.model_validate(_record("m", slo=2.0)), {})
    assert [type(r) for r in _measured(st, "m", 100.0, 100.0, 4)] == [Profiled]


@pytest.mark.parametrize("slo,spread,measured_after", [
    (1.0, 0.0, None),  # no room at all: alone all its life, as on nodes of its own
    (2.0, 0.0, 4),     # the spread's floor (0.05) is precise enough for a wide SLO after the minimum
    (1.2, 0.3, 22),    # a tight SLO, a wide spread: 1.645 x 0.251 / sqrt(n) <= 0.5 ln 1.2 from n = 21 counted
])
def test_a_job_is_measured_until_its_solo_time_is_known_well_enough_for_its_slo(slo, spread, measured_after):
    st = _state()
    st.place(JobSpec.model_validate(_record("m", slo=slo)), {})
    gid, decided = st.group_of["m"], []
    for i in range(1, 40):
        rollout = 100.0 * math.exp(spread * (i % 3 - 1))  # logs at -spread, 0, +spread in turn
        st.observe("m", gid, rollout, rollout, {}, commit=lambda r: (decided.append((i, r)), st.apply(r)), sync_s=0.0)
    firsts = [i for i, r in decided if isinstance(r, Profiled)]
    assert firsts == ([] if measured_after is None else [measured_after])
    if measured_after is not None:  # its budget is planned against the bound, never below solo
        spec = decided[0][1].spec
        assert 1.0 <= spec.slo < slo


def test_a_job_being_measured_is_never_co_located_nor_paired():
    st = ClusterState(SimEnvironment(), CLUSTER, build_policy(SchedulerConfig(), CLUSTER), SchedulerConfig())
    plan = st.place(JobSpec.model_validate(_record("m", rollout_gpus=16)), {})
    assert plan.case.value == "isolated" and plan.group.n_rollout == 2  # its nominal nodes


def test_a_profiled_record_reads_back_from_its_journal_line():
    st = _state()
    st.place(JobSpec.model_validate(_record("m")), {})
    r = _measured(st, "m", 100.0, 100.0, 4)[0]
    back = parse(r.kind, r.payload(), st.intra)
    assert back == r and not back.spec.measure


def test_leaving_while_measured_forgets_the_measurements():
    st = _state()
    st.place(JobSpec.model_validate(_record("m")), {})
    _measured(st, "m", 100.0, 100.0, 2)
    st.leave("m", st.group_of["m"])
    st.forget("m")
    assert st.profiling.jobs == {} and st.groups == {}
