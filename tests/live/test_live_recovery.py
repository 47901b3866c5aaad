"""A restarted scheduler rebuilds its state from the journal (SQLite or Redis) and reconciles."""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from factories import make_job

from rollmux.core.spec import default_cluster
from rollmux.live.journal import open_store
from rollmux.live.service import SchedulerCore, ServiceError

CLUSTER = default_cluster().model_dump()
TIMINGS = {"wait_s": 0.0, "onload_s": 0.0, "run_s": 0.01, "offload_s": 0.0}


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request, tmp_path):
    """A fresh journal of each backend."""
    if request.param == "sqlite":
        return str(tmp_path / "journal.db")
    port = request.getfixturevalue("redis_port")
    return f"redis://127.0.0.1:{port}/0?prefix=recovery-{uuid.uuid4().hex}"


def _records(n: int = 3) -> list[dict]:
    return [make_job(f"j{i}", rollout=100, train=100, slo=2.0).model_dump(exclude_none=True) for i in range(n)]


def _comparable(status: dict) -> dict:
    """Status without what legitimately changes across a restart (clock, counters of this run)."""
    jobs = {j: {k: v for k, v in s.items() if k not in ("mean_iter_s", "slowdown")} for j, s in status["jobs"].items()}
    return {"groups": status["groups"], "jobs": jobs, "grants": status["grants"]}


def test_restart_rebuilds_groups_jobs_held_permits_and_turns(store_url):
    core = SchedulerCore(CLUSTER, store=store_url)
    tok = {r["job_id"]: core.submit(r)["token"] for r in _records()}
    assert [g["members"] for g in core.status()["groups"]] == [["j0", "j1", "j2"]]
    for _ in range(2):  # round robin: each member's phase in turn
        for phase in ("rollout", "train"):
            for j in tok:
                core.acquire(j, phase, tok[j])
                core.release(j, phase, TIMINGS, tok[j])
    core.acquire("j0", "rollout", tok["j0"])  # held across the crash
    before = _comparable(core.status())
    core.shutdown()
    again = SchedulerCore(None, store=store_url)
    try:
        assert _comparable(again.status()) == before
        assert again.status()["recovered_records"] > 10
        # The permit j0 held is still held: its retried acquire gets the same grant back...
        assert again.acquire("j0", "rollout", tok["j0"])["job_id"] == "j0"
        assert again.state.grants == before["grants"]
        # ...and tokens still work after the restart.
        again.release("j0", "rollout", TIMINGS, tok["j0"])
        assert again.status()["jobs"]["j0"]["held"] == []
    finally:
        again.shutdown()


def test_no_permit_is_granted_twice_across_a_restart(store_url):
    core = SchedulerCore(CLUSTER, store=store_url)
    tok = {r["job_id"]: core.submit(r)["token"] for r in _records(2)}
    assert [g["members"] for g in core.status()["groups"]] == [["j0", "j1"]]
    core.acquire("j0", "rollout", tok["j0"])  # j0 holds the shared rollout node
    core.shutdown()
    again = SchedulerCore(None, store=store_url)
    try:
        got = []
        t = threading.Thread(target=lambda: got.append(again.acquire("j1", "rollout", tok["j1"])))
        t.start()
        time.sleep(0.3)
        assert got == []  # j1 must wait: the node is still j0's
        again.release("j0", "rollout", TIMINGS, tok["j0"])
        t.join(timeout=5)
        assert got and got[0]["job_id"] == "j1"
    finally:
        again.shutdown()


def test_restart_keeps_finished_and_failed_jobs_out(store_url):
    core = SchedulerCore(CLUSTER, store=store_url)
    tok = {r["job_id"]: core.submit(r)["token"] for r in _records(2)}
    core.finish("j1", tok["j1"])
    core.shutdown()
    again = SchedulerCore(None, store=store_url)
    try:
        assert again.status()["jobs"]["j1"]["status"] == "done"
        assert [g["members"] for g in again.status()["groups"]] == [["j0"]]
    finally:
        again.shutdown()


def test_restart_with_a_different_cluster_is_refused(tmp_path):
    path = str(tmp_path / "j.db")
    SchedulerCore(CLUSTER, store=path).shutdown()
    other = {**CLUSTER, "warm_switch_s": 9.0}
    with pytest.raises(ServiceError, match="another cluster"):
        SchedulerCore(other, store=path)


def test_every_state_change_is_journaled_before_the_caller_sees_it(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path)
    try:
        tok = core.submit(_records(1)[0])["token"]
        core.acquire("j0", "rollout", tok)
        kinds = [r.kind for r in open_store(path, readonly=True).records()]
        assert kinds == ["config", "submit", "place", "grant"]
        core.release("j0", "rollout", TIMINGS, tok)
        assert [r.kind for r in open_store(path, readonly=True).records()][-1] == "release"
    finally:
        core.shutdown()


def test_restart_from_a_snapshot_or_a_full_replay_rebuilds_the_exact_state(tmp_path):
    for every in (0, 7):  # 0: no snapshot, replay everything; 7: snapshot, replay the rest
        path = str(tmp_path / f"j{every}.db")
        core = SchedulerCore(CLUSTER, store=path, snapshot_every=every)
        tok = {r["job_id"]: core.submit(r)["token"] for r in _records()}
        for _ in range(3):
            for phase in ("rollout", "train"):
                for j in tok:
                    core.acquire(j, phase, tok[j])
                    core.release(j, phase, TIMINGS, tok[j])
        core.acquire("j0", "rollout", tok["j0"])  # its turn; held across the restart
        core.finish("j2", tok["j2"])
        before = json.loads(json.dumps(core.dump()))
        core.shutdown()
        assert (open_store(path).snapshot() is None) == (every == 0)
        again = SchedulerCore(None, store=path)
        try:
            assert again.dump() == before
        finally:
            again.shutdown()


def test_a_reserved_move_is_journaled_and_rebuilt_by_a_restart(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path)
    jobs = [make_job("a", rollout=100, train=20), make_job("b", rollout=20, train=100),
            make_job("c", rollout=20, train=100, slo=1.05)]
    tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in jobs}
    core.finish("b", tok["b"])  # a is left alone: it fits next to c for less
    before = json.loads(json.dumps(core.dump()))
    assert set(before["arriving"]) == {"a"}
    kinds = [r.kind for r in open_store(path, readonly=True).records()]
    assert kinds.count("movers") == 1
    core.shutdown()
    again = SchedulerCore(None, store=path)
    try:
        assert again.dump() == before
        target = before["arriving"]["a"]["plan"]["group"]["group_id"]
        assert again.state.cluster.controllers[target].export_state()["held"] == ["a"]
    finally:
        again.shutdown()


def test_a_new_journal_reports_no_record_recovered_and_a_restart_counts_its_config(store_url):
    core = SchedulerCore(CLUSTER, store=store_url)
    try:
        assert core.status()["recovered_records"] == 0  # its config record was written, not recovered
    finally:
        core.shutdown()
    again = SchedulerCore(None, store=store_url)
    try:
        assert again.status()["recovered_records"] == 1
        again.submit(make_job("after").model_dump(exclude_none=True))  # its seq follows the config's
    finally:
        again.shutdown()
    assert [r.kind for r in open_store(store_url, readonly=True).records()] == ["config", "submit", "place"]


def test_a_restart_from_a_snapshot_keeps_a_migrant_that_has_not_yet_settled(tmp_path):
    path = str(tmp_path / "j.db")
    core = SchedulerCore(CLUSTER, store=path, snapshot_every=1)  # a snapshot after every batch
    jobs = [make_job("a", rollout=100, train=20), make_job("b", rollout=20, train=100),
            make_job("c", rollout=20, train=100, slo=1.05)]
    tok = {j.job_id: core.submit(j.model_dump(exclude_none=True))["token"] for j in jobs}
    core.finish("b", tok["b"])  # a is left alone: it moves next to c at its iteration's end
    for phase in ("rollout", "train"):
        core.acquire("a", phase, tok["a"])
        core.release("a", phase, TIMINGS, tok["a"])
    before = json.loads(json.dumps(core.dump()))
    assert set(before.get("settling", {})) == {"a"}  # moved; its first iteration there not yet run
    core.shutdown()
    again = SchedulerCore(None, store=path)
    try:
        assert again.recovered_records == open_store(path, readonly=True).snapshot()[0]  # all from the snapshot
        assert again.dump() == before
    finally:
        again.shutdown()
