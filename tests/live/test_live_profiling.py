"""A job submitted without phase times is measured as it runs, live (core/state/profiling.py).

The in-process core is driven with explicit releases: a release's timings are what the job's
shim measured. Every decision is journaled, so a restart (from the records or a snapshot) finds
the job where the running service had it: still being measured, with what was measured so far,
or planned with its measured profile.
"""

from __future__ import annotations

import math

import pytest
from factories import make_cluster, make_job

from rollmux.core.estimates import fitted_phases
from rollmux.live.service import SchedulerCore

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.0, "offload_s": 0.0}
SECONDS = {"rollout": 100.0, "train": 100.0, "sync": 5.0}


def _unprofiled(job_id: str) -> dict:
    """A record that gives no phase time (nor host memory): the scheduler measures them."""
    return {"job_id": job_id, "arrival_s": 0.0, "duration_s": 100_000.0, "slo": 2.0, "rollout_gpus": 8,
            "train_gpus": 8}


def _iterations(core: SchedulerCore, job_id: str, token: str, n: int) -> None:
    """`n` iterations of `job_id` (rollout, train, sync), each phase taking SECONDS."""
    for _ in range(n):
        for phase in ("rollout", "train", "sync"):
            core.acquire(job_id, phase, token)
            core.release(job_id, phase, {**TIMINGS, "run_s": SECONDS[phase]}, token)


def _view(core: SchedulerCore, job_id: str) -> dict:
    return core.status()["jobs"][job_id]


@pytest.mark.parametrize("snapshot_every", [2000, 1])
def test_a_job_without_phase_times_is_measured_then_planned_and_moved_where_it_costs_less(tmp_path, snapshot_every):
    store = str(tmp_path / "journal.db")
    core = SchedulerCore(make_cluster().model_dump(), store=store, snapshot_every=snapshot_every)
    try:
        m = core.submit(_unprofiled("m"))
        b = core.submit(make_job("b", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True))
        assert m["case"] == b["case"] == "isolated" and m["group_id"] != b["group_id"]  # b does not join m
        view = _view(core, "m")
        assert view["profile"]["measuring"] == {"iterations": 0, "of": 4}
        assert view["profile"]["declared"] is None and view["slo_iter_s"] is None
        _iterations(core, "m", m["token"], 2)
        assert _view(core, "m")["profile"]["measuring"] == {"iterations": 2, "of": 4}
        _iterations(core, "m", m["token"], 2)
        view = _view(core, "m")
        want = fitted_phases([100.0] * 3, [100.0] * 3, [5.0] * 3, 125.0, 0.05)
        assert view["profile"]["measuring"] is None and view["profile"]["plans_with"] == want
        # Its budget: its SLO over a lower confidence bound of its solo time (1.645 standard errors of
        # three iterations' logs, their spread at least 0.05), not over the estimate.
        assert view["slo_iter_s"] == pytest.approx(2.0 * 205.0 * math.exp(-1.645 * 0.05 / math.sqrt(3)))
        # Measured at the end of its fourth training phase, that boundary moved it into b's group,
        # where it costs less than on nodes of its own (its sync then ran there).
        kinds = [r.kind for r in core.journal.records()]
        assert kinds.count("profiled") == 1 and kinds.index("profiled") < kinds.index("movers") < kinds.index("move_out")
        assert _view(core, "m")["group_id"] == b["group_id"] and _view(core, "m")["epoch"] == 2
        dump = core.dump()
    finally:
        core.shutdown()
    again = SchedulerCore(None, store=store)
    try:
        assert again.dump()["groups"] == dump["groups"] and again.dump()["planned"] == dump["planned"]
        assert _view(again, "m")["profile"]["plans_with"] == want
    finally:
        again.shutdown()


@pytest.mark.parametrize("snapshot_every", [2000, 1])
def test_a_restart_while_measuring_keeps_what_was_measured(tmp_path, snapshot_every):
    store = str(tmp_path / "journal.db")
    core = SchedulerCore(make_cluster().model_dump(), store=store, snapshot_every=snapshot_every)
    try:
        token = core.submit(_unprofiled("m"))["token"]
        _iterations(core, "m", token, 3)
    finally:
        core.shutdown()
    again = SchedulerCore(None, store=store)
    try:
        assert _view(again, "m")["profile"]["measuring"] == {"iterations": 3, "of": 4}
        assert again.dump()["measuring"]["m"]["seen"][1] == [100.0, 100.0, 5.0]  # (rollout, train, the sync before)
        _iterations(again, "m", token, 1)
        assert _view(again, "m")["profile"]["measuring"] is None
        assert _view(again, "m")["profile"]["planned"] == {"rollout": 100.0, "train": 100.0}
    finally:
        again.shutdown()


def test_a_record_with_some_phase_times_is_refused_naming_a_missing_one():
    core = SchedulerCore(make_cluster().model_dump())
    try:
        with pytest.raises(Exception, match="rollout_s|sync_s") as exc:
            core.submit({**_unprofiled("m"), "train_s": 5.0})
        assert exc.value.field in ("rollout_s", "sync_s")
    finally:
        core.shutdown()
