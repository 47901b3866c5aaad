"""The scheduler service: in-process, and as a detached named Ray actor."""

from __future__ import annotations

import threading
import time

import pytest

import ray

from factories import job_record, make_job, most_running_at_once, run_threads
from rollmux.live.client import RayPermitClient
from rollmux.live.service import ACTOR_NAME, NAMESPACE, SchedulerCore, ServiceError, start_service
from rollmux.shim import JobShim
from rollmux.spec import default_cluster

CLUSTER = default_cluster().model_dump()


def _two_jobs():
    return [make_job(j, rollout=100, train=100, slo=2.0).model_dump(exclude_none=True) for j in "ab"]


@pytest.fixture
def core():
    c = SchedulerCore(CLUSTER)
    yield c
    c.shutdown()


def test_submitted_complementary_jobs_share_a_group(core):
    a, b = (core.submit(r) for r in _two_jobs())
    assert a["case"] == "isolated" and b["case"] == "direct_packing"
    assert a["group_id"] == b["group_id"]
    groups = core.status()["groups"]
    assert len(groups) == 1 and groups[0]["members"] == ["a", "b"]


def test_bad_submission_is_refused_and_changes_nothing(core):
    bad = job_record("x")
    bad["slo"] = 0.5
    with pytest.raises(ServiceError, match="field slo"):
        core.submit(bad)
    huge = job_record("y")
    huge["host_gb"] = {"rollout": 10.0, "train": 5000.0}
    with pytest.raises(ServiceError, match="can never be placed"):
        core.submit(huge)
    assert core.status()["groups"] == []


def _drive(shim: JobShim, iterations: int, log: list, lock: threading.Lock) -> None:
    for _ in range(iterations):
        for phase in ("rollout", "train"):
            with shim.phase(phase):
                with lock:
                    log.append((shim.job_id, phase, "start", time.perf_counter()))
                time.sleep(0.005)
                with lock:
                    log.append((shim.job_id, phase, "end", time.perf_counter()))


def test_ray_actor_serves_permits_round_robin_without_overlap():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=NAMESPACE,
             _node_ip_address="127.0.0.1")
    try:
        handle = start_service(CLUSTER)
        client = RayPermitClient(handle)
        for r in _two_jobs():
            client.submit(r)
        assert ray.get_actor(ACTOR_NAME, namespace=NAMESPACE) is not None
        log, lock = [], threading.Lock()
        run_threads([(_drive, (JobShim(j, client), 3, log, lock)) for j in "ab"])
        for phase in ("rollout", "train"):
            assert most_running_at_once([(t, kind) for _, ph, kind, t in log if ph == phase]) == 1
        starts = [e[0] for e in sorted(log, key=lambda e: e[3]) if e[1] == "rollout" and e[2] == "start"]
        assert starts == ["a", "b"] * 3
        client.drain()
        status = ray.get(handle.status.remote())
        assert {j: s["iterations"] for j, s in status["jobs"].items()} == {"a": 3, "b": 3}
        ray.kill(handle)
    finally:
        ray.shutdown()
