"""A job's liveness deadlines (live/supervision.py): the start-up timeout until its first call, the heartbeat
timeout after it, journaled so that a restart keeps them apart.

The clocks are driven, not waited for: each test moves a job's last-heard time back by the silence it
plays (on the scheduler thread, where the watchdog reads it) and runs the watchdog's check there; the
watchdog's own timer is off (a check every hour)."""

from __future__ import annotations

import time
from concurrent.futures import Future

import pytest
from factories import make_cluster, make_job

from rollmux.core.spec import default_cluster
from rollmux.live.journal import open_store
from rollmux.live.service import SchedulerCore
from rollmux.live.supervision import HEARTBEAT_TIMEOUT_S, STARTUP_TIMEOUT_S

CLUSTER = default_cluster().model_dump()
HOUR = 3600.0


def _core(cluster: dict = CLUSTER, **knobs) -> SchedulerCore:
    return SchedulerCore(cluster, check_every_s=HOUR, **{"heartbeat_timeout_s": 30.0, "startup_timeout_s": 600.0,
                                                         **knobs})


def _record(job_id: str, **extra) -> dict:
    return make_job(job_id, rollout=100, train=100, slo=1.0).model_dump(exclude_none=True) | extra


def _on_thread(core: SchedulerCore, fn):
    """Run `fn` on the scheduler thread (where the clocks live) and return what it returned."""
    fut: Future = Future()

    def run() -> None:
        try:
            fut.set_result(fn())
        except BaseException as exc:  # noqa: BLE001 -- handed to the test
            fut.set_exception(exc)
    core._inbox.post(run)
    return fut.result(timeout=30)


def _silent_for(core: SchedulerCore, job_id: str, seconds: float) -> dict:
    """The job was not heard for `seconds` (its clock moved back), then the watchdog looked: its view."""
    def age() -> None:
        core._seen[job_id] -= seconds
        core._check_liveness()
        if core.journal.pending():
            core._schedule_flush()
    _on_thread(core, age)
    return core.status()["jobs"][job_id]


def test_the_library_and_the_cli_default_to_the_same_deadlines():
    from rollmux.cli.service import LIVENESS
    core = SchedulerCore(CLUSTER, check_every_s=HOUR)
    try:
        assert (core.heartbeat_timeout_s, core.startup_timeout_s) == (HEARTBEAT_TIMEOUT_S, STARTUP_TIMEOUT_S)
        assert LIVENESS["heartbeat_timeout"].default == HEARTBEAT_TIMEOUT_S
        assert LIVENESS["startup_timeout"].default == STARTUP_TIMEOUT_S
    finally:
        core.shutdown()


def test_a_job_that_has_not_called_yet_is_given_its_start_up_timeout_not_the_heartbeat_timeout():
    core = _core()
    try:
        core.submit(_record("slow"))
        assert _silent_for(core, "slow", 36.0)["status"] == "running"  # 36 s of imports: past the heartbeat timeout
        failed = _silent_for(core, "slow", 600.0)
        assert failed["status"] == "failed", failed
        assert "did not start" in failed["reason"] and "start-up timeout of 600s" in failed["reason"], failed
        assert "heartbeat" not in failed["reason"]
    finally:
        core.shutdown()


def test_the_records_start_up_timeout_wins_over_the_services():
    core = _core()
    try:
        core.submit(_record("quick", startup_timeout_s=5.0))
        failed = _silent_for(core, "quick", 6.0)
        assert failed["status"] == "failed" and "start-up timeout of 5s" in failed["reason"], failed
    finally:
        core.shutdown()


def test_after_its_first_call_a_silent_job_is_failed_for_its_heartbeats(tmp_path):
    path = str(tmp_path / "j.db")
    core = _core(store=path)
    try:
        token = core.submit(_record("a"))["token"]
        core.heartbeat("a", token)  # its first call: journaled, the heartbeat deadline starts
        assert [r.kind for r in open_store(path, readonly=True).records()][-1] == "first_call"
        core.heartbeat("a", token)  # (only the first one is journaled)
        assert [r.kind for r in open_store(path, readonly=True).records()].count("first_call") == 1
        failed = _silent_for(core, "a", 31.0)
        assert failed["status"] == "failed" and failed["reason"].startswith("no heartbeat for 31"), failed
    finally:
        core.shutdown()


def test_a_job_waiting_for_nodes_has_no_start_up_deadline_until_it_is_placed():
    cluster = make_cluster(max_rollout_nodes=1, max_train_nodes=1).model_dump()
    core = _core(cluster)
    try:
        first = core.submit(_record("first"))
        assert core.submit(_record("second"))["status"] == "queued"
        assert _silent_for(core, "second", 10 * 600.0)["status"] == "queued"  # in line: no clock
        core.finish("first", first["token"])  # its nodes free: the second is placed, its clock starts there
        assert core.status()["jobs"]["second"]["status"] == "running"
        assert _silent_for(core, "second", 599.0)["status"] == "running"
        assert _silent_for(core, "second", 2.0)["status"] == "failed"
    finally:
        core.shutdown()


def test_time_the_server_was_not_serving_does_not_count_against_a_start_up():
    core = _core()
    try:
        core.submit(_record("a"))

        def stall() -> None:  # silent for 300 s, the last 100 s of which the server was not serving
            now = time.monotonic()
            core._seen["a"] -= 300.0
            core._served_at = now - 100.0  # (the HTTP loop's last tick)
            core._discount_stalls(now)
        _on_thread(core, stall)
        assert _silent_for(core, "a", 350.0)["status"] == "running"  # 650 s silent, 550 s of them counted
        assert _silent_for(core, "a", 60.0)["status"] == "failed"
    finally:
        core.shutdown()


@pytest.mark.parametrize("snapshot_every", [0, 1])
def test_a_restart_keeps_the_jobs_that_had_not_called_on_their_start_up_deadline(tmp_path, snapshot_every):
    path = str(tmp_path / "j.db")
    core = _core(store=path, snapshot_every=snapshot_every)
    started = core.submit(_record("started"))["token"]
    core.heartbeat("started", started)
    core.submit(_record("starting"))
    core.shutdown()
    again = _core(store=path, snapshot_every=snapshot_every)
    try:
        assert again.state.jobs["started"].called and not again.state.jobs["starting"].called
        # the started job: its grace of two heartbeat timeouts, then its heartbeats
        assert _silent_for(again, "started", 59.0)["status"] == "running"
        assert "no heartbeat" in _silent_for(again, "started", 32.0)["reason"]
        # the one that had not called: its whole start-up timeout from the restart, then "did not start"
        assert _silent_for(again, "starting", 599.0)["status"] == "running"
        assert "did not start" in _silent_for(again, "starting", 2.0)["reason"]
    finally:
        again.shutdown()
