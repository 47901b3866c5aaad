"""The scheduler service's init and sync phases: init waits until the job is placed and its
nodes are free; sync is granted at once and its measured time joins the job's profile."""

from __future__ import annotations

import pytest
from factories import make_cluster, make_job

from rollmux.live.service import SchedulerCore

TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.25, "offload_s": 0.0}


@pytest.fixture
def core():
    # One node per pool, and jobs too tight (SLO) to share it: the second waits in the queue.
    c = SchedulerCore(make_cluster(max_rollout_nodes=1, max_train_nodes=1).model_dump(exclude_none=True))
    yield c
    c.shutdown()


def _submit(core, job_id: str) -> str:
    return core.submit(make_job(job_id, rollout=100, train=10, slo=1.05).model_dump(exclude_none=True))["token"]


def test_init_of_a_queued_job_waits_until_it_is_placed(core):
    ta, tb = _submit(core, "a"), _submit(core, "b")
    assert core.status()["jobs"]["b"]["status"] == "queued"
    waiting = core.request("acquire", core.caller(tb, "b"), "b", "init", None).result()
    core.status()  # every reply decided so far has gone out
    assert not waiting.done()  # no group can hold b yet
    grant = core.acquire("a", "init", ta)
    assert grant["phase"] == "init" and grant["nodes"] == [0] and list(grant["train_held"]) == [0]
    rows = [(r["pool"], r["node"]) for r in core.status()["timeline"] if r["job_id"] == "a"]
    assert rows == [("rollout", 0), ("train", 0)]  # the timeline shows init on both pools
    assert {p: v["busy_gpus"] for p, v in core.status()["pools"].items()} == {"rollout": 8, "train": 8}
    core.release("a", "init", {**TIMINGS, "grant_no": grant["grant_no"]}, ta)
    core.finish("a", ta)  # a leaves: its nodes can hold b
    got = waiting.result(timeout=30)
    assert got["phase"] == "init" and got["job_id"] == "b"
    assert core.status()["jobs"]["b"]["status"] == "running"


def test_sync_is_granted_beside_a_running_phase_and_measured(core):
    ta = _submit(core, "a")
    rollout = core.acquire("a", "rollout", ta)
    sync = core.acquire("a", "sync", ta)  # holds no node: no wait for the rollout's nodes
    assert sync["nodes"] == [] and sync["pool"] == "link"
    rows = [(r["phase"], r["pool"], r["node"]) for r in core.status()["timeline"]]
    assert rows == [("rollout", "rollout", 0)]  # a rollout on its pool only; a sync on none
    assert {p: v["busy_gpus"] for p, v in core.status()["pools"].items()} == {"rollout": 8, "train": 0}
    core.release("a", "sync", {**TIMINGS, "grant_no": sync["grant_no"]}, ta)
    core.release("a", "rollout", {**TIMINGS, "grant_no": rollout["grant_no"]}, ta)
    assert core.status()["jobs"]["a"]["profile"]["measured"]["sync"] == pytest.approx(0.25)
