"""Phase leases: a phase that outlives its lease while the job keeps beating is hung."""

from __future__ import annotations

import time

from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.service import SchedulerCore

CLUSTER = default_cluster().model_dump()
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


def test_a_permit_carries_a_lease_from_the_declared_worst_case_with_a_margin():
    core = SchedulerCore(CLUSTER, lease_factor=2.0, lease_min_s=1.0)
    try:
        job = make_job("a", rollout=100, rollout_max=150, train=40)
        tok = core.submit(job.model_dump(exclude_none=True))["token"]
        rollout = core.acquire("a", "rollout", tok)
        assert rollout["lease_s"] == 2.0 * 150 + rollout["switch_s"]
        core.release("a", "rollout", TIMINGS, tok)
        train = core.acquire("a", "train", tok)  # training scales with the worst-case rollout
        assert train["lease_s"] == 2.0 * 40 * 150 / 100 + train["switch_s"]
        assert core.lease_s(job, "rollout", 0.0) >= 1.0
    finally:
        core.shutdown()


def test_a_hung_phase_fails_the_job_reclaims_its_nodes_and_its_partner_goes_on():
    # Declared phases of 0.1 s; a lease of at least 0.5 s; heartbeats keep coming.
    fast = {**CLUSTER, "warm_switch_s": 0.005, "cold_switch_s": 0.1}  # phases of 0.1 s can share nodes
    core = SchedulerCore(fast, heartbeat_timeout_s=30.0, check_every_s=0.05, lease_factor=2.0, lease_min_s=0.5)
    try:
        jobs = [make_job(j, rollout=0.1, train=0.1, sync=0.0, slo=3.0) for j in "ab"]
        tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in jobs}
        assert len(core.status()["groups"]) == 1
        core.acquire("a", "rollout", tok["a"])  # a hangs in its rollout (a deadlocked collective)
        deadline = time.monotonic() + 30
        while core.status()["jobs"]["a"]["status"] == "running" and time.monotonic() < deadline:
            core.heartbeat("a", tok["a"])  # alive, just stuck
            core.heartbeat("b", tok["b"])
            time.sleep(0.05)
        a = core.status()["jobs"]["a"]
        assert a["status"] == "failed" and "lease" in a["reason"] and a["held"] == []
        assert core.acquire("b", "rollout", tok["b"])["job_id"] == "b"  # the node went to the partner
        again = core.submit(jobs[0].model_dump(exclude_none=True))  # resubmitted like a new arrival
        assert again["status"] == "running"
    finally:
        core.shutdown()
