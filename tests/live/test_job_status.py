"""A job's status moves only along core/lifecycle.py's table, live and in a replay; the core's
operations are one table (`OPS`) that says who may call each."""

from __future__ import annotations

import ast
import inspect
import json

import pytest

from rollmux.core.lifecycle import TRANSITIONS, IllegalTransition, may_move, set_status
from rollmux.core.spec import default_cluster
from rollmux.core.vocabulary import TERMINAL, JobStatus
from rollmux.live import live_state, permits, service, supervision
from rollmux.live.journal import open_store
from rollmux.live.live_state import LiveJob, ReplayError
from rollmux.live.service import OPS, SchedulerCore
from rollmux.live.telemetry import JOB_STATES
from rollmux.live.views import STATES
from factories import make_job

QUEUED, RUNNING, MOVING, DONE = JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.MOVING, JobStatus.DONE
CAPPED = {"pools": {"rollout": {"gpu": "H20", "price_per_gpu_hour": 1.0, "max_nodes": 1},
                    "train": {"gpu": "H800", "price_per_gpu_hour": 2.85, "max_nodes": 1}}}


def _job(job_id: str, **kw) -> dict:
    return make_job(job_id, **kw).model_dump(exclude_none=True)


def test_the_table_covers_every_status_and_the_ends_lead_nowhere():
    assert set(TRANSITIONS) == set(JobStatus)
    assert all(not TRANSITIONS[s] for s in TERMINAL)
    assert all(TERMINAL <= TRANSITIONS[s] for s in (QUEUED, RUNNING, MOVING))  # any active job may end
    assert not may_move(QUEUED, MOVING) and not may_move(MOVING, MOVING) and not may_move(RUNNING, QUEUED)
    # The status API and the metrics count every status the table knows, as plain strings.
    assert STATES == tuple(JobStatus) and JOB_STATES == tuple(s.value for s in JobStatus)


def test_set_status_refuses_a_move_the_table_does_not_list_naming_both_ends():
    job = LiveJob(make_job("a"), "h", 0.0)
    set_status(job, RUNNING)
    set_status(job, DONE)
    with pytest.raises(IllegalTransition, match="job 'a': status done cannot move to running"):
        set_status(job, RUNNING)
    assert job.status is DONE


def test_no_module_sets_a_status_but_through_set_status():
    for module in (live_state, service, permits, supervision):
        tree = ast.parse(inspect.getsource(module))
        assigned = [n for n in ast.walk(tree) if isinstance(n, (ast.Assign, ast.AugAssign))
                    for t in (n.targets if isinstance(n, ast.Assign) else [n.target])
                    for e in (t.elts if isinstance(t, ast.Tuple) else [t])
                    if isinstance(e, ast.Attribute) and e.attr == "status"]
        assert not assigned, f"{module.__name__} assigns .status directly"


def test_a_queued_job_asked_to_move_stays_in_line_once():
    core = SchedulerCore(CAPPED)
    try:
        tok_a = core.submit(_job("a", slo=1.0))["token"]
        tok_b = core.submit(_job("b", slo=1.0))["token"]
        assert core.state.jobs["b"].status is QUEUED
        for _ in range(2):  # a re-admission of a job that holds nothing is no move
            assert core.readmit("b", "lost its workers", tok_b)["status"] == "queued"
        assert list(core._queue) == ["b"]
        core.finish("a", tok_a)
        assert core.state.jobs["b"].status is RUNNING and not core._queue
    finally:
        core.shutdown()


def test_a_journal_with_an_illegal_move_does_not_replay(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(default_cluster().model_dump(), store=path)
    tok = core.submit(_job("a"))["token"]
    core.finish("a", tok)
    core.shutdown()
    store = open_store(path)
    place = next(r.payload for r in store.records() if r.kind == "place")
    store.append("place", json.loads(json.dumps(place)))  # a finished job placed again
    store.close()
    with pytest.raises(ReplayError, match="place record: job 'a': status done cannot move to running"):
        SchedulerCore(None, store=path)


def test_every_operation_is_in_the_table_with_who_may_call_it():
    ops = {name[len("_op_"):] for name in dir(SchedulerCore) if name.startswith("_op_")}
    assert set(OPS) == ops
    assert {op for op, e in OPS.items() if e.scope == "admin"} == {"submit", "status"}
    assert {op for op, e in OPS.items() if e.scope == "internal"} == {"drain", "dump", "metrics", "stop_waiting",
                                                                       "nodes_lost", "node_up", "node_down"}
    assert all(e.active for e in OPS.values() if e.scope == "job")
    core = SchedulerCore(default_cluster().model_dump())
    try:
        with pytest.raises(ValueError, match="unknown operation 'eval'"):
            core.request("eval")
    finally:
        core.shutdown()
